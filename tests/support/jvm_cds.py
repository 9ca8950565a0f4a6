"""Class-data archives for the tests' Kafka JVMs (the Java tools and the brokers): Java 17 AppCDS.

A Kafka tool's JVM spends most of its CPU loading and verifying classes: a console producer of 200
records took ~2 CPU-s, ~1 with the classes mapped from an archive (docs/performance.md). The logic is
``kgate report``'s (:mod:`kgate.pipeline.classcache`): the first run of a tool (one Kafka release, one
main class, one set of JVM options) writes an archive at exit, published only after a clean exit and
by its size; later runs map it; one the JVM refuses is deleted. Never required: no ``java``, a cache
that cannot be written, or ``KGATE_TEST_CDS=0`` mean a run without. The archives live under
``$XDG_CACHE_HOME/kgate/cds-tests`` (else ``~/.cache``), beside the unpacked distributions' cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from kgate.pipeline import classcache
from kgate.pipeline.classcache import ClassArchive

#: ``0``: no archive (none written, none mapped)
ENV = "KGATE_TEST_CDS"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kgate" / "cds-tests"


def prepare(home: Path, main: str, java_opts: str) -> ClassArchive:
    """The archive of the JVM that runs ``main`` (a tool's script name, ``broker``) of the Kafka
    distribution at ``home`` with ``java_opts``: its ``options`` go into the JVM's ``KAFKA_OPTS``."""
    if os.environ.get(ENV, "1") == "0":
        return ClassArchive(notes=["off"])
    # the jars' folder and its listing: another unpacked build is another archive
    libs = home / "libs"
    try:
        jars = sorted(f"{p.name}:{p.stat().st_size}" for p in libs.iterdir())
    except OSError:
        return ClassArchive()
    key = classcache.java_key(f"{home.name}-{main.removesuffix('.sh')}", [str(libs), *jars], java_opts)
    if key is None:
        return ClassArchive()
    try:
        return classcache.prepare(java_opts, key=key, directory=cache_dir(), env=ENV)
    except OSError:  # a cache folder that exists but cannot be written: run without
        return ClassArchive()


def with_archive(env: dict[str, str], archive: ClassArchive) -> dict[str, str]:
    """``env`` with ``archive``'s options appended to ``KAFKA_OPTS`` (which every Kafka script passes
    to its JVM), a new mapping; options already there stay first."""
    return {**env, "KAFKA_OPTS": f"{env.get('KAFKA_OPTS', '')} {archive.options}".strip()}


def done(archive: ClassArchive, status: int | None, clean: tuple[int, ...] = (0,)) -> None:
    """After the JVM exited with ``status``: note a refused archive (deleted), publish a new one when
    the exit was ``clean``, and remove this run's leftovers."""
    if archive.using is not None:
        archive.check()
    archive.publish(status, clean)
