"""Tests for the kgate CLI (proxy.runtime.cli): check-config, run's config handling, quick mode."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

import kgate.proxy.runtime.cli as cli
from kgate.config import ConfigError, HostPort, KgateConfig

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

GOOD = """\
log_level: warning
metrics: {listen: 127.0.0.1:9190}
virtual_clusters:
  - name: alpha
    listen: 127.0.0.1:{port}
    upstream: [127.0.0.1:9092, 127.0.0.1:9093]
    node_ports: {base: {base}, count: 4, first_node_id: 1}
filters:
  - name: topic-policy
"""

BAD = """\
virtual_clusters:
  - name: alpha
    listen: "9192"
    upstream: 127.0.0.1:9092
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def good_yaml(port: int = 19192) -> str:
    return GOOD.replace("{port}", str(port)).replace("{base}", str(port + 1))


@pytest.fixture
def good_file(tmp_path) -> Path:
    p = tmp_path / "good.yaml"
    p.write_text(good_yaml())
    return p


@pytest.fixture
def bad_file(tmp_path) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(BAD)
    return p


@pytest.fixture
def fake_server(monkeypatch):
    """Replace proxy.runtime.server with a recorder; also stop run from reconfiguring logging."""
    calls: list[KgateConfig] = []
    sources: list[Any] = []
    levels: list[str] = []
    mod = types.ModuleType("kgate.proxy.runtime.server")

    def run(config: KgateConfig, source: Any = None) -> int:
        calls.append(config)
        sources.append(source)
        return 7

    mod.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kgate.proxy.runtime.server", mod)
    monkeypatch.setattr(cli, "setup_logging", lambda level, fmt="text", worker=None: levels.append(level))
    return types.SimpleNamespace(calls=calls, levels=levels, sources=sources)


# --------------------------------------------------------------------------- check-config


