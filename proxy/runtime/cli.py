"""kgate command line: ``kgate run``, ``kgate check-config`` (and ``kgate report``, handed to kgate.pipeline).

``main()`` is the ``kgate`` console script and what ``python -m kgate`` calls.
Configuration is loaded and validated before anything is bound; a config
error prints ``kgate: config error: <message>`` to stderr and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from kgate.config import ConfigError, KgateConfig, load_config, quick_config
from kgate.config.loader import DEFAULT_CONFIG_SOURCE, LOG_FORMATS, LOG_LEVELS
from kgate.config.port_warnings import ephemeral_range, port_warnings
from kgate.proxy.control.logs import TEXT_FORMAT
from kgate.proxy.control.logs import setup_logging as _setup_logging
from kgate.proxy.sansio.response_tail import LEADER_HINTS_DEPRECATED

EXIT_OK = 0
EXIT_CONFIG = 2
LOG_FORMAT = TEXT_FORMAT

_COMMANDS = ("run", "check-config", "healthcheck", "reload", "report")
_TOP_LEVEL_FLAGS = ("-h", "--help", "--version")

log = logging.getLogger("kgate.cli")


def _version() -> str:
    """The version kgate was built as (pyproject reads it from ``kgate.__version__``: one source)."""
    from kgate import __version__

    return __version__


def _log_level(value: str) -> str:
    level = value.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"invalid level {value!r} (choose from {', '.join(lv.lower() for lv in LOG_LEVELS)})"
        )
    return level


def _worker_count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of workers, got {value!r}") from None
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"must be in range 1-256, got {n}")
    return n


def _without_workers(argv: list[str]) -> list[str]:
    """The command line a worker runs: the parent's, less ``--workers N``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgate",
        description="kgate: a Kafka-protocol proxy. With no command, 'run' is assumed.",
    )
    parser.add_argument("--version", action="version", version=f"kgate {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run the proxy",
        description=(
            "Run the proxy. Without -c and without --listen/--upstream the embedded default "
            "configuration is used (proxy 127.0.0.1:9092 on 127.0.0.1:9192)."
        ),
    )
    run.set_defaults(subparser=run)
    run.add_argument("-c", "--config", metavar="FILE", help="YAML configuration file")
    run.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="quick mode: bootstrap listener address (node ports start at PORT+1); needs --upstream",
    )
    run.add_argument(
        "--upstream",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="quick mode: upstream bootstrap server(s); needs --listen",
    )
    run.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="NAME[=JSON]",
        help="quick mode: add a filter to the chain, with its config as JSON (repeatable, in order)",
    )
    run.add_argument(
        "--log-level",
        type=_log_level,
        metavar="LEVEL",
        help="override the configured log level (debug, info, warning, error, critical)",
    )
    run.add_argument(
        "--workers",
        type=_worker_count,
        metavar="N",
        help=(
            "run N worker processes sharing the listeners (SO_REUSEPORT), supervised by this one, which "
            "restarts a dead worker and serves the admin listener (metrics per worker, label worker)"
        ),
    )
    run.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="override the configured log format: text (default, for people) or json (one object per line)",
    )

    check = sub.add_parser(
        "check-config",
        help="validate a configuration file and print a summary",
        description="Validate a configuration file and print a summary. Exit 0 if valid, 2 if not.",
    )
    check.set_defaults(subparser=check)
    check.add_argument("file", metavar="FILE", help="YAML configuration file")

    health = sub.add_parser(
        "healthcheck",
        help="ask a running kgate's /readyz (for container health checks); exit 0 if ready, 1 if not",
        description=(
            "Ask a running kgate whether it is ready (GET /readyz on its admin listener). The address "
            "comes from -c FILE (admin.listen; a wildcard address is asked on loopback), or --url, or "
            "the default http://127.0.0.1:9190/readyz. Exit 0 if ready, 1 if not (the answer is printed)."
        ),
    )
    health.set_defaults(subparser=health)
    health.add_argument("-c", "--config", metavar="FILE", help="the config file kgate runs with")
    health.add_argument(
        "--url", help="the admin listener's base URL (http://host:9190) or the full /readyz URL (instead of -c)"
    )
    health.add_argument("--timeout", type=float, default=3.0, metavar="SECONDS", help="default 3")
    reload = sub.add_parser(
        "reload",
        help="make a running kgate re-read its configuration (POST /reload); exit 0 if applied, 1 if not",
        description=(
            "Make a running kgate re-read its configuration file (POST /reload on its admin listener, "
            "which accepts loopback callers only; the same as SIGHUP, but the answer says whether the new "
            "configuration was applied). The address comes from -c FILE (admin.listen), or --url, or the "
            "default http://127.0.0.1:9190/reload. Exit 0 if the new configuration is in force, 1 if it "
            "was refused (the old one stays; the reason is printed) or kgate could not be asked."
        ),
    )
    reload.set_defaults(subparser=reload)
    reload.add_argument("-c", "--config", metavar="FILE", help="the config file kgate runs with")
    reload.add_argument(
        "--url", help="the admin listener's base URL (http://host:9190) or the full /reload URL (instead of -c)"
    )
    reload.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS", help="default 30")
    # Listed for --help only: main() hands `report` to kgate.pipeline.cli before this parser runs.
    sub.add_parser("report", help="fleet report from audit-log files on Spark (kgate report --help)", add_help=False)
    return parser


