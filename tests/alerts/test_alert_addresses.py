"""The SSRF guard's verdict on addresses (pure): every IPv4-embedding IPv6 form of a refused IPv4
address is refused too, and the metadata addresses are refused even for an allowed host name."""

from __future__ import annotations

import ipaddress

import pytest

from fabricmon.alerts.addresses import embedded_ipv4, refusal


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


# address, the IPv4 it carries (what a dual-stack socket, NAT64, 6to4 or Teredo would reach)
EMBEDDING = [
    ("::ffff:127.0.0.1", "127.0.0.1"),  # IPv4-mapped
    ("::127.0.0.1", "127.0.0.1"),  # IPv4-compatible: the issue's [::127.0.0.1]
    ("::a9fe:a9fe", "169.254.169.254"),
    ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64 well-known prefix
    ("64:ff9b::10.1.2.3", "10.1.2.3"),
    ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
    ("64:ff9b:1:7f00:0:100::", "127.0.0.1"),  # NAT64 local-use /48 (u octet skipped)
    ("64:ff9b:1:c0a8:1:100::", "192.168.1.1"),
    ("2002:7f00:1::1", "127.0.0.1"),  # 6to4
    ("2002:a9fe:a9fe::", "169.254.169.254"),
    ("2002:c0a8:101::1", "192.168.1.1"),
]


@pytest.mark.parametrize(("address", "inner"), EMBEDDING)
def test_every_embedding_form_is_refused_for_what_it_carries(address: str, inner: str) -> None:
    assert ip(inner) in embedded_ipv4(ip(address))
    why = refusal("hook.example", ip(address))
    assert why is not None
    if not address.startswith("::ffff:"):  # a mapped address *is* its IPv4: no "embeds" needed
        assert inner in why


def test_teredo_client_and_server_are_unpacked() -> None:
    # Teredo: server 65.54.227.120, client 10.0.0.1 stored inverted in the low 32 bits
    client = 0xFFFFFFFF ^ int(ip("10.0.0.1"))
    teredo = ipaddress.IPv6Address((0x20010000 << 96) | (int(ip("65.54.227.120")) << 64) | client)
    assert embedded_ipv4(teredo) == [ip("65.54.227.120"), ip("10.0.0.1")]
    assert refusal("hook.example", teredo) is not None


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.0.1",
        "100.64.0.1",
        "169.254.1.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fec0::1",
        "169.254.169.254",
        "fd00:ec2::254",
        "169.254.170.2",
        "100.100.100.200",
    ],
)
def test_private_and_special_addresses_are_refused(address: str) -> None:
    assert refusal("hook.example", ip(address)) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700::1111", "64:ff9b::8.8.8.8", "::ffff:8.8.8.8"])
def test_global_addresses_pass(address: str) -> None:
    assert refusal("hook.example", ip(address)) is None


@pytest.mark.parametrize(
    "metadata",
    ["169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1"],
)
def test_an_allowed_host_name_does_not_reach_the_metadata_service(metadata: str) -> None:
    why = refusal("am.internal", ip(metadata), ("am.internal",))
    assert why is not None and "metadata" in why
    # a range covering it does not allow it either …
    assert refusal("am.internal", ip(metadata), ("169.254.0.0/16", "fd00::/8", "64:ff9b::/96")) is not None


def test_allowances() -> None:
    # an allowed name reaches whatever private address it has
    assert refusal("am.internal", ip("10.0.0.5"), ("am.internal",)) is None
    assert refusal("AM.Internal", ip("64:ff9b::10.0.0.5"), ("am.internal",)) is None
    # a range allows what is inside it, and the forms that carry it
    assert refusal("x", ip("10.0.0.5"), ("10.0.0.0/24",)) is None
    assert refusal("x", ip("::ffff:10.0.0.5"), ("10.0.0.0/24",)) is None
    assert refusal("x", ip("10.0.1.5"), ("10.0.0.0/24",)) is not None
    # the metadata address itself, named exactly, is an admin's explicit choice
    assert refusal("x", ip("169.254.169.254"), ("169.254.169.254",)) is None
