"""SNMPv3 User-based Security Model for the fast client: RFC 3414 USM, RFC 7860 HMAC-SHA-2 and
RFC 3826 AES-CFB128, on ``cryptography`` (no cipher or HMAC of our own).

One :class:`UsmSession` per (agent, user) holds what the agent told us (its engine id, boots and
time, kept as an offset to our monotonic clock) and the keys localized to that engine::

    GET (no varbinds, noAuthNoPriv, reportable) ──▶ agent
    ◀── Report usmStatsUnknownEngineIDs, engine id + boots + time      (discovery: once per agent)
    GETBULK, authPriv: HMAC over the message, scoped PDU AES-CFB encrypted ──▶
    ◀── Response, authenticated (HMAC checked) and decrypted → the v2c PDU reader reads it as is

A Report from the agent is an error with its name (unknownUserName, wrongDigest,
decryptionError, unsupportedSecLevel), except unknownEngineID (the agent rebooted with a new id:
discover again) and notInTimeWindow (authenticated: take its boots/time and resend), which
:func:`~collectors.snmp.v2c.walk_columns` answers by resending once.

Supported here: auth NONE/MD5/SHA/SHA224/SHA256/SHA384/SHA512, priv NONE/AES(128). DES, 3DES
and AES-192/256 (two incompatible key extensions exist in the field) go through pysnmp.
"""

from __future__ import annotations

import hmac as std_hmac
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as crypto_hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

try:  # cryptography ≥ 47 keeps CFB among the "decrepit" modes (still maintained, still C)
    from cryptography.hazmat.decrepit.ciphers.modes import CFB
except ImportError:  # pragma: no cover - older cryptography
    from cryptography.hazmat.primitives.ciphers.modes import CFB

from collectors.snmp.ber import (
    INTEGER,
    OCTET_STRING,
    REPORT,
    SEQUENCE,
    ResponseHeader,
    encode_int,
    encode_oid,
    iter_varbinds,
    malformed,
    parse_pdu,
    read_integer,
    read_tlv,
    tlv,
)
from collectors.snmp.errors import SnmpPollError
from fabricmon.core.topology.spec import SnmpSettings

# auth protocol → (hash, truncated MAC length): RFC 3414 §6/§7 (HMAC-96), RFC 7860 §4.2.
AUTH: dict[str, tuple[type[hashes.HashAlgorithm], int]] = {
    "MD5": (hashes.MD5, 12),
    "SHA": (hashes.SHA1, 12),
    "SHA224": (hashes.SHA224, 16),
    "SHA256": (hashes.SHA256, 24),
    "SHA384": (hashes.SHA384, 32),
    "SHA512": (hashes.SHA512, 48),
}
PRIV_AES128 = ("AES", "AES128")
FLAG_AUTH, FLAG_PRIV, FLAG_REPORTABLE = 0x01, 0x02, 0x04
USM_MODEL = 3
MAX_MESSAGE_SIZE = 65507  # what we accept back: the largest UDP payload over IPv4
TIME_WINDOW_S = 150  # RFC 3414 §3.2 step 7b
_USM_STATS = (1, 3, 6, 1, 6, 3, 15, 1, 1)
# usmStats* report counters (RFC 3414 §5): the OID an agent's Report names → our word for it.
REPORT_NAMES = {
    encode_oid((*_USM_STATS, n, 0)): name
    for n, name in enumerate(("unsupportedSecLevel", "notInTimeWindow", "unknownUserName",
                              "unknownEngineID", "wrongDigest", "decryptionError"), start=1)
}  # fmt: skip
# Reports the walk answers by resending (once) instead of failing.
RECOVERABLE = frozenset({"unknownEngineID", "notInTimeWindow"})


def protocol_word(name: str) -> str:
    """``SHA-256`` / ``sha256`` → ``SHA256`` (how the topology file and the admin may spell it)."""
    return name.upper().replace("-", "")


