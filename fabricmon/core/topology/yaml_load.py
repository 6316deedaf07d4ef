"""Read the topology file (docs/topology-format.md) into a :class:`FabricSpec`.

``load_fabric`` checks the whole file and reports *every* problem at once, each naming the file,
the entry and the field::

    su1.yaml: switches[3] (leaf-r2).ports[7]: field 'speed_gbps': expected a positive number, got 'fast'
    su1.yaml: hosts[0] (node001).gpus[2]: field 'port': switch 'leaf-r2' has no port 'Ethernet99'

so an operator fixes a file in one pass. Nothing here touches a database: the Django import
(``fabricmon.topology.services.import_fabric``) only ever sees a spec that passed. The field
readers are in ``yaml_fields.py``, the writer in ``yaml_dump.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, cast

import yaml

from fabricmon.core.masking import is_masked
from fabricmon.core.topology.spec import (
    FabricSpec,
    GnmiSettings,
    GpuSpec,
    HostSpec,
    LinkSpec,
    PortSpec,
    SnmpSettings,
    SwitchSpec,
)
from fabricmon.core.topology.yaml_dump import _SNMP_FIELDS, FORMAT, GBPS, _Loader, fabric_doc
from fabricmon.core.topology.yaml_fields import (
    _MISSING,
    TopologyError,
    _any_str,
    _choice,
    _nonneg_int,
    _one_of,
    _pos_int,
    _pos_number,
    _Reader,
    _show,
    _str,
    _udp_port,
)

AUTH_PROTOCOLS = ("NONE", "MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")
PRIV_PROTOCOLS = ("NONE", "DES", "3DES", "AES", "AES128", "AES192", "AES256")
# RFC 3414 / pysnmp refuse shorter USM pass phrases; better to say so at import than at first poll.
MIN_V3_KEY_LEN = 8


# Secrets that may instead name an environment variable: ``<field>_env: NAME``.
_SNMP_ENV_FIELDS = ("community", "v3_auth_key", "v3_priv_key")


def check_fabric(spec: FabricSpec, *, source: str | None = None) -> None:
    """Apply the file's rules to a spec built in code (railgen, twin); raise :class:`TopologyError`.

    Same rules and messages as :func:`load_fabric`, without the YAML text in between.
    """
    fabric_from_doc(fabric_doc(spec), source=source or f"fabric {spec.name!r}")


def load_fabric(text: str, *, source: str = "<string>") -> FabricSpec:
    """Parse and check a topology file; raise :class:`TopologyError` listing every problem."""
    try:
        doc = yaml.load(text, Loader=_Loader)  # a *safe* loader (C or Python)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise TopologyError([f"{source}: {at}not valid YAML: {problem}"]) from None
    return fabric_from_doc(doc, source=source)


def fabric_from_doc(doc: Any, *, source: str = "<data>") -> FabricSpec:
    """Check already-parsed topology data (e.g. from JSON); raise :class:`TopologyError`."""
    r = _Reader(source, [])
    top = r.mapping(doc, "", None) if doc is not None else None
    if top is None:
        if doc is None:
            r.error("", "empty file (expected a mapping with 'format', 'fabric', 'switches')")
        raise TopologyError(r.problems)
    spec = _load_fabric_doc(r, top)
    if r.problems or spec is None:
        raise TopologyError(r.problems)
    return spec


_TOP_FIELDS = ("format", "fabric", "description", "defaults", "switches", "hosts", "links")
_SWITCH_FIELDS = ("name", "role", "rail", "mgmt_address", "snmp", "gnmi", "ports")
_GNMI_FIELDS = ("port", "sample_interval_s")
_PORT_FIELDS = ("ifindex", "name", "speed_gbps", "speed_bps", "facing")
_HOST_FIELDS = ("name", "gpus")
_GPU_FIELDS = ("index", "nic", "rail", "switch", "port")
_LINK_FIELDS = ("a", "b")
_SNMP_ALLOWED = (*_SNMP_FIELDS, *(f"{k}_env" for k in _SNMP_ENV_FIELDS))


def _load_fabric_doc(r: _Reader, top: Mapping[str, Any]) -> FabricSpec | None:
    r.unknown(top, _TOP_FIELDS, "")
    fmt = top.get("format", _MISSING)
    if fmt is _MISSING:
        r.error("", f"missing (expected {FORMAT!r})", "format")
    elif fmt != FORMAT:
        r.error("", f"expected {FORMAT!r}, got {_show(fmt)}", "format")
    name = r.field(top, "fabric", "", _str, "a non-empty string (the fabric name)")
    description = r.field(top, "description", "", _any_str, "a string", default="")

    default_snmp: dict[str, Any] = {}
    default_gnmi: dict[str, Any] = {}
    defaults = top.get("defaults")
    if defaults is not None and (d := r.mapping(defaults, "", "defaults")) is not None:
        r.unknown(d, ("snmp", "gnmi"), "defaults")
        if d.get("snmp") is not None and (ds := r.mapping(d["snmp"], "defaults", "snmp")) is not None:
            r.unknown(ds, _SNMP_ALLOWED, "defaults.snmp")
            default_snmp = dict(ds)
        if d.get("gnmi") is not None and (dg := r.mapping(d["gnmi"], "defaults", "gnmi")) is not None:
            r.unknown(dg, _GNMI_FIELDS, "defaults.gnmi")
            default_gnmi = dict(dg)

    switches = [
        sw for i, raw in enumerate(r.items(top, "switches", "", required=True))
        if (sw := _load_switch(r, raw, i, default_snmp, default_gnmi)) is not None
    ]
    _check_switch_names(r, top)
    hosts = [
        h for i, raw in enumerate(r.items(top, "hosts", "")) if (h := _load_host(r, raw, i)) is not None
    ]
    links = [
        ln for i, raw in enumerate(r.items(top, "links", "")) if (ln := _load_link(r, raw, i)) is not None
    ]
    _check_cabling(r, top, hosts, links)
    if r.problems or not isinstance(name, str):
        return None
    return FabricSpec(name=name, switches=tuple(switches), hosts=tuple(h for _, h in hosts),
                      links=tuple(ln for _, ln in links), description=description)


def _label(section: str, i: int, raw: Any) -> str:
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return f"{section}[{i}] ({name})" if isinstance(name, str) and name else f"{section}[{i}]"


def _load_switch(r: _Reader, raw: Any, i: int, default_snmp: Mapping[str, Any],
                 default_gnmi: Mapping[str, Any] | None = None) -> SwitchSpec | None:
    where = _label("switches", i, raw)
    doc = r.mapping(raw, where)
    if doc is None:
        return None
    n_before = len(r.problems)
    r.unknown(doc, _SWITCH_FIELDS, where)
    name = r.field(doc, "name", where, _str, "a non-empty string")
    role = r.field(doc, "role", where, _choice("leaf", "spine"), _one_of("leaf", "spine"))
    rail = r.field(doc, "rail", where, _nonneg_int, "a rail number (integer >= 0)", default=None)
    if role == "leaf" and rail is None and "rail" not in doc:
        r.error(where, "missing (a leaf is a rail-leaf: say which rail)", "rail")
    if role == "spine" and rail is not None:
        r.error(where, "a spine has no rail (remove the field or make it a leaf)", "rail")
    mgmt = r.field(doc, "mgmt_address", where, _str, "a host name or IP address")
    own_snmp: Mapping[str, Any] = {}
    if doc.get("snmp") is not None and (s := r.mapping(doc["snmp"], where, "snmp")) is not None:
        r.unknown(s, _SNMP_ALLOWED, f"{where}.snmp")
        own_snmp = s
    snmp = _load_snmp(r, default_snmp, own_snmp, where)
    gnmi = None
    if "gnmi" in doc:  # a switch has a gNMI target iff it has a gnmi block (``gnmi: {}`` = defaults)
        own_gnmi = r.mapping(doc["gnmi"] if doc["gnmi"] is not None else {}, where, "gnmi")
        if own_gnmi is not None:
            r.unknown(own_gnmi, _GNMI_FIELDS, f"{where}.gnmi")
            gnmi = _load_gnmi(r, default_gnmi or {}, own_gnmi, where)
    ports = [
        p for j, praw in enumerate(r.items(doc, "ports", where))
        if (p := _load_port(r, praw, f"{where}.ports[{j}]")) is not None
    ]
    _check_port_keys(r, doc, where)
    if len(r.problems) > n_before or snmp is None:
        return None
    return SwitchSpec(name=name, role=role, rail=rail, mgmt_address=mgmt, snmp=snmp, ports=tuple(ports),
                      gnmi=gnmi)


def _load_gnmi(r: _Reader, defaults: Mapping[str, Any], own: Mapping[str, Any],
               where: str) -> GnmiSettings | None:
    """Merge ``defaults.gnmi`` under the switch's block; blame whichever block gave the bad value."""
    merged = {**defaults, **own}
    base = GnmiSettings()

    def at(key: str) -> str:
        return f"{where}.gnmi" if key in own else "defaults.gnmi"

    port = r.field(merged, "port", at("port"), _udp_port, "a TCP port (1-65535)", default=base.port)
    interval = r.field(merged, "sample_interval_s", at("sample_interval_s"), _pos_number,
                       "a positive number of seconds", default=base.sample_interval_s)
    if port is _MISSING or interval is _MISSING:
        return None
    return GnmiSettings(port=port, sample_interval_s=interval)


