"""``python -m twin``: run the fabric twin until SIGINT/SIGTERM.

Prints one summary line (fabric, SNMP ports, control API address), optionally writes the topology
YAML with the actual SNMP ports, and serves the control API (see :mod:`twin.control`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from fabricmon.core.topology.yaml_dump import dump_fabric
from twin.cluster import Twin
from twin.config import TwinConfig
from twin.control import serve_control
from twin.moe import MoeConfig
from twin.snmp_v3 import V3User


def _cycle(text: str) -> tuple[int, int]:
    skewed, sep, balanced = text.partition(",")
    try:
        pair = (int(skewed), int(balanced))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SKEWED,BALANCED step counts, got {text!r}") from None
    if not sep or pair[0] < 1 or pair[1] < 0:
        raise argparse.ArgumentTypeError(f"expected SKEWED ≥ 1 and BALANCED ≥ 0 steps, got {text!r}")
    return pair


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m twin",
                                 description="Run the fabric twin (SNMP agents + MoE job).")
    ap.add_argument("--name", default="twin", help="fabric name")
    ap.add_argument("--servers", type=int, default=32)
    ap.add_argument("--gpus-per-server", type=int, default=8)
    ap.add_argument("--spines", type=int, default=4)
    ap.add_argument("--speed-gbps", type=int, default=400)
    ap.add_argument("--routing", choices=("pxn", "ecmp"), default="pxn")
    ap.add_argument("--snmp-port-base", type=int, default=16100,
                    help="UDP port of the first switch (0 = ephemeral)")
    ap.add_argument("--snmp-version", choices=("2c", "3"), default="2c")
    ap.add_argument("--community", default="public")
    ap.add_argument("--v3-user", default="fabricmon")
    ap.add_argument("--v3-auth-protocol", default="SHA", choices=("MD5", "SHA", "SHA256", "NONE"))
    ap.add_argument("--v3-auth-key", default="fabricmon-auth")
    ap.add_argument("--v3-priv-protocol", default="AES", choices=("DES", "AES", "NONE"))
    ap.add_argument("--v3-priv-key", default="fabricmon-priv")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lossy", action="store_true",
                    help="drop overflow at egress (ifOutDiscards) instead of PFC back-pressure")
    ap.add_argument("--gnmi", action="store_true",
                    help="also serve gNMI per switch (queues, ECN, PFC, watermark); ports in the topology")
    ap.add_argument("--gnmi-port-base", type=int, default=0,
                    help="TCP port of the first switch's gNMI target (0 = ephemeral)")
    ap.add_argument("--write-topology", type=Path,
                    help="write the fabric (with actual SNMP ports) as YAML here")
    ap.add_argument("--control-port", type=int, default=0,
                    help="control API port on 127.0.0.1 (0 = ephemeral)")
    ap.add_argument("--report-url", help="post the MoE job's phase events to this fabricmon (jobs API), "
                                         "e.g. http://127.0.0.1:8000")
    ap.add_argument("--report-token-file", type=Path,
                    help="file holding the jobs API token (needed with --report-url)")
    ap.add_argument("--run-name", default="twin-moe", help="name of the reported run")
    ap.add_argument("--report-every-steps", type=int, default=1, help="report every k-th training step")
    ap.add_argument("--report-block-steps", type=int, default=1,
                    help="with --report-every-steps k: report B consecutive steps of every k·B (the same "
                         "share, but whole poll intervals of reported steps, which the projection gate "
                         "checks)")
    ap.add_argument("--report-connect-timeout-s", type=float, default=300.0,
                    help="retry creating the run (token file, server) this long, then stop reporting")
    ap.add_argument("--report-skew-ns", type=int, default=0,
                    help="shift reported event times (a wrong host clock)")
    ap.add_argument("--regime-shift-prob", type=float, default=MoeConfig.regime_shift_prob,
                    help="per training step: the hot expert jumps to another GPU (the hotspot moves)")
    ap.add_argument("--ep-size", type=int, default=MoeConfig.ep_size,
                    help="GPUs per expert-parallel group: the all-to-alls run inside groups of this many "
                         "consecutive ranks (0: one group of every GPU); must divide the GPUs")
    ap.add_argument("--step-gap-ms", type=float, default=MoeConfig.step_gap_ms,
                    help="the job's backward pass and optimizer per step (no traffic modelled): a larger "
                         "job's steps take seconds, and the twin simulates that many fewer phases a second")
    ap.add_argument("--balanced-cycle", metavar="SKEWED,BALANCED", type=_cycle, default=(0, 0),
                    help="alternate SKEWED steps of skewed popularity with BALANCED steps of uniform "
                         "routing (the 'no incast' truth a soak run checks), e.g. 900,300")
    args = ap.parse_args(argv)
    if args.report_url and not args.report_token_file:
        ap.error("--report-url needs --report-token-file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = TwinConfig(
        name=args.name,
        servers=args.servers,
        gpus_per_server=args.gpus_per_server,
        spines=args.spines,
        speed_gbps=args.speed_gbps,
        routing=args.routing,
        snmp_version=args.snmp_version,
        snmp_port_base=args.snmp_port_base,
        community=args.community,
        v3_user=V3User(args.v3_user, args.v3_auth_protocol, args.v3_auth_key,
                       args.v3_priv_protocol, args.v3_priv_key),
        seed=args.seed,
        job=MoeConfig(regime_shift_prob=args.regime_shift_prob, skewed_steps=args.balanced_cycle[0],
                      balanced_steps=args.balanced_cycle[1], ep_size=args.ep_size,
                      step_gap_ms=args.step_gap_ms),
        lossy=args.lossy,
        gnmi=args.gnmi,
        gnmi_port_base=args.gnmi_port_base,
        report_url=args.report_url,
        # read by the reporter, retried: under compose the migrate service writes it after we start
        report_token_file=str(args.report_token_file) if args.report_token_file else None,
        report_connect_timeout_s=args.report_connect_timeout_s,
        run_name=args.run_name,
        report_skew_ns=args.report_skew_ns,
        report_every_steps=args.report_every_steps,
        report_block_steps=args.report_block_steps,
    )
    twin = Twin(cfg).start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server, control_port = serve_control(twin, args.control_port)
    if args.write_topology:
        args.write_topology.write_text(dump_fabric(twin.fabric))
    ports = [sw.snmp.port for sw in twin.fabric.switches]
    port_text = f"{ports[0]}-{ports[-1]}" if args.snmp_port_base else ",".join(map(str, ports))
    print(
        f"twin {cfg.name}: {twin.fabric.description}; {len(twin.ports)} ports; SNMP v{cfg.snmp_version} on "
        f"127.0.0.1:{port_text} ({len(ports)} switches); control http://127.0.0.1:{control_port}/status"
        + (f"; gNMI on 127.0.0.1:{','.join(map(str, twin.gnmi_ports.values()))}" if args.gnmi else "")
        + (f"; topology {args.write_topology}" if args.write_topology else "")
        + (f"; reporting the job to {args.report_url}" if args.report_url else ""),
        flush=True,
    )
    stop.wait()
    server.shutdown()
    twin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