def fast_path_supports(settings: SnmpSettings) -> bool:
    """True if this module can speak ``settings``' v3 protocols (else the poller uses pysnmp)."""
    auth, priv = protocol_word(settings.v3_auth_protocol), protocol_word(settings.v3_priv_protocol)
    if auth != "NONE" and (auth not in AUTH or not settings.v3_auth_key):
        return False
    if priv != "NONE" and (priv not in PRIV_AES128 or auth == "NONE" or not settings.v3_priv_key):
        return False
    return settings.version == "3" and bool(settings.v3_user)


# --- keys (RFC 3414 §A.2, the same algorithm over SHA-2 for RFC 7860) ----------------------------


@lru_cache(maxsize=256)
def password_to_key(password: bytes, auth: str) -> bytes:
    """Ku: the hash of the password repeated to 1 MiB (RFC 3414 §A.2.1/§A.2.2)."""
    if not password:
        raise ValueError("an empty SNMPv3 password has no key")
    digest = hashes.Hash(AUTH[auth][0]())
    digest.update((password * (1_048_576 // len(password) + 1))[:1_048_576])
    return digest.finalize()


def localize_key(ku: bytes, engine_id: bytes, auth: str) -> bytes:
    """Kul = H(Ku ‖ engineID ‖ Ku): the key as one agent knows it (RFC 3414 §2.6)."""
    digest = hashes.Hash(AUTH[auth][0]())
    digest.update(ku + engine_id + ku)
    return digest.finalize()


# --- the session ---------------------------------------------------------------------------------


@dataclass
class UsmSession:
    """One user at one agent: credentials, what discovery learnt, and localized keys."""

    user: bytes
    auth: str  # a key of AUTH, or "NONE"
    priv: str  # "AES" or "NONE"
    auth_password: bytes = field(repr=False)
    priv_password: bytes = field(repr=False)
    context: bytes = b""
    engine_id: bytes = b""
    boots: int = 0
    _time_offset_s: float = 0.0  # agent's engine time = monotonic() + this
    _auth_key: bytes = field(default=b"", repr=False)
    _priv_key: bytes = field(default=b"", repr=False)
    _aes: algorithms.AES | None = field(default=None, repr=False)
    _hmac: crypto_hmac.HMAC | None = field(default=None, repr=False)
    _salt: int = field(default_factory=lambda: int.from_bytes(os.urandom(8), "big"))
    # An authentic, decrypted Response came back since the engine id was learnt: the keys are
    # right, so a later silence is the agent's or the network's, not a wrong priv key.
    verified: bool = False

    @classmethod
    def from_settings(cls, settings: SnmpSettings) -> UsmSession:
        return cls(
            user=settings.v3_user.encode(), auth=protocol_word(settings.v3_auth_protocol),
            priv="AES" if protocol_word(settings.v3_priv_protocol) in PRIV_AES128 else "NONE",
            auth_password=settings.v3_auth_key.encode(), priv_password=settings.v3_priv_key.encode(),
            context=settings.v3_context.encode(),
        )  # fmt: skip

    @property
    def discovered(self) -> bool:
        return bool(self.engine_id)

    @property
    def flags(self) -> int:
        return (FLAG_AUTH if self.auth != "NONE" else 0) | (FLAG_PRIV if self.priv != "NONE" else 0)

    def engine_time(self) -> int:
        return max(0, min(2**31 - 1, round(time.monotonic() + self._time_offset_s)))

    def learn(self, engine_id: bytes, boots: int, engine_time: int) -> None:
        """Take the agent's engine id, boots and time (discovery, or an authentic message)."""
        if engine_id != self.engine_id:
            self.engine_id = engine_id
            self.verified = False
            if self.auth != "NONE":
                self._auth_key = localize_key(password_to_key(self.auth_password, self.auth), engine_id,
                                              self.auth)  # fmt: skip
                self._hmac = crypto_hmac.HMAC(self._auth_key, AUTH[self.auth][0]())
            if self.priv != "NONE":
                # RFC 3826 §1.2: the first 16 octets of the priv key localized with the auth hash
                self._priv_key = localize_key(password_to_key(self.priv_password, self.auth), engine_id,
                                              self.auth)[:16]  # fmt: skip
                self._aes = algorithms.AES(self._priv_key)  # checked once, not per message
        self.boots = boots
        self._time_offset_s = engine_time - time.monotonic()

    def forget(self) -> None:
        """The agent no longer knows our engine id for it (it restarted): discover again."""
        self.engine_id = b""

    # --- requests ---

    def discovery_request(self, msg_id: int, pdu: bytes) -> bytes:
        """noAuthNoPriv, reportable, empty engine id and user: the agent answers with a Report."""
        return _message(msg_id, FLAG_REPORTABLE, _sec_params(b"", 0, 0, b"", b"", b""),
                        tlv(SEQUENCE, tlv(OCTET_STRING, b"") + tlv(OCTET_STRING, b"") + pdu))  # fmt: skip

    def request(self, msg_id: int, pdu: bytes) -> bytes:
        """``pdu`` (an encoded GET/GETBULK) in a message at this session's security level."""
        boots, now = self.boots, self.engine_time()
        scoped = tlv(SEQUENCE, tlv(OCTET_STRING, self.engine_id) + tlv(OCTET_STRING, self.context) + pdu)
        salt = b""
        if self.priv != "NONE":
            self._salt = (self._salt + 1) % 2**64
            salt = self._salt.to_bytes(8, "big")
            iv = boots.to_bytes(4, "big") + now.to_bytes(4, "big") + salt  # RFC 3826 §3.1.2.1
            enc = self._cipher(iv).encryptor()
            scoped = tlv(OCTET_STRING, enc.update(scoped) + enc.finalize())
        mac_len = AUTH[self.auth][1] if self.auth != "NONE" else 0
        params = _sec_params(self.engine_id, boots, now, self.user, bytes(mac_len), salt)
        msg = _message(msg_id, self.flags | FLAG_REPORTABLE, params, scoped)
        if not mac_len:
            return msg
        # The MAC's octets end where the salt's TLV begins, right before msgData: no re-parse.
        at = len(msg) - len(scoped) - len(tlv(OCTET_STRING, salt)) - mac_len
        return msg[:at] + self._mac(msg)[:mac_len] + msg[at + mac_len :]

    def _cipher(self, iv: bytes) -> Cipher[CFB]:
        assert self._aes is not None  # set with the engine id, before any authPriv message
        return Cipher(self._aes, CFB(iv))

    def _mac(self, msg: bytes) -> bytes:
        assert self._hmac is not None
        h = self._hmac.copy()  # keyed once per engine id; a copy per message
        h.update(msg)
        return h.finalize()

    # --- responses ---

    def open(self, data: bytes, name: str) -> tuple[bytes, ResponseHeader]:
        """Check and decrypt one incoming message → (the plaintext holding the PDU, its header).

        A Report comes back as a header with ``pdu == REPORT`` (unknownEngineID and
        notInTimeWindow also update this session); a Response must carry our security level, our
        engine id and user, and an HMAC that verifies. Raises :class:`SnmpPollError`."""
        m = _parse_message(data)
        if m.security_model != USM_MODEL:
            raise SnmpPollError("malformed", f"{name}: security model {m.security_model}, not USM")
        authentic = False
        if m.flags & FLAG_AUTH:
            if self.auth == "NONE" or m.engine_id != self.engine_id or m.user != self.user:
                raise SnmpPollError("auth", f"{name}: an authenticated message we hold no key for")
            mac_len = AUTH[self.auth][1]
            if m.mac_end - m.mac_start != mac_len:
                raise SnmpPollError("auth", f"{name}: authentication parameters of the wrong length")
            zeroed = data[: m.mac_start] + bytes(mac_len) + data[m.mac_end :]
            if not std_hmac.compare_digest(self._mac(zeroed)[:mac_len], data[m.mac_start : m.mac_end]):
                raise SnmpPollError("auth", f"{name}: response fails HMAC-{self.auth} (wrong auth key?)")
            authentic = True
        scoped, s, e = data, m.data_start, m.data_end
        if m.flags & FLAG_PRIV:
            if not authentic or self.priv == "NONE":
                raise SnmpPollError("auth", f"{name}: an encrypted message we cannot decrypt")
            scoped, s, e = self._decrypt(data, m, name)
            try:
                header = _scoped_pdu(scoped, s, e)
            except SnmpPollError as exc:  # authentic, yet not BER once decrypted: not our priv key
                raise SnmpPollError("auth", f"{name}: decrypted PDU is not BER ({exc.message}): wrong priv "
                                            "key or priv protocol") from None  # fmt: skip
        else:
            header = _scoped_pdu(scoped, s, e)
        if header.pdu == REPORT:
            self._take_report(m, authentic, scoped, header)
            return scoped, header
        if (not authentic and self.auth != "NONE") or (self.priv != "NONE" and not m.flags & FLAG_PRIV):
            raise SnmpPollError("auth", f"{name}: a response below the security level of the request "
                                        f"(flags 0x{m.flags:02x})")  # fmt: skip
        if authentic:
            self._check_time(m, name)
            self.verified = True
        return scoped, header

    def _decrypt(self, data: bytes, m: _Incoming, name: str) -> tuple[bytes, int, int]:
        tag, s, e = read_tlv(data, m.data_start, m.data_end)
        if tag != OCTET_STRING or len(m.salt) != 8:
            raise SnmpPollError("malformed", f"{name}: encrypted PDU without an 8-byte salt")
        iv = m.boots.to_bytes(4, "big") + m.time.to_bytes(4, "big") + m.salt
        dec = self._cipher(iv).decryptor()
        plain = dec.update(data[s:e]) + dec.finalize()
        return plain, 0, len(plain)

    def _take_report(self, m: _Incoming, authentic: bool, scoped: bytes, header: ResponseHeader) -> None:
        word = report_name(scoped, header)
        if word == "unknownEngineID" and m.engine_id:
            if self.discovered and m.engine_id != self.engine_id:
                self.forget()
            if not self.discovered:
                self.learn(m.engine_id, m.boots, m.time)
        elif word == "notInTimeWindow" and authentic:
            self.learn(m.engine_id, m.boots, m.time)

    def _check_time(self, m: _Incoming, name: str) -> None:
        """RFC 3414 §3.2 step 7b: follow the agent's clock forwards; refuse a replay from the past."""
        ours = self.engine_time()
        if m.boots > self.boots or (m.boots == self.boots and m.time > ours):
            self.learn(m.engine_id, m.boots, m.time)
        elif m.boots < self.boots or m.time < ours - TIME_WINDOW_S:
            raise SnmpPollError("auth", f"{name}: response outside the time window (boots {m.boots}, "
                                        f"time {m.time}; expected {self.boots}, ~{ours})")  # fmt: skip


def _scoped_pdu(scoped: bytes, start: int, end: int) -> ResponseHeader:
    """The PDU inside a ScopedPDU (contextEngineID, contextName, PDU), read like a v2c one."""
    tag, cs, ce = read_tlv(scoped, start, end)
    if tag != SEQUENCE or ce != end:
        raise malformed(f"scoped PDU has tag 0x{tag:02x} or does not end the message", start)
    tag, _s, pos = read_tlv(scoped, cs, ce)  # contextEngineID
    tag2, _s, pos = read_tlv(scoped, pos, ce)  # contextName
    if tag != OCTET_STRING or tag2 != OCTET_STRING:
        raise malformed("scoped PDU context fields are not OCTET STRINGs", cs)
    return parse_pdu(scoped, pos, ce, version=3, community=b"")


def report_name(scoped: bytes, header: ResponseHeader) -> str:
    """The usmStats counter a Report names (``unknown report <oid>`` for any other)."""
    vbs = iter_varbinds(scoped, header.vb_start, header.vb_end)
    if not vbs:
        return "empty report"
    return REPORT_NAMES.get(vbs[0][0], f"report {vbs[0][0].hex()}")


# --- message framing (RFC 3412 §6, RFC 3414 §2.4) ------------------------------------------------


def _sec_params(engine_id: bytes, boots: int, now: int, user: bytes, mac: bytes, salt: bytes) -> bytes:  # noqa: PLR0917
    return tlv(SEQUENCE, tlv(OCTET_STRING, engine_id) + encode_int(INTEGER, boots) + encode_int(INTEGER, now)
               + tlv(OCTET_STRING, user) + tlv(OCTET_STRING, mac) + tlv(OCTET_STRING, salt))  # fmt: skip


def _message(msg_id: int, flags: int, sec_params: bytes, msg_data: bytes) -> bytes:
    header = tlv(SEQUENCE, encode_int(INTEGER, msg_id) + encode_int(INTEGER, MAX_MESSAGE_SIZE)
                 + tlv(OCTET_STRING, bytes((flags,))) + encode_int(INTEGER, USM_MODEL))  # fmt: skip
    return tlv(SEQUENCE, encode_int(INTEGER, 3) + header + tlv(OCTET_STRING, sec_params) + msg_data)


@dataclass(frozen=True, slots=True)
class _Incoming:
    """A v3 message's clear fields, and where its MAC and its msgData sit in the datagram."""

    msg_id: int
    flags: int
    security_model: int
    engine_id: bytes
    boots: int
    time: int
    user: bytes
    mac_start: int
    mac_end: int
    salt: bytes
    data_start: int
    data_end: int


def is_v3(data: bytes) -> bool:
    """Whether a datagram's version field says SNMPv3 (a cheap look before any parsing)."""
    if len(data) < 5 or data[0] != SEQUENCE:
        return False
    at = 2 + (data[1] & 0x7F if data[1] >= 0x80 else 0)
    return data[at : at + 3] == b"\x02\x01\x03"


def msg_id_of(data: bytes) -> int | None:
    """The msgID of a v3 message (None: not SNMPv3). Reads only the clear header."""
    try:
        _tag, s, e = read_tlv(data, 0, len(data))
        version, pos = read_integer(data, s, e, "version")
        if version != 3:
            return None
        _tag, gs, ge = read_tlv(data, pos, e)
        return read_integer(data, gs, ge, "msgID")[0]
    except SnmpPollError:
        return None


def _parse_message(data: bytes) -> _Incoming:
    end = len(data)
    tag, s, e = read_tlv(data, 0, end)
    if tag != SEQUENCE or e != end:
        raise malformed("v3 message is not one SEQUENCE", 0)
    version, pos = read_integer(data, s, e, "version")
    if version != 3:
        raise malformed(f"message version {version}, not 3", s)
    tag, gs, ge = read_tlv(data, pos, e)
    if tag != SEQUENCE:
        raise malformed("msgGlobalData is not a SEQUENCE", pos)
    msg_id, p = read_integer(data, gs, ge, "msgID")
    _max_size, p = read_integer(data, p, ge, "msgMaxSize")
    tag, fs, fe = read_tlv(data, p, ge)
    if tag != OCTET_STRING or fe - fs != 1:
        raise malformed("msgFlags is not one octet", p)
    model, _p = read_integer(data, fe, ge, "msgSecurityModel")
    tag, ss, se = read_tlv(data, ge, e)
    if tag != OCTET_STRING:
        raise malformed("msgSecurityParameters is not an OCTET STRING", ge)
    tag, us, ue = read_tlv(data, ss, se)
    if tag != SEQUENCE or ue != se:
        raise malformed("UsmSecurityParameters is not one SEQUENCE", ss)
    fields: list[tuple[int, int]] = []
    p = us
    for what in ("engine id", "boots", "time", "user", "auth parameters", "priv parameters"):
        tag, a, b = read_tlv(data, p, ue)
        if tag != (INTEGER if what in ("boots", "time") else OCTET_STRING):
            raise malformed(f"USM {what} has tag 0x{tag:02x}", p)
        fields.append((a, b))
        p = b
    boots = int.from_bytes(data[fields[1][0] : fields[1][1]], "big", signed=True)
    now = int.from_bytes(data[fields[2][0] : fields[2][1]], "big", signed=True)
    if not (0 <= boots < 2**31 and 0 <= now < 2**31):
        raise malformed("USM boots/time out of range", us)
    return _Incoming(
        msg_id=msg_id, flags=data[fs], security_model=model,
        engine_id=data[fields[0][0] : fields[0][1]], boots=boots, time=now,
        user=data[fields[3][0] : fields[3][1]], mac_start=fields[4][0], mac_end=fields[4][1],
        salt=data[fields[5][0] : fields[5][1]], data_start=se, data_end=e,
    )  # fmt: skip