def _load_port(r: _Reader, raw: Any, where: str) -> PortSpec | None:
    doc = r.mapping(raw, where)
    if doc is None:
        return None
    n_before = len(r.problems)
    r.unknown(doc, _PORT_FIELDS, where)
    ifindex = r.field(doc, "ifindex", where, _pos_int, "a positive integer")
    name = r.field(doc, "name", where, _str, "a non-empty string")
    facing = r.field(doc, "facing", where, _choice("host", "fabric"), _one_of("host", "fabric"))
    speed_bps: Any = _MISSING
    if "speed_gbps" in doc and "speed_bps" in doc:
        r.error(where, "give speed_gbps or speed_bps, not both", "speed_gbps")
    elif "speed_bps" in doc:
        speed_bps = r.field(doc, "speed_bps", where, _pos_int, "a positive integer (bits per second)")
    else:
        gbps = r.field(doc, "speed_gbps", where, _pos_number, "a positive number")
        speed_bps = round(gbps * GBPS) if isinstance(gbps, float) else _MISSING
    if len(r.problems) > n_before:
        return None
    return PortSpec(ifindex=ifindex, name=name, speed_bps=speed_bps, facing=facing)


def _check_port_keys(r: _Reader, doc: Mapping[str, Any], where: str) -> None:
    raw_ports = doc.get("ports") if isinstance(doc.get("ports"), list) else []
    seen_ifx: dict[int, int] = {}
    seen_name: dict[str, int] = {}
    for j, raw in enumerate(cast(list[Any], raw_ports)):
        if not isinstance(raw, Mapping):
            continue
        ifx, name = raw.get("ifindex"), raw.get("name")
        if isinstance(ifx, int) and not isinstance(ifx, bool):
            if ifx in seen_ifx:
                r.error(f"{where}.ports[{j}]", f"duplicate ifindex {ifx} (also ports[{seen_ifx[ifx]}])",
                        "ifindex")
            seen_ifx.setdefault(ifx, j)
        if isinstance(name, str):
            if name in seen_name:
                r.error(f"{where}.ports[{j}]",
                        f"duplicate port name {name!r} (also ports[{seen_name[name]}])", "name")
            seen_name.setdefault(name, j)


