"""``ssl.SSLContext`` objects from the TLS configuration, with errors that name the key at fault.

Building a context reads and checks its files (certificate parses, key matches it, CA bundle
loads), so the loader builds one at load time and a bad file is a config error naming the key,
before anything binds; the proxy builds them again when it starts and whenever the files change
(proxy/carrier/tls.py). It lives in ``config`` because the loader may not import the proxy (layering).
"""

from __future__ import annotations

import os
import ssl

from .model import ServerTlsConfig, UpstreamTlsConfig

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsFileError(Exception):
    """A TLS setting that cannot be used; ``key`` is the setting's name within its mapping."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def _readable(key: str, path: str) -> None:
    if not os.path.exists(path):
        raise TlsFileError(key, f"file not found: {path}")
    if not os.path.isfile(path):
        raise TlsFileError(key, f"not a file: {path}")
    if not os.access(path, os.R_OK):
        raise TlsFileError(key, f"not readable by kgate: {path}")


def _why(exc: Exception) -> str:
    if isinstance(exc, ssl.SSLError):
        return getattr(exc, "reason", None) or exc.strerror or str(exc)
    return str(exc)


def _load_chain(ctx: ssl.SSLContext, cert_key: str, cert_file: str, key_file: str, password: str | None) -> None:
    """``load_cert_chain``, with the fault put on the certificate or on the key."""
    _readable(cert_key, cert_file)
    _readable("key_file", key_file)
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cafile=cert_file)  # parses every certificate in the file
    except (ssl.SSLError, ValueError) as exc:
        raise TlsFileError(cert_key, f"not a PEM certificate ({_why(exc)}): {cert_file}") from None
    try:
        ctx.load_cert_chain(cert_file, key_file, password=password)
    except (ssl.SSLError, ValueError, OSError) as exc:
        raise TlsFileError(
            "key_file",
            f"not the PEM private key of {cert_file}, or encrypted without the right key_password "
            f"({_why(exc)}): {key_file}",
        ) from None


def _load_ca(ctx: ssl.SSLContext, key: str, path: str) -> None:
    _readable(key, path)
    try:
        ctx.load_verify_locations(cafile=path)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsFileError(key, f"not a PEM CA bundle ({_why(exc)}): {path}") from None


def server_context(cfg: ServerTlsConfig) -> ssl.SSLContext:
    """The context for client-facing listeners (raises ``TlsFileError``)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[cfg.min_version]
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    if cfg.ciphers:
        try:
            ctx.set_ciphers(cfg.ciphers)
        except ssl.SSLError as exc:
            raise TlsFileError("ciphers", f"no cipher matches {cfg.ciphers!r} ({_why(exc)})") from None
    _load_chain(ctx, "cert_file", cfg.cert_file, cfg.key_file, cfg.key_password)
    if cfg.client_ca_file:
        _load_ca(ctx, "client_ca_file", cfg.client_ca_file)
    ctx.verify_mode = _VERIFY[cfg.client_auth]
    return ctx


def upstream_context(cfg: UpstreamTlsConfig) -> ssl.SSLContext:
    """The context for connections to brokers (raises ``TlsFileError``)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname by default
    ctx.minimum_version = _VERSIONS[cfg.min_version]
    ctx.options |= ssl.OP_NO_COMPRESSION
    if cfg.ca_file:
        _load_ca(ctx, "ca_file", cfg.ca_file)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if not cfg.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        _load_chain(ctx, "cert_file", cfg.cert_file, cfg.key_file, cfg.key_password)
    return ctx


def files_of(cfg: ServerTlsConfig | UpstreamTlsConfig) -> tuple[str, ...]:
    """The files a context is built from: a change to any of them means a reload."""
    names: tuple[str | None, ...]
    if isinstance(cfg, ServerTlsConfig):
        names = (cfg.cert_file, cfg.key_file, cfg.client_ca_file)
    else:
        names = (cfg.ca_file, cfg.cert_file, cfg.key_file)
    return tuple(n for n in names if n)
