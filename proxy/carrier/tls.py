"""TLS at run time: contexts that follow their files, and the principal of a client certificate.

**Reload.** Certificates are rotated (cert-manager, ACME) while kgate runs. ``ReloadingContext``
reads its files every ``reload_interval_s`` (a digest of their contents, so an atomic rename and a
same-size renewal both count) and, when they changed and load, builds a new context: new handshakes use it, established
connections keep theirs. A set of files that does not load (the certificate replaced but its key
not yet) is logged once and the old context stays until the next check finds them consistent.

**Principal.** With mTLS, kgate names the client the way Kafka's default principal builder does:
the certificate's subject distinguished name in RFC 2253 form (X500Principal.getName()), e.g.
``CN=alice,OU=payments,O=Example,C=DE`` (Kafka's ACLs write it ``User:CN=alice,...``; kgate's
``ConnectionInfo.principal`` holds the name without the ``User:`` type, as it does for SASL).
Subject alternative names are not used, as in Kafka without ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from collections.abc import Callable
from typing import Any

from kgate.config.tls_context import TlsFileError, files_of, server_context, upstream_context

log = logging.getLogger("kgate.tls")

# OpenSSL's long attribute names (what ssl's peercert holds) -> the RFC 2253 keyword Java prints.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_EMAIL_OID = "1.2.840.113549.1.9.1"  # Java prints emailAddress as its OID and the DER IA5String in hex


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _ia5_hex(value: str) -> str:
    raw = value.encode("ascii", "replace")
    if len(raw) < 128:
        length = bytes([len(raw)])
    else:
        size = len(raw).to_bytes((len(raw).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return "#" + (b"\x16" + length + raw).hex()


def _attribute(name: str, value: str) -> str:
    if name == "emailAddress":
        return f"{_EMAIL_OID}={_ia5_hex(value)}"
    return f"{_KEYWORDS.get(name, name)}={_escape(value)}"


def principal_from_peercert(cert: dict[str, Any] | None) -> str | None:
    """The client certificate's subject as Kafka's default principal name, or None without one."""
    if not cert:
        return None
    subject = cert.get("subject") or ()
    rdns = ["+".join(_attribute(name, value) for name, value in rdn) for rdn in reversed(subject)]
    return ",".join(rdns) or None


def principal_of(transport: Any) -> str | None:
    """The mTLS principal of an SSL transport (None if the client sent no certificate)."""
    try:
        return principal_from_peercert(transport.get_extra_info("peercert"))
    except (ValueError, TypeError, AttributeError):
        return None


def tls_problem(exc: ssl.SSLError) -> str:
    """An upstream TLS failure as one clear line: verification failures say what did not verify."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: broker certificate not trusted: {exc.verify_message} (upstream_tls.ca_file, server_hostname)"
    return f"TLS handshake failed: {getattr(exc, 'reason', None) or exc}"


def _stamp(files: tuple[str, ...]) -> bytes:
    """A digest of the files' contents: certificates are a few KB, read every ``reload_interval_s``.

    Contents rather than mtime and size: a renewed certificate often has the same size, and two
    writes within one kernel clock tick can share an mtime, so a stat could miss a rotation.
    """
    digest = hashlib.sha256()
    for name in files:
        try:
            with open(name, "rb") as fh:
                digest.update(fh.read())
        except OSError as exc:
            digest.update(f"unreadable: {exc.errno}".encode())
        digest.update(b"\0")
    return digest.digest()


class ReloadingContext:
    """An SSL context rebuilt from its files when they change; ``current`` is for new handshakes."""

    def __init__(self, what: str, build: Callable[[], ssl.SSLContext], files: tuple[str, ...], interval_s: float):
        self.what = what
        self._build = build
        self.files = files
        self.interval_s = interval_s
        self._stamp = _stamp(files)
        self.current = build()
        self._failed_stamp: bytes | None = None
        self.reloads = 0
        self.reload_failures = 0
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def for_clients(cls, cluster: str, cfg: Any) -> ReloadingContext:
        return cls(f"cluster {cluster}: client TLS", lambda: server_context(cfg), files_of(cfg), cfg.reload_interval_s)

    @classmethod
    def for_brokers(cls, cluster: str, cfg: Any) -> ReloadingContext:
        return cls(
            f"cluster {cluster}: upstream TLS", lambda: upstream_context(cfg), files_of(cfg), cfg.reload_interval_s
        )

    def check(self) -> bool:
        """Rebuild if the files changed; whether ``current`` is new."""
        stamp = _stamp(self.files)
        if stamp == self._stamp:
            return False
        try:
            ctx = self._build()
        except (TlsFileError, OSError, ssl.SSLError) as exc:
            if stamp != self._failed_stamp:
                self._failed_stamp = stamp
                self.reload_failures += 1
                log.error("%s: changed files do not load (%s); keeping the previous certificate", self.what, exc)
            return False
        self.current = ctx
        self._stamp = stamp
        self._failed_stamp = None
        self.reloads += 1
        log.info("%s: reloaded %s; new handshakes use it", self.what, ", ".join(self.files))
        return True

    def start(self) -> None:
        if self._task is None and self.files:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.check()
            except Exception:  # a bug here must not end the watching, nor the process
                log.exception("%s: checking for new certificate files failed", self.what)
