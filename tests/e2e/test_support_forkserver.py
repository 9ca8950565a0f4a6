"""tests/support/forkserver.py: a kgate forked from the template behaves as ``python -m kgate`` does
where the tests look (exit codes, signals, the log, the environment and working directory), so the
e2e tests that use it test kgate, not the template."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from support import forkserver, procs

pytestmark = pytest.mark.e2e


def _start(tmp_path: Path, name: str, fork: bool, monkeypatch: pytest.MonkeyPatch, **kw) -> procs.Kgate:
    monkeypatch.setenv(forkserver.ENV, "1" if fork else "0")
    return procs.Kgate(tmp_path / name, ["127.0.0.1:9"], **kw).start()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_sigterm_drains_and_exits_0_sigkill_is_minus_9(tmp_path: Path, monkeypatch, fork: bool) -> None:
    k = _start(tmp_path, "a", fork, monkeypatch)
    forked = isinstance(k.proc, forkserver.Forked)
    assert forked == fork
    assert (_parent(k.pid) != os.getpid()) == fork  # a fork is the template's child, not ours
    assert os.getpgid(k.pid) == k.pid  # its own session and process group, as Popen(start_new_session)
    with open(f"/proc/{k.pid}/environ", "rb") as f:
        assert b"PYTHONUNBUFFERED=1" in f.read().split(b"\0")
    assert os.readlink(f"/proc/{k.pid}/cwd") == str(procs.REPO)
    assert k.stop_and_check() == 0
    log = k.log_text()
    assert "kgate listening" in log
    assert "kgate stopped" in log
    assert "Traceback" not in log

    k = _start(tmp_path, "b", fork, monkeypatch)
    k.signal(signal.SIGKILL)
    assert k.wait(10) == -signal.SIGKILL


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_a_config_error_exits_2_with_the_message_in_the_log(tmp_path: Path, monkeypatch, fork: bool) -> None:
    monkeypatch.setenv(forkserver.ENV, "1" if fork else "0")
    k = procs.Kgate(tmp_path / "bad", ["127.0.0.1:9"], extra={"proxy": {"max_frame_bytes": -1}})
    with pytest.raises(RuntimeError, match="exited with 2 before listening"):
        k.start(timeout=20)
    assert "kgate.yaml: proxy.max_frame_bytes: must be >= 1, got -1" in k.log_text()