def _load_snmp(r: _Reader, defaults: Mapping[str, Any], own: Mapping[str, Any],
               where: str) -> SnmpSettings | None:
    """Merge ``defaults.snmp`` under the switch's block; blame whichever block gave the bad value."""
    merged = {**defaults, **own}
    n_before = len(r.problems)

    def at(key: str) -> str:
        return f"{where}.snmp" if key in own else "defaults.snmp"

    def get(key: str, check: Callable[[Any], Any], expected: str) -> Any:
        base = getattr(SnmpSettings(), key)
        return r.field(merged, key, at(key), check, expected, default=base)

    values: dict[str, Any] = {
        "version": get("version", _choice("2c", "3"), _one_of("2c", "3")),
        "port": get("port", _udp_port, "a UDP port (1-65535)"),
        "v3_user": get("v3_user", _any_str, "a string"),
        "v3_auth_protocol": get("v3_auth_protocol", _choice(*AUTH_PROTOCOLS, upper=True),
                                _one_of(*AUTH_PROTOCOLS)),
        "v3_priv_protocol": get("v3_priv_protocol", _choice(*PRIV_PROTOCOLS, upper=True),
                                _one_of(*PRIV_PROTOCOLS)),
        "v3_context": get("v3_context", _any_str, "a string"),
        "interval_s": get("interval_s", _pos_number, "a positive number of seconds"),
        "timeout_s": get("timeout_s", _pos_number, "a positive number of seconds"),
        "retries": get("retries", _nonneg_int, "an integer >= 0"),
    }
    for key in _SNMP_ENV_FIELDS:
        values[key] = _secret(r, merged, key, at)
    # A bad default is reported once (deduplicated), so look at the values, not the problem count.
    if len(r.problems) > n_before or any(v is _MISSING for v in values.values()):
        return None

    timing_where = at("timeout_s") if {"timeout_s", "retries", "interval_s"} & set(own) == set() \
        else f"{where}.snmp"
    budget = values["timeout_s"] * (values["retries"] + 1)
    if budget >= values["interval_s"]:
        r.error(timing_where, f"timeout_s x (retries + 1) = {budget:g} s must be < interval_s = "
                f"{values['interval_s']:g} s (a slow switch would overlap its next poll)", "timeout_s")
    if values["version"] == "3":
        _check_v3(r, values, at)
    return None if len(r.problems) > n_before else SnmpSettings(**values)


