"""A web process's burst, on its own: request bodies (100 KB–4 MB) parsed into arrays on four
threads beside small objects that stay, then dropped. Prints the resident MB after each of three
bursts (tests/test_demo.py runs it with and without the demo's malloc settings)."""

import gc
import os
import random
import threading

import numpy as np


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


keep: list[bytearray] = []


def work(n: int) -> None:
    bodies = []
    for _ in range(n):
        size = random.choice([100_000, 300_000, 1_000_000, 4_000_000])
        body = os.urandom(size // 100) * 100
        bodies.append((body, np.frombuffer(body, dtype=np.uint8).astype(np.float32)))
        keep.append(bytearray(300))  # a small survivor between the big ones (a cache entry, a session)
        if len(bodies) > 30:
            bodies.pop(0)


random.seed(1)
for _ in range(3):
    threads = [threading.Thread(target=work, args=(60,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    print(round(rss_mb()))
