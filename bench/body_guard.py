"""Body guard benchmark: what a hostile POST to the events endpoint costs the server — time to its
answer (seen while the client is still sending) and the server process's peak RSS growth — through
``python -m fabricmon.serve`` (Daphne with the guard), beside the reference: plain Daphne, which
reads the whole body before the application is called (issue 13: 2 GB unauthenticated → 401 after
10.4 s, 2.2 GB RSS). The reference is run on a smaller body (``--reference-mb``, 256 MiB) so the
bench does not take 2 GB from a shared machine; its cost grows with the body.

Target (issue 13): an unauthenticated 2 GB POST costs ≤ 50 MB and ≤ 0.2 s.

    .venv/bin/python bench/body_guard.py [--gb 2] [--reference-mb 256]
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "jobs"))

SETUP = """
from django.contrib.auth import get_user_model
from fabricmon.jobs.runs import create_run
from fabricmon.jobs.tokens import issue_token
user = get_user_model().objects.create_user("bench")
print(repr((create_run(user, "bench", world_size=4).pk, issue_token(user, "b")[1])))
"""


def measure(server_module: str, size: int, headers_of, chunked: bool = False) -> tuple[int, float, float]:  # type: ignore[no-untyped-def]
    """(status, seconds to the answer, MB of peak RSS growth) of one POST to a fresh server."""
    import asgi_server
    from body_sender import post_body, reset_peak, status_kb

    tmp = Path(tempfile.mkdtemp(prefix="bench-guard-"))
    env = asgi_server.server_env(tmp, os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    asgi_server.manage(env, "migrate", "--noinput")
    run, token = ast.literal_eval(asgi_server.manage(env, "shell", "-c", SETUP).strip().splitlines()[-1])
    original = subprocess.Popen

    def popen(args, **kw):  # type: ignore[no-untyped-def]  # the server module under test
        args = [server_module if a == "fabricmon.serve" else a for a in args]
        return original(args, **kw)

    subprocess.Popen = popen  # type: ignore[misc]
    try:
        proc, url = asgi_server.start_daphne(env, tmp / "server.log")
    finally:
        subprocess.Popen = original  # type: ignore[misc]
    try:
        reset_peak(proc.pid)
        before = status_kb(proc.pid, "VmRSS")
        answer = post_body(url, f"/jobs/api/runs/{run}/events", size, headers_of(token), chunked=chunked,
                           timeout_s=600)
        grew = (status_kb(proc.pid, "VmHWM") - before) / 1024
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return answer.status, answer.seconds, grew


def upload_cost(server_module: str, size: int) -> tuple[int, float, float]:
    """(status, seconds, MB of peak RSS growth) of an authenticated inline upload of ``size``
    bytes of blanks (read in full, then refused as no trace): what holding an upload costs."""
    import http.client
    import time
    import urllib.parse

    import asgi_server
    from body_sender import reset_peak, status_kb

    tmp = Path(tempfile.mkdtemp(prefix="bench-upload-"))
    env = asgi_server.server_env(tmp, os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    asgi_server.manage(env, "migrate", "--noinput")
    run, token = ast.literal_eval(asgi_server.manage(env, "shell", "-c", SETUP).strip().splitlines()[-1])
    original = subprocess.Popen
    subprocess.Popen = lambda args, **kw: original(  # type: ignore[misc,assignment]
        [server_module if a == "fabricmon.serve" else a for a in args], **kw)
    try:
        proc, url = asgi_server.start_daphne(env, tmp / "server.log")
    finally:
        subprocess.Popen = original  # type: ignore[misc]
    b = "benchboundary"
    head = (f'--{b}\r\nContent-Disposition: form-data; name="kind"\r\n\r\nkineto\r\n--{b}\r\n'
            f'Content-Disposition: form-data; name="mode"\r\n\r\ninline\r\n--{b}\r\n'
            'Content-Disposition: form-data; name="file"; filename="t.json"\r\n\r\n').encode()
    tail = f"\r\n--{b}--\r\n".encode()

    def pieces():  # type: ignore[no-untyped-def]
        yield head
        for _ in range(size >> 20):
            yield b" " * (1 << 20)
        yield tail

    try:
        u = urllib.parse.urlsplit(url)
        reset_peak(proc.pid)
        before = status_kb(proc.pid, "VmRSS")
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        t0 = time.perf_counter()
        conn.request("POST", f"/jobs/api/runs/{run}/uploads", body=pieces(), headers={
            "Authorization": f"Bearer {token}", "Content-Type": f"multipart/form-data; boundary={b}",
            "Content-Length": str(len(head) + (size >> 20 << 20) + len(tail))})
        resp = conn.getresponse()
        resp.read()
        secs = time.perf_counter() - t0
        grew = (status_kb(proc.pid, "VmHWM") - before) / 1024
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return resp.status, secs, grew


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--reference-mb", type=int, default=256)
    args = ap.parse_args()
    size, ref_size = int(args.gb * (1 << 30)), args.reference_mb << 20
    anonymous = lambda _t: {}  # noqa: E731
    authed = lambda t: {"Authorization": f"Bearer {t}"}  # noqa: E731
    rows = {
        "unauth": measure("fabricmon.serve", size, anonymous),
        "unauth_chunked": measure("fabricmon.serve", size, anonymous, chunked=True),
        "over_limit": measure("fabricmon.serve", size, authed),
        "over_limit_chunked": measure("fabricmon.serve", 96 << 20, authed, chunked=True),
        "reference": measure("daphne", ref_size, anonymous),
        "upload_100mb": upload_cost("fabricmon.serve", 100 << 20),
        "upload_100mb_daphne": upload_cost("daphne", 100 << 20),
    }
    for name, (status, secs, grew) in rows.items():
        print(f"{name:20s} status {status}  answer after {secs:7.3f} s  server peak RSS +{grew:7.1f} MB")
    _, ref_s, ref_mb = rows["reference"]
    _, s, mb = rows["unauth"]
    per_gb = (1 << 30) / ref_size
    print(
        f"BENCH body_guard unauth_{args.gb:g}gb_s={s:.3f} unauth_{args.gb:g}gb_rss_mb={mb:.1f} "
        f"unauth_chunked_s={rows['unauth_chunked'][1]:.3f} "
        f"unauth_chunked_rss_mb={rows['unauth_chunked'][2]:.1f} "
        f"over_limit_413_s={rows['over_limit'][1]:.3f} "
        f"over_limit_chunked_413_s={rows['over_limit_chunked'][1]:.3f} "
        f"daphne_{args.reference_mb}mb_s={ref_s:.3f} daphne_{args.reference_mb}mb_rss_mb={ref_mb:.1f} "
        f"daphne_per_gb_s={ref_s * per_gb:.2f} "
        f"time_ratio_per_gb={(ref_s * per_gb) / max(s / args.gb, 1e-6):.0f} "
        f"upload_100mb_s={rows['upload_100mb'][1]:.1f} upload_100mb_rss_mb={rows['upload_100mb'][2]:.0f} "
        f"daphne_upload_100mb_s={rows['upload_100mb_daphne'][1]:.1f} "
        f"daphne_upload_100mb_rss_mb={rows['upload_100mb_daphne'][2]:.0f} "
        f"upload_rss_ratio={rows['upload_100mb_daphne'][2] / max(rows['upload_100mb'][2], 1):.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
