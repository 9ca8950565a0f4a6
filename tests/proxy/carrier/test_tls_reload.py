"""ReloadingContext (proxy/carrier/tls.py): a changed, consistent set of files gives a new context; a set
that does not load yet is logged once and the old context stays; unchanged files cost a stat."""

from __future__ import annotations

import logging
import shutil
import ssl

from support.certs import TestCA

from kgate.config import ServerTlsConfig, UpstreamTlsConfig
from kgate.proxy.carrier.tls import ReloadingContext


def _serial(ctx: ssl.SSLContext) -> set[int]:
    return {int(c["serialNumber"], 16) for c in ctx.get_ca_certs()}


def test_server_context_follows_its_files(tmp_path, caplog):
    ca = TestCA(tmp_path / "ca")
    first = ca.issue("a", "kgate", server=True)
    second = ca.issue("b", "kgate", server=True)
    cert, key = tmp_path / "s.crt", tmp_path / "s.key"
    shutil.copy(first.cert, cert)
    shutil.copy(first.key, key)
    r = ReloadingContext.for_clients("c", ServerTlsConfig(cert_file=str(cert), key_file=str(key)))
    before = r.current
    assert not r.check()
    assert r.current is before
    shutil.copy(second.cert, cert)  # certificate without its key: not loadable yet
    with caplog.at_level(logging.ERROR, logger="kgate.tls"):
        assert not r.check()
        assert not r.check()
    assert r.current is before
    assert r.reload_failures == 1
    assert len([rec for rec in caplog.records if "do not load" in rec.getMessage()]) == 1
    shutil.copy(second.key, key)
    assert r.check()
    assert r.current is not before
    assert r.reloads == 1
    assert not r.check()


def test_upstream_context_reloads_its_ca(tmp_path):
    ca1, ca2 = TestCA(tmp_path / "one", name="one"), TestCA(tmp_path / "two", name="two")
    bundle = tmp_path / "ca.pem"
    shutil.copy(ca1.cert_path, bundle)
    r = ReloadingContext.for_brokers("c", UpstreamTlsConfig(ca_file=str(bundle)))
    assert _serial(r.current) == {ca1.cert.serial_number}
    bundle.write_bytes(ca1.cert_path.read_bytes() + ca2.cert_path.read_bytes())
    assert r.check()
    assert _serial(r.current) == {ca1.cert.serial_number, ca2.cert.serial_number}
    assert r.current.verify_mode == ssl.CERT_REQUIRED
    assert r.current.check_hostname
