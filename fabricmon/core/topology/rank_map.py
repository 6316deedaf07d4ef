"""A job's ranks on a fabric: which GPU each rank ran on, its NIC, and the rail-leaf port that NIC
plugs into — from what a job knows about itself (host names and local ranks)::

    switch + switch_port ──▶ the GPU whose NIC is cabled there          (what the cabling says)
    host + nic           ──▶ that NIC of the host ─┐
    host + local_rank    ──▶ GPU local_rank of the host ──▶ its NIC ──▶ rail-leaf r : port

Host names are matched as given, else case-insensitively by their short name (before the first
dot): a probe on ``node017.cluster.local`` is ``node017`` of the topology. Everything a job sends
that the fabric does not know — a host, a NIC, a switch port — is an error naming it and what the
fabric has instead, never a silent fallback: an unplaced rank is a hole in every projected view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fabricmon.core.topology.spec import FabricSpec, GpuSpec, HostSpec


class RankMapError(ValueError):
    """One entry the fabric cannot place: ``field`` is the entry's key at fault."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field, self.reason = field, reason


def ranges_text(numbers: Iterable[int], most: int = 12) -> str:
    """``[0, 1, 2, 3, 7, 9, 10]`` → ``"0–3, 7, 9–10"``; past ``most`` ranges: ``"… (and N more)"``."""
    runs: list[tuple[int, int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    shown = [str(a) if a == b else f"{a}–{b}" for a, b in runs[:most]]
    rest = sum(b - a + 1 for a, b in runs[most:])
    return ", ".join(shown) + (f" … (and {rest} more)" if rest else "")


def _short(name: str) -> str:
    return name.split(".", 1)[0].lower()


def _names(names: Sequence[str], most: int = 4) -> str:
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[: most - 1])}, …, {names[-1]}; {len(names)} in all"


@dataclass(frozen=True)
class Placed:
    """One rank's place on the fabric: the rank-map entry as stored."""

    rank: int
    host: str
    local_rank: int
    gpu: str
    nic: str
    switch: str
    switch_port: str
    rail: int

    def entry(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "host": self.host, "local_rank": self.local_rank, "gpu": self.gpu,
            "nic": self.nic, "switch": self.switch, "switch_port": self.switch_port,
        }