def _secret(r: _Reader, merged: Mapping[str, Any], key: str, at: Callable[[str], str]) -> Any:
    env_key = f"{key}_env"
    base = getattr(SnmpSettings(), key)
    if key in merged and env_key in merged:
        r.error(at(env_key), f"give {key} or {env_key}, not both", env_key)
        return base
    if env_key in merged:
        var = r.field(merged, env_key, at(env_key), _str, "an environment variable name")
        if not isinstance(var, str):
            return base
        value = os.environ.get(var)
        if value is None:
            r.error(at(env_key), f"environment variable {var!r} is not set", env_key)
            return base
        return value
    # Secrets are never echoed back in errors: say only what kind of value was wrong.
    value = merged.get(key, base)
    if not isinstance(value, str):
        r.error(at(key), f"expected a string, got a {type(value).__name__}", key)
        return base
    return value


def _check_v3(r: _Reader, v: Mapping[str, Any], at: Callable[[str], str]) -> None:
    if not v["v3_user"]:
        r.error(at("v3_user"), "SNMP v3 needs a user (v3_user)", "v3_user")
    auth, priv = v["v3_auth_protocol"], v["v3_priv_protocol"]
    # A masked key (an export, "••••…") stands for the stored one: the import keeps that or refuses.
    if auth != "NONE" and len(v["v3_auth_key"]) < MIN_V3_KEY_LEN and not is_masked(v["v3_auth_key"]):
        what = "missing" if not v["v3_auth_key"] else f"shorter than {MIN_V3_KEY_LEN} characters"
        r.error(at("v3_auth_key"), f"SNMP v3 with auth {auth} needs an auth key: {what} "
                "(give v3_auth_key or v3_auth_key_env)", "v3_auth_key")
    if priv != "NONE":
        if auth == "NONE":
            r.error(at("v3_priv_protocol"), "privacy without authentication is not allowed in SNMP v3 "
                    "(set v3_auth_protocol)", "v3_priv_protocol")
        if len(v["v3_priv_key"]) < MIN_V3_KEY_LEN and not is_masked(v["v3_priv_key"]):
            what = "missing" if not v["v3_priv_key"] else f"shorter than {MIN_V3_KEY_LEN} characters"
            r.error(at("v3_priv_key"), f"SNMP v3 with privacy {priv} needs a priv key: {what} "
                    "(give v3_priv_key or v3_priv_key_env)", "v3_priv_key")


def _check_switch_names(r: _Reader, top: Mapping[str, Any]) -> None:
    raw = top.get("switches") if isinstance(top.get("switches"), list) else []
    seen: dict[str, int] = {}
    for i, sw in enumerate(cast(list[Any], raw)):
        name = sw.get("name") if isinstance(sw, Mapping) else None
        if isinstance(name, str):
            if name in seen:
                r.error(_label("switches", i, sw),
                        f"duplicate switch name {name!r} (also switches[{seen[name]}])", "name")
            seen.setdefault(name, i)