def test_check_config_valid(good_file, capsys):
    assert cli.main(["check-config", str(good_file)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"{good_file}: OK\n")
    assert "log_level: WARNING" in out
    assert "metrics: 127.0.0.1:9190" in out
    assert "  - alpha" in out
    assert "bootstrap: 127.0.0.1:19192 (advertised host 127.0.0.1)" in out
    assert "upstream: 127.0.0.1:9092, 127.0.0.1:9093" in out
    assert "node ports: 19193-19196 for node ids 1-4" in out
    assert "filters: topic-policy" in out


def test_check_config_invalid(bad_file, capsys):
    assert cli.main(["check-config", str(bad_file)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f'kgate: config error: {bad_file}: virtual_clusters[0].listen: expected "host:port", got "9192"\n'


def test_check_config_missing_file(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    assert cli.main(["check-config", str(missing)]) == 2
    assert capsys.readouterr().err == f"kgate: config error: {missing}: file not found\n"


def test_check_config_requires_file(capsys):
    assert cli.main(["check-config"]) == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err


def test_check_config_does_not_import_server(good_file):
    code = (
        "import sys; from kgate.proxy.runtime.cli import main; rc = main(['check-config', sys.argv[1]]);"
        "assert 'kgate.proxy.runtime.server' not in sys.modules, 'server imported'; sys.exit(rc)"
    )
    r = subprocess.run([PY, "-c", code, str(good_file)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr


def test_check_config_subprocess(good_file, bad_file):
    ok = subprocess.run(
        [PY, "-m", "kgate", "check-config", str(good_file)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout
    bad = subprocess.run(
        [PY, "-m", "kgate", "check-config", str(bad_file)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "kgate: config error:" in bad.stderr
    assert "virtual_clusters[0].listen" in bad.stderr


# --------------------------------------------------------------------------- run: config errors


def test_run_bad_config_exits_2_before_binding(tmp_path):
    """A config error in `run` exits 2 with the message, and nothing is bound or started.

    The config names a real free port for the listener and is invalid only at the
    end, so a loader that bound before validating everything would be caught by
    the port check below.
    """
    port = free_port()
    p = tmp_path / "bad.yaml"
    p.write_text(
        textwrap.dedent(
            f"""\
            virtual_clusters:
              - name: alpha
                listen: 127.0.0.1:{port}
                upstream: 127.0.0.1:9092
            filters:
              - name: topic-policy
                bogus: 1
            """
        )
    )
    r = subprocess.run([PY, "-m", "kgate", "run", "-c", str(p)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2
    assert r.stderr == f'kgate: config error: {p}: filters[0].bogus: unknown key "bogus" (allowed: name, config)\n'
    assert r.stdout == ""
    with socket.socket() as s:  # still free: nothing was (or is still) bound
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_run_bad_config_subprocess_message(bad_file):
    r = subprocess.run(
        [PY, "-m", "kgate", "run", "-c", str(bad_file)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert r.returncode == 2
    assert f'kgate: config error: {bad_file}: virtual_clusters[0].listen: expected "host:port", got "9192"' in (
        r.stderr
    )


def test_run_bad_config_does_not_call_server(bad_file, fake_server, capsys):
    assert cli.main(["run", "-c", str(bad_file)]) == 2
    assert fake_server.calls == []
    assert "kgate: config error:" in capsys.readouterr().err


def test_run_missing_config_file(tmp_path, fake_server, capsys):
    assert cli.main(["run", "--config", str(tmp_path / "x.yaml")]) == 2
    assert fake_server.calls == []
    assert "file not found" in capsys.readouterr().err


# --------------------------------------------------------------------------- run: success paths (fake server)


def test_run_with_file_calls_server(good_file, fake_server):
    assert cli.main(["run", "-c", str(good_file)]) == 7  # server.run's exit code is returned
    (config,) = fake_server.calls
    assert config.virtual_clusters[0].name == "alpha"
    assert config.log_level == "WARNING"
    assert fake_server.levels == ["WARNING"]


def test_run_hands_the_server_what_a_reload_rereads(good_file, fake_server):
    """A reload reads the same file again, with the command line's overrides applied again."""
    assert cli.main(["run", "-c", str(good_file), "--log-level", "error"]) == 7
    (source,) = fake_server.sources
    assert source() == fake_server.calls[0]
    good_file.write_text(good_file.read_text().replace("alpha", "beta"))
    again = source()
    assert again.virtual_clusters[0].name == "beta"
    assert again.log_level == "ERROR"
    good_file.write_text("virtual_clusters: [")
    with pytest.raises(ConfigError):
        source()


def test_run_log_level_override(good_file, fake_server):
    assert cli.main(["run", "-c", str(good_file), "--log-level", "debug"]) == 7
    assert fake_server.calls[0].log_level == "DEBUG"
    assert fake_server.levels == ["DEBUG"]


def test_run_invalid_log_level(fake_server, capsys):
    assert cli.main(["run", "--log-level", "loud"]) == 2
    assert fake_server.calls == []
    assert "invalid level 'loud'" in capsys.readouterr().err


def test_run_default_config(fake_server):
    assert cli.main(["run"]) == 7
    (vc,) = fake_server.calls[0].virtual_clusters
    assert vc.listen == HostPort("127.0.0.1", 9192)
    assert vc.upstream == (HostPort("127.0.0.1", 9092),)


@pytest.mark.parametrize("argv", [[], ["--log-level", "info"]])
def test_missing_subcommand_means_run(argv, fake_server):
    assert cli.main(argv) == 7
    assert len(fake_server.calls) == 1


@pytest.mark.parametrize("prefix", [["run"], []])
def test_quick_mode(prefix, fake_server):
    assert cli.main([*prefix, "--listen", "127.0.0.1:29092", "--upstream", "10.0.0.5:9092"]) == 7
    (vc,) = fake_server.calls[0].virtual_clusters
    assert vc.name == "default"
    assert vc.listen == HostPort("127.0.0.1", 29092)
    assert vc.upstream == (HostPort("10.0.0.5", 9092),)
    assert vc.node_ports.base == 29093


# --------------------------------------------------------------------------- quick mode argument errors


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--listen", "127.0.0.1:9192"], "--listen and --upstream must be given together"),
        (["run", "--upstream", "127.0.0.1:9092"], "--listen and --upstream must be given together"),
        (["--listen", "127.0.0.1:9192"], "--listen and --upstream must be given together"),
        (
            ["run", "-c", "x.yaml", "--listen", "127.0.0.1:9192", "--upstream", "h:1"],
            "-c/--config cannot be combined with --listen/--upstream",
        ),
    ],
)
def test_quick_mode_argument_errors(argv, message, fake_server, capsys):
    assert cli.main(argv) == 2
    assert fake_server.calls == []
    err = capsys.readouterr().err
    assert f"kgate run: error: {message}" in err


def test_quick_mode_bad_address_is_config_error(fake_server, capsys):
    assert cli.main(["run", "--listen", "9192", "--upstream", "h:1"]) == 2
    assert fake_server.calls == []
    assert capsys.readouterr().err == (
        'kgate: config error: command line: --listen: expected "host:port", got "9192"\n'
    )


def test_quick_mode_subprocess_arg_error():
    r = subprocess.run(
        [PY, "-m", "kgate", "--listen", "127.0.0.1:9192"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert r.returncode == 2
    assert "--listen and --upstream must be given together" in r.stderr


# --------------------------------------------------------------------------- misc


def test_unknown_command(capsys):
    assert cli.main(["serve"]) == 2
    assert "invalid choice: 'serve'" in capsys.readouterr().err


def test_help_and_version(capsys):
    assert cli.main(["--help"]) == 0
    assert "check-config" in capsys.readouterr().out
    assert cli.main(["--version"]) == 0
    from importlib.metadata import version

    # the installed distribution (kgate-proxy) and the package agree, and the version is real
    assert capsys.readouterr().out.strip() == f"kgate {version('kgate-proxy')}"
    assert version("kgate-proxy")[0].isdigit()


SHIM = """\
import json, os, runpy, sys, types
fake = types.ModuleType("kgate.proxy.runtime.server")
def run(config, source=None):
    vc = config.virtual_clusters[0]
    with open(os.environ["KGATE_TEST_MARKER"], "w") as f:
        json.dump({"listen": str(vc.listen), "upstream": [str(u) for u in vc.upstream],
                   "log_level": config.log_level}, f)
    return 3
fake.run = run
sys.modules["kgate.proxy.runtime.server"] = fake
runpy.run_module("kgate", run_name="__main__", alter_sys=True)
"""


def test_python_m_proxy_without_run_word(tmp_path):
    """`python -m kgate --listen X --upstream Y` (the benchmark harness form) reaches server.run."""
    marker = tmp_path / "called.json"
    env = {**os.environ, "KGATE_TEST_MARKER": str(marker)}
    r = subprocess.run(
        [
            PY,
            "-c",
            SHIM,
            "--listen",
            "127.0.0.1:39092",
            "--upstream",
            "127.0.0.1:9092",
            "--log-level",
            "ERROR",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    assert r.returncode == 3, r.stderr
    assert json.loads(marker.read_text()) == {
        "listen": "127.0.0.1:39092",
        "upstream": ["127.0.0.1:9092"],
        "log_level": "ERROR",
    }


def test_python_m_proxy_bad_config_never_reaches_server(tmp_path, bad_file):
    marker = tmp_path / "called.json"
    env = {**os.environ, "KGATE_TEST_MARKER": str(marker)}
    r = subprocess.run(
        [PY, "-c", SHIM, "run", "-c", str(bad_file)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    assert r.returncode == 2
    assert "kgate: config error:" in r.stderr
    assert not marker.exists()


def test_run_logs_startup_with_configured_format(tmp_path, good_file):
    marker = tmp_path / "called.json"
    env = {**os.environ, "KGATE_TEST_MARKER": str(marker)}
    r = subprocess.run(
        [PY, "-c", SHIM, "run", "-c", str(good_file), "--log-level", "info"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    assert r.returncode == 3, r.stderr
    # time, level, logger name
    assert " INFO    kgate.cli: cluster alpha: bootstrap 127.0.0.1:19192" in r.stderr


# --------------------------------------------------------------------------- issue 11: formats, healthcheck, workers


def test_run_log_format_override(good_file, fake_server):
    assert cli.main(["run", "-c", str(good_file), "--log-format", "json"]) == 7
    assert fake_server.calls[0].log_format == "json"
    assert cli.main(["run", "-c", str(good_file), "--log-format", "xml"]) == 2


def test_check_config_names_the_admin_listener(good_file, capsys):
    assert cli.main(["check-config", str(good_file)]) == 0
    out = capsys.readouterr().out
    assert "admin: 127.0.0.1:9190 (/livez /readyz /metrics)" in out
    assert "metrics: 127.0.0.1:9190 (deprecated alias of admin.listen)" in out
    assert "log_format: text" in out


def test_healthcheck_not_ready_when_nothing_answers(capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli.main(["healthcheck", "--url", f"http://127.0.0.1:{port}/readyz", "--timeout", "1"]) == 1
    assert "Connection refused" in capsys.readouterr().err


def test_healthcheck_needs_an_admin_listener_in_the_config(bad_file, tmp_path, capsys):
    plain = tmp_path / "plain.yaml"
    plain.write_text("virtual_clusters: [{name: a, listen: 127.0.0.1:19192, upstream: 127.0.0.1:9092}]\n")
    assert cli.main(["healthcheck", "-c", str(plain)]) == 2
    assert "has no admin listener" in capsys.readouterr().err
    assert cli.main(["healthcheck", "-c", str(bad_file)]) == 2  # a config error, as for run


@pytest.mark.parametrize("value", ["0", "x", "257"])
def test_workers_must_be_a_sensible_count(value, fake_server, capsys):
    assert cli.main(["run", "--workers", value]) == 2
    assert "--workers" in capsys.readouterr().err
    assert not fake_server.calls


def test_a_worker_runs_the_parents_command_line_without_workers():
    argv = ["run", "-c", "k.yaml", "--workers", "2", "--log-format", "json"]
    assert cli._without_workers(argv) == ["run", "-c", "k.yaml", "--log-format", "json"]
    assert cli._without_workers(["run", "--workers=3"]) == ["run"]