def _with_default_command(argv: list[str]) -> list[str]:
    """Insert ``run`` when no sub-command is given (``kgate --listen X --upstream Y``)."""
    if not argv:
        return ["run"]
    first = argv[0]
    if first in _COMMANDS or first in _TOP_LEVEL_FLAGS:
        return argv
    if first.startswith("-"):
        return ["run", *argv]
    return argv  # an unknown command: let argparse report it


def _config_error(exc: ConfigError) -> int:
    print(f"kgate: config error: {exc}", file=sys.stderr)
    return EXIT_CONFIG


def setup_logging(level: str, fmt: str = "text", worker: int | None = None) -> None:
    _setup_logging(level, fmt, worker)


def _load_for_run(args: argparse.Namespace) -> KgateConfig:
    parser: argparse.ArgumentParser = args.subparser
    quick = args.listen is not None or args.upstream is not None
    if quick:
        if args.config is not None:
            parser.error("-c/--config cannot be combined with --listen/--upstream")
        if args.listen is None or args.upstream is None:
            parser.error("--listen and --upstream must be given together")
        return quick_config(args.listen, args.upstream, filters=_filter_args(args.filter, parser))
    if args.filter:
        parser.error("--filter is for quick mode; name filters in the config file otherwise")
    return load_config(args.config)