def _load_host(r: _Reader, raw: Any, i: int) -> tuple[str, HostSpec] | None:
    where = _label("hosts", i, raw)
    doc = r.mapping(raw, where)
    if doc is None:
        return None
    n_before = len(r.problems)
    r.unknown(doc, _HOST_FIELDS, where)
    name = r.field(doc, "name", where, _str, "a non-empty string")
    gpus: list[GpuSpec] = []
    for j, graw in enumerate(r.items(doc, "gpus", where)):
        gwhere = f"{where}.gpus[{j}]"
        g = r.mapping(graw, gwhere)
        if g is None:
            continue
        r.unknown(g, _GPU_FIELDS, gwhere)
        vals = {
            "index": r.field(g, "index", gwhere, _nonneg_int, "an integer >= 0"),
            "nic": r.field(g, "nic", gwhere, _str, "a NIC name (e.g. mlx5_0)"),
            "rail": r.field(g, "rail", gwhere, _nonneg_int, "a rail number (integer >= 0)"),
            "switch": r.field(g, "switch", gwhere, _str, "a switch name"),
            "port": r.field(g, "port", gwhere, _str, "a port name of that switch"),
        }
        if _MISSING not in vals.values():
            gpus.append(GpuSpec(**vals))
    seen: dict[int, int] = {}
    for j, gpu in enumerate(gpus):
        if gpu.index in seen:
            r.error(f"{where}.gpus[{j}]", f"duplicate GPU index {gpu.index} on this host", "index")
        seen.setdefault(gpu.index, j)
    if len(r.problems) > n_before:
        return None
    return where, HostSpec(name=name, gpus=tuple(gpus))


def _split_endpoint(v: Any) -> tuple[str, str]:
    # Split at the first ':' — port names may contain one (Junos breakout "et-0/0/1:2").
    if not isinstance(v, str) or ":" not in v:
        raise TypeError
    sw, _, port = v.partition(":")
    if not sw or not port:
        raise ValueError
    return sw, port


def _load_link(r: _Reader, raw: Any, i: int) -> tuple[str, LinkSpec] | None:
    where = f"links[{i}]"
    doc = r.mapping(raw, where)
    if doc is None:
        return None
    r.unknown(doc, _LINK_FIELDS, where)
    a = r.field(doc, "a", where, _split_endpoint, "'switch:port'")
    b = r.field(doc, "b", where, _split_endpoint, "'switch:port'")
    if a is _MISSING or b is _MISSING:
        return None
    return where, LinkSpec(a_switch=a[0], a_port=a[1], b_switch=b[0], b_port=b[1])


def _known_ports(top: Mapping[str, Any]) -> tuple[dict[str, set[str]], list[int]]:
    """Switch → port names and the leaves' rails, read leniently from the raw file, so a switch
    with a bad field elsewhere does not also make every cable to it "unknown"."""
    ports: dict[str, set[str]] = {}
    rails: set[int] = set()
    raw = top.get("switches")
    for sw in raw if isinstance(raw, list) else []:
        if not isinstance(sw, Mapping) or not isinstance(sw.get("name"), str):
            continue
        raw_ports = sw.get("ports")
        names = ports.setdefault(sw["name"], set())
        for p in raw_ports if isinstance(raw_ports, list) else []:
            if isinstance(p, Mapping) and isinstance(p.get("name"), str):
                names.add(p["name"])
        rail = sw.get("rail")
        if sw.get("role") == "leaf" and isinstance(rail, int) and not isinstance(rail, bool):
            rails.add(rail)
    return ports, sorted(rails)


def _check_cabling(r: _Reader, top: Mapping[str, Any], hosts: list[tuple[str, HostSpec]],
                   links: list[tuple[str, LinkSpec]]) -> None:
    """Every cable end names an existing port, once; every GPU rail is served by some leaf."""
    ports, rails = _known_ports(top)
    cabled: dict[tuple[str, str], str] = {}

    def plug(where: str, field: str, switch: str, port: str) -> None:
        if switch not in ports:
            r.error(where, f"unknown switch {switch!r}", field)
        elif port not in ports[switch]:
            r.error(where, f"switch {switch!r} has no port {port!r}", field)
        elif (switch, port) in cabled:
            r.error(where, f"port {switch}:{port} is cabled twice (also {cabled[switch, port]})", field)
        else:
            cabled[switch, port] = where

    hosts_seen: dict[str, str] = {}
    for where, host in hosts:
        if host.name in hosts_seen:
            r.error(where, f"duplicate host name {host.name!r} (also {hosts_seen[host.name]})", "name")
        hosts_seen.setdefault(host.name, where)
        for j, g in enumerate(host.gpus):
            gwhere = f"{where}.gpus[{j}]"
            if g.rail not in rails:
                known = ", ".join(map(str, rails)) or "none"
                r.error(gwhere, f"unknown rail {g.rail} (the leaves serve rails: {known})", "rail")
            plug(gwhere, "port" if g.switch in ports else "switch", g.switch, g.port)
    for where, ln in links:
        plug(where, "a", ln.a_switch, ln.a_port)
        plug(where, "b", ln.b_switch, ln.b_port)
