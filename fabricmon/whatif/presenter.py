"""What the page prints of each figure: a few labelled numbers (the JSON holds everything)."""

from __future__ import annotations

from typing import Any


def _f(x: Any, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _gb(x: Any) -> str:
    return "—" if x is None else f"{x / 1e9:.3g} GB"


def rows(fig: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) lines for the figure's headline numbers (its values, or what is always shown)."""
    v, a, name = fig["values"], fig["always"], fig["name"]
    out: list[tuple[str, str]] = []
    if name == "hierarchy":
        for r in (v or {}).get("layers", []):
            be, ve = r["breakeven"], r["verdict"]
            out.append(
                (
                    f"layer {r['layer']}",
                    f"groups {r['groups']}×{r['ranks_per_group']}, k {_f(r['top_k'])}, "
                    f"M {_f(r['groups_per_token'])}, q {_f(r['q'])}; breakeven measured {_f(be['measured'])} "
                    f"/ fused {_f(be['fused'])} / zero {_f(be['zero'])}; ratio {_f(v['ratio'])} → "
                    f"{ve['measured']} (measured chain)",
                )
            )
        if v is None:
            for r in a.get("breakeven_per_layer", [])[:8]:
                out.append(
                    (
                        f"layer {r['layer']} breakeven",
                        f"measured chain {_f(r['measured'])} / fused "
                        f"{_f(r['fused'])} / zero overhead {_f(r['zero'])}",
                    )
                )
        for s in a.get("sensitivity", []):
            out.append(
                (
                    f"if the ratio were {_f(s['ratio'])}",
                    f"t_flat/t_hier = {_f(s['measured'])} (measured "
                    f"chain), {_f(s['fused'])} (fused), {_f(s['zero'])} (zero overhead)",
                )
            )
    elif name == "optics" and v:
        t = v["times_s"]
        out += [
            (
                "servers / region size / OCS budget",
                f"{v['servers']} / {v['region_servers']} / {v['port_budget_servers']} (α = {v['alpha']})",
            ),
            (
                "locality L(regions) / rack-contiguous",
                f"{_f(v['locality_regions'])} / {_f(v['locality_rack_contiguous'])}",
            ),
            (
                "L*(k)",
                ", ".join(f"k={k}: {_f(x)}" for k, x in zip(v["curve"]["k"], v["curve"]["L"], strict=True))
                + f"; k95 {v['curve']['k95']}, k99 {v['curve']['k99']}",
            ),
            (
                "drift step / layer",
                f"{_f(v['stability'].get('drift_step'))} / {_f(v['stability'].get('drift_layer'))}",
            ),
            (
                "top-K hit rate (prev step / prev layer / uniform)",
                " / ".join(_f(x) for x in v["stability"].get("hit_rate", {}).values()),
            ),
            (
                "t_mix / t_fat-tree (with reconfiguration)",
                f"{_f(t['mix_over_fat_tree'])} "
                f"(penalty {_f(t['reconfig_penalty'])} s); static topology {_f(t['static_over_fat_tree'])}",
            ),
            ("bytes on circuits", _f(v["bytes_on_circuits"])),
        ]
        c = v.get("cost") or {}
        if c:
            out.append(
                (
                    "cost fat-tree : MixNet / cost efficiency",
                    f"{_f(c['cost_ratio'])} / {_f(c['cost_efficiency'])} ({c['price_row_gbps']}G prices)",
                )
            )
    elif name == "collectives" and v:
        for s in v["schedules"]:
            out.append(
                (
                    s["schedule"],
                    f"{s['steps']} steps; {s['ports_used']} ports; peak {_f(s['peak_bytes'])} "
                    f"{s['unit']}; uplinks {_f(s['uplink_bytes'])}",
                )
            )
        out.append(
            (
                "at 256 GPUs",
                f"ring {v['reference_steps_256']['ring']} steps, tree {v['reference_steps_256']['tree']}",
            )
        )
    elif name == "routing" and v:
        for mode, r in v["routings"].items():
            out.append(
                (
                    mode,
                    f"peak {_gb(r['peak_bytes'])} at {r['peak_port']} ({r['peak_phase'][1]}, "
                    f"{r['peak_phase'][2]}); uplink max/mean {_f(r['uplink_max_over_mean'])}; "
                    f"hot port = measured in {_f(r['hot_matches_measured'])}",
                )
            )
        if v.get("measured"):
            out.append(
                (
                    "measured",
                    f"peak {_gb(v['measured']['peak_bytes'])}; hot "
                    f"{', '.join(v['measured']['hot_ports'][:6])}",
                )
            )
        e = v.get("ecmp_expectation")
        if e:
            out.append(
                (
                    f"ECMP expectation at {e['leaf']}",
                    f"{e['flows']} flows on {e['uplinks']} uplinks: "
                    f"P(no collision) {_f(e['p_no_collision'])}, E[max] {_f(e['expected_max_flows'])} "
                    f"flows ({_f(e['slowdown_vs_ideal'])}× ideal)",
                )
            )
    elif name == "placement" and v:
        if "error" in v:
            out.append(("placement", v["error"]))
        else:
            b, af, g = v["before"], v["after"], v["relative_gain"]
            out += [
                ("suggest a new placement", "yes" if v["suggest"] else "no (no gain found)"),
                (
                    "peak port bytes before → after",
                    f"{_gb(b['peak_port_bytes'])} → {_gb(af['peak_port_bytes'])} "
                    f"({_f(100 * g['peak_port_bytes'])} %)",
                ),
                (
                    "network bytes / cross-rail bytes gain",
                    f"{_f(100 * g['network_bytes'])} % / {_f(100 * g['cross_rail_bytes'])} %",
                ),
                ("ranks moved", str(v["ranks_moved"])),
            ]
            nc = v.get("node_choice") or {}
            if "fewest_sus" in nc:
                out.append((
                    "node choice",
                    f"{nc['run_hosts']} hosts span {nc['run_spans_sus']} of {nc['scalable_units']} scalable "
                    f"units ({_f(100 * nc['cross_su_share'])} % of bytes between SUs); fewest: "
                    f"{nc['fewest_sus']} ({', '.join(nc['suggested_sus'])})",
                ))
    return out