def _filter_args(values: list[str], parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """``--filter topic-policy='{"deny": ["x*"]}'`` -> filter entries for the config."""
    entries = []
    for value in values:
        name, sep, raw = value.partition("=")
        entry: dict[str, Any] = {"name": name.strip()}
        if sep:
            try:
                entry["config"] = json.loads(raw)
            except json.JSONDecodeError as exc:
                parser.error(f"--filter {name}: config is not valid JSON: {exc}")
        entries.append(entry)
    return entries


def _config_for_run(args: argparse.Namespace) -> KgateConfig:
    """The config ``kgate run`` serves: the file (or quick mode's flags), the CLI's overrides, a
    worker's private admin listener. Also what a reload re-reads (SIGHUP, ``POST /reload``), so the
    overrides hold across reloads; quick mode and the embedded default read the same again."""
    import dataclasses

    from kgate.proxy.runtime.worker_env import worker_index
    from kgate.proxy.runtime.workers import worker_config

    config = _load_for_run(args)
    if args.log_level:
        config = dataclasses.replace(config, log_level=args.log_level)
    if args.log_format:
        config = dataclasses.replace(config, log_format=args.log_format)
    if worker_index() is not None:
        config = worker_config(config)
    return config


def cmd_run(args: argparse.Namespace) -> int:
    try:
        config = _config_for_run(args)
    except ConfigError as exc:
        return _config_error(exc)
    from kgate.proxy.runtime.worker_env import worker_index

    worker = worker_index()
    if worker is not None:
        setup_logging(config.log_level, config.log_format, worker)
    else:
        setup_logging(config.log_level, config.log_format)
    source = args.config or ("command line" if args.listen else DEFAULT_CONFIG_SOURCE)
    log.info("kgate %s starting (config: %s)", _version(), source)
    _log_hot_path()
    for vc in config.virtual_clusters:
        log.info(
            "cluster %s: bootstrap %s -> upstream %s; node ports %d-%d advertised as %s",
            vc.name,
            vc.listen,
            ",".join(map(str, vc.upstream)),
            vc.node_ports.base,
            vc.node_ports.last_port,
            vc.advertised_host,
        )

    if args.workers is not None and worker is None:
        from kgate.proxy.runtime.workers import run_supervisor

        log.info("supervising %d worker(s) sharing the listeners", args.workers)
        return run_supervisor(config, _without_workers(args.argv), args.workers)
    if worker is not None:
        from kgate.proxy.runtime import cluster

        cluster.SHARED_LISTENERS = True

    # Imported lazily: check-config and config errors must not need (or start) the server.
    try:
        server = importlib.import_module("kgate.proxy.runtime.server")
    except ModuleNotFoundError as exc:
        if exc.name != "kgate.proxy.runtime.server":
            raise
        print("kgate: error: the proxy server module (kgate.proxy.runtime.server) is not available", file=sys.stderr)
        return 1

    try:
        return int(server.run(config, source=lambda: _config_for_run(args)))
    except KeyboardInterrupt:
        return 130


def summarize(config: KgateConfig, source: str) -> str:
    lines = [f"{source}: OK", f"log_level: {config.log_level}", f"log_format: {config.log_format}"]
    p = config.proxy
    lines.append(
        f"proxy: max_frame_bytes={p.max_frame_bytes} drain_timeout_s={p.drain_timeout_s:g} "
        f"connect_timeout_s={p.connect_timeout_s:g} high_water_bytes={p.high_water_bytes} "
        f"low_water_bytes={p.low_water_bytes}"
    )
    lines.append(
        f"       filter_timeout_s={p.filter_timeout_s:g} max_queued_requests={p.max_queued_requests} "
        f"max_inflight_requests={p.max_inflight_requests} max_held_bytes={p.max_held_bytes} "
        f"leader_hints={str(p.leader_hints).lower()} (deprecated: no effect) "
        f"validate_requests={str(p.validate_requests).lower()}"
    )
    lines.append(
        f"       idle_timeout_s={p.idle_timeout_s:g} frame_timeout_s={p.frame_timeout_s:g} "
        f"upstream_timeout_s={p.upstream_timeout_s:g}"
    )
    tn = config.topic_names
    lines.append(
        f"topic_names: batch_window_ms={tn.batch_window_ms:g} negative_ttl_s={tn.negative_ttl_s:g} "
        f"max_entries={tn.max_entries} idle_revalidate_s={tn.idle_revalidate_s:g} "
        f"sweep_interval_s={tn.sweep_interval_s:g} lookup_timeout_s={tn.lookup_timeout_s:g}"
    )
    admin = config.admin
    if admin.listen is None:
        lines.append("admin: disabled")
    else:
        lines.append(
            f"admin: {admin.listen} (/livez /readyz /metrics) probe_interval_s={admin.probe_interval_s:g} "
            f"probe_timeout_s={admin.probe_timeout_s:g}"
        )
    if config.metrics.listen is not None:
        lines.append(f"metrics: {config.metrics.listen} (deprecated alias of admin.listen)")
    lines.append(f"virtual clusters: {len(config.virtual_clusters)}")
    for vc in config.virtual_clusters:
        np = vc.node_ports
        lines.append(f"  - {vc.name}")
        lines.append(f"      bootstrap: {vc.listen} (advertised host {vc.advertised_host})")
        lines.append(f"      upstream: {', '.join(map(str, vc.upstream))}")
        lines.append(
            f"      node ports: {np.base}-{np.last_port} for node ids "
            f"{np.first_node_id}-{np.first_node_id + np.count - 1}"
        )
        lines.append(f"      bootstrap_serves_node: {str(vc.bootstrap_serves_node).lower()}")
        lines.append(f"      max_connections: {vc.max_connections} per listener")
        if vc.tls is not None:  # shown only when set: plaintext summaries stay as they were
            lines.append(f"      tls: {vc.tls.cert_file} (client_auth {vc.tls.client_auth}, min {vc.tls.min_version})")
        if vc.upstream_tls is not None:
            ut = vc.upstream_tls
            lines.append(
                f"      upstream_tls: verify {str(ut.verify).lower()}, CA {ut.ca_file or 'system'}"
                + (f", client cert {ut.cert_file}" if ut.cert_file else "")
            )
        if vc.proxy_protocol is not None:
            pp = vc.proxy_protocol
            lines.append(f"      proxy_protocol: {pp.mode} from {', '.join(pp.trusted_sources)}")
        if vc.filters is not None:
            own = ", ".join(f.name for f in vc.filters) or "none"
            lines.append(f"      filters: {own} (replaces the top-level list)")
    if config.filters:
        lines.append(f"filters: {', '.join(f.name for f in config.filters)}")
    else:
        lines.append("filters: none")
    return "\n".join(lines)


def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file)
    except ConfigError as exc:
        return _config_error(exc)
    print(summarize(config, args.file))
    for warning in port_warnings(config, ephemeral_range()):
        print(f"kgate: warning: {args.file}: {warning}", file=sys.stderr)
    if config.proxy.leader_hints_written:
        print(f"kgate: warning: {args.file}: {LEADER_HINTS_DEPRECATED}", file=sys.stderr)
    return EXIT_OK


