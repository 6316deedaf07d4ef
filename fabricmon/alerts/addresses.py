"""Which addresses a notification may connect to: the SSRF guard's verdict, pure and Django-free.

An IPv6 address can carry an IPv4 address inside it, and a packet sent to it may end up at that
IPv4 address (a dual-stack socket, a NAT64 gateway, a 6to4 relay, a Teredo tunnel). Python's
``is_global`` does not look inside these (3.11 calls ``::127.0.0.1``, ``64:ff9b::7f00:1`` and
``2002:7f00:1::`` global), so every embedded IPv4 is taken out and judged as well::

    ::ffff:a.b.c.d          IPv4-mapped (RFC 4291)        → a.b.c.d (the same endpoint)
    ::a.b.c.d               IPv4-compatible (deprecated)  → a.b.c.d
    64:ff9b::a.b.c.d        NAT64 well-known /96 (RFC 6052)
    64:ff9b:1:XXXX:XX..     NAT64 local-use /48 (RFC 8215, RFC 6052 §2.2 layout, u octet skipped)
    2002:AABB:CCDD::/48     6to4 (RFC 3056)               → the 32 bits after 2002:
    2001:0:SSSS:SSSS::~C    Teredo (RFC 4380)             → server, and the client (bits inverted)

An address passes when every one of these (the address itself and what it embeds) is global
(not loopback, private, link-local, CGNAT, site-local, multicast …) or inside a range an admin
allowed; a host name an admin allowed passes whatever it resolves to — except the cloud metadata
services, which are refused for every name and range unless the address itself is allowed.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Instance metadata and credential endpoints: reaching one hands out the machine's cloud keys.
METADATA: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack IMDS
        "fd00:ec2::254",  # AWS IMDS over IPv6 (Nitro)
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.170.23",  # AWS EKS Pod Identity agent
        "fd00:ec2::23",  # AWS EKS Pod Identity agent over IPv6
        "100.100.100.200",  # Alibaba Cloud ECS metadata
        "192.0.0.192",  # Oracle Cloud Infrastructure Classic metadata
    )
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_COMPAT = ipaddress.ip_network("::/96")


def embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address an IPv6 address carries, by the forms in the module docstring."""
    if isinstance(ip, ipaddress.IPv4Address):
        return []
    bits = int(ip)
    low32 = ipaddress.IPv4Address(bits & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in _COMPAT or ip in _NAT64:
        return [low32]
    if ip in _NAT64_LOCAL:  # /48 prefix: v4 bits 48..63, then the u octet (64..71), then 72..87
        hi16 = (bits >> 64) & 0xFFFF
        lo16 = (bits >> 40) & 0xFFFF
        return [ipaddress.IPv4Address((hi16 << 16) | lo16)]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        server, client = ip.teredo
        return [server, client]
    return []


def _is_public(ip: IPAddress) -> bool:
    if not ip.is_global or ip.is_multicast or ip.is_unspecified:
        return False
    return not (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)


def _networks(allow: tuple[str, ...]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    for raw in allow:
        try:
            nets.append(ipaddress.ip_network(raw.strip(), strict=False))
        except ValueError:
            continue  # a host name
    return nets


def refusal(host: str, ip: IPAddress, allow: tuple[str, ...] = ()) -> str | None:
    """``None`` if a notification may connect to ``ip`` (resolved from ``host``), else why not —
    a phrase to follow the address in a message ("", or " (which embeds 127.0.0.1)")."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:a.b.c.d *is* a.b.c.d on a dual-stack socket
    inner = embedded_ipv4(ip)
    nets = _networks(allow)
    for addr in (ip, *inner):
        if addr in METADATA and not any(net.num_addresses == 1 and addr in net for net in nets):
            return _why(ip, addr, " (a cloud metadata address)")
    names = {a.strip().lower() for a in allow}
    if host.lower().strip("[]") in names:
        return None
    for addr in (*inner, ip):  # what it carries first: the message names the address that matters
        if not (_is_public(addr) or any(addr in net for net in nets)):
            return _why(ip, addr, "")
    return None


def _why(ip: IPAddress, addr: IPAddress, what: str) -> str:
    return what if addr == ip else f" (which embeds {addr}{what})"