class FabricHosts:
    """The fabric's GPUs by host, by NIC and by the switch port each NIC plugs into (build once per
    fabric version: a dict lookup per entry after that)."""

    def __init__(self, spec: FabricSpec) -> None:
        self.fabric = spec.name
        self.hosts: dict[str, HostSpec] = {h.name: h for h in spec.hosts}
        self.host_names = sorted(self.hosts)
        by_short: dict[str, list[str]] = {}
        for name in self.host_names:
            by_short.setdefault(_short(name), []).append(name)
        self._by_short = by_short
        self._gpus = {h.name: sorted(h.gpus, key=lambda g: g.index) for h in spec.hosts}
        self._by_port: dict[tuple[str, str], tuple[str, GpuSpec]] = {
            (g.switch, g.port): (h.name, g) for h in spec.hosts for g in h.gpus
        }
        self._switches = {sw.name for sw in spec.switches}

    def host(self, name: str) -> str:
        """The topology's name for host ``name`` (``RankMapError`` naming the hosts it has)."""
        if name in self.hosts:
            return name
        found = self._by_short.get(_short(name), [])
        if len(found) == 1:
            return found[0]
        if found:
            raise RankMapError("host", f"host {name!r} matches several hosts of fabric {self.fabric!r}: "
                                       f"{_names(found)}; send the full name")
        has = _names(self.host_names) if self.host_names else "none: its topology declares no hosts"
        raise RankMapError("host", f"host {name!r} is not in fabric {self.fabric!r} (its hosts: {has}); send "
                                   "the topology's host name (the probe: host= or FABRICMON_HOST)")

    def gpus_of(self, host: str) -> list[GpuSpec]:
        return self._gpus[host]

    def place(self, entry: Mapping[str, Any]) -> Placed:
        """Where one entry's rank ran (see the module doc for the order); ``RankMapError`` else."""
        rank = int(entry["rank"])
        switch, port = str(entry.get("switch") or ""), str(entry.get("switch_port") or "")
        nic = str(entry.get("nic") or "")
        local = entry.get("local_rank")
        if switch or port:
            return self._at_port(rank, switch, port, nic)
        host = self.host(str(entry.get("host") or ""))
        gpus = self._gpus[host]
        if nic:
            by_nic = next((g for g in gpus if g.nic == nic), None)
            if by_nic is None:
                has = _names([g.nic for g in gpus], 8) or "none"
                raise RankMapError("nic", f"NIC {nic!r} is not a NIC of {host} in fabric {self.fabric!r} "
                                          f"(its NICs: {has})")
            return _placed(rank, host, by_nic)
        if type(local) is not int:
            raise RankMapError("local_rank", f"rank {rank} on {host}: give local_rank (the GPU's index "
                                             "on the host, torchrun's LOCAL_RANK), nic, or switch and "
                                             "switch_port")
        by_index = next((g for g in gpus if g.index == local), None)
        if by_index is None:
            have = ranges_text(g.index for g in gpus) or "none"
            raise RankMapError("local_rank", f"{host} has GPUs {have} in fabric {self.fabric!r}, "
                                             f"not local_rank {local}")
        return _placed(rank, host, by_index)

    def _at_port(self, rank: int, switch: str, port: str, nic: str) -> Placed:
        if not (switch and port):
            raise RankMapError("switch_port" if switch else "switch",
                               "switch and switch_port go together (the leaf and the port the NIC uses)")
        hit = self._by_port.get((switch, port))
        if hit is None:
            where = "" if switch in self._switches else f" (no switch {switch!r} in it)"
            raise RankMapError("switch_port", f"no NIC of fabric {self.fabric!r} is cabled to "
                                              f"{switch}:{port}{where}")
        host, gpu = hit
        if nic and nic != gpu.nic:
            raise RankMapError("nic", f"NIC {nic!r} is not the NIC cabled to {switch}:{port} "
                                      f"(that is {gpu.nic} of {host})")
        return _placed(rank, host, gpu)

    def build(
        self, hosts: Sequence[str], gpus_per_host: int | None = None, first_rank: int = 0
    ) -> tuple[list[Placed], list[tuple[int, RankMapError]]]:
        """A rank map from the job's host list in rank order (torchrun's node ranks, Slurm's block
        distribution): host i holds ranks ``first_rank + i·G … + G−1`` on its first G GPUs (index
        order), G being ``gpus_per_host`` or, when omitted, the most GPUs any listed host has in the
        topology. Errors, with the host's position in the list (0-based), name each host that is
        unknown or has fewer GPUs; its ranks stay unplaced (the check names them as missing) and
        the ranks after it keep their numbers."""
        known: list[str | None] = []
        errors: list[tuple[int, RankMapError]] = []
        for i, given in enumerate(hosts):
            try:
                known.append(self.host(given))
            except RankMapError as exc:
                known.append(None)
                errors.append((i, exc))
        per_host = gpus_per_host
        if per_host is None:
            per_host = max((len(self._gpus[h]) for h in known if h is not None), default=0)
        placed: list[Placed] = []
        for i, host in enumerate(known):
            if host is None:
                continue
            gpus = self._gpus[host]
            if per_host > len(gpus):
                errors.append((i, RankMapError("gpus_per_host", f"{host} has {len(gpus)} GPUs in fabric "
                                                                f"{self.fabric!r}, not {per_host}")))
            base = first_rank + i * per_host
            placed.extend(_placed(base + j, host, gpu) for j, gpu in enumerate(gpus[:per_host]))
        return placed, errors


def _placed(rank: int, host: str, gpu: GpuSpec) -> Placed:
    return Placed(rank, host, gpu.index, f"gpu{gpu.index}", gpu.nic, gpu.switch, gpu.port, gpu.rail)


def missing_ranks(ranks: Iterable[int], world_size: int) -> list[int]:
    """The ranks of a world of ``world_size`` that ``ranks`` does not hold, in order."""
    held = set(ranks)
    return [r for r in range(world_size) if r not in held]