def _log_hot_path() -> None:
    """Say whether the hot path runs compiled (tools/compile_hot.py), and warn if a build is stale."""
    from kgate.proxy.runtime.compiled import HOT_MODULES, compiled_modules, stale_modules

    compiled = compiled_modules()
    if compiled:
        log.info("hot path compiled (mypyc): %d of %d modules", len(compiled), len(HOT_MODULES))
    stale = stale_modules()
    if stale:
        log.warning(
            "compiled modules older than their source run instead of it: %s (rebuild: tools/compile_hot.py)",
            ", ".join(stale),
        )


def cmd_healthcheck(args: argparse.Namespace, path: str = "/readyz", method: str = "GET") -> int:
    from kgate.proxy.control.healthcheck import DEFAULT_URL, check, endpoint_url, readable, readyz_url

    url = endpoint_url(args.url, path) if args.url else DEFAULT_URL.replace("/readyz", path)
    if args.config and not args.url:
        try:
            found = readyz_url(load_config(args.config), path)
        except ConfigError as exc:
            return _config_error(exc)
        if found is None:
            print(f"kgate: {args.config} has no admin listener (admin.listen): nothing to ask", file=sys.stderr)
            return EXIT_CONFIG
        url = found
    ok, text = check(url, args.timeout, method)
    text = readable(text)
    if text and not text.endswith("\n"):
        text += "\n"
    (sys.stdout if ok else sys.stderr).write(text)
    return EXIT_OK if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:
        # Lazy: `kgate run` must never import the pipeline (nor, through it, Spark).
        from kgate.pipeline.cli import main as report_main

        return report_main(argv[1:])
    parser = build_parser()
    try:
        full = _with_default_command(argv)
        args = parser.parse_args(full)
        args.argv = full
        if args.command == "check-config":
            return cmd_check_config(args)
        if args.command == "healthcheck":
            return cmd_healthcheck(args)
        if args.command == "reload":
            return cmd_healthcheck(args, "/reload", "POST")
        return cmd_run(args)
    except SystemExit as exc:  # argparse errors (2) and --help/--version (0)
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
