"""Check the container image's build steps without a container engine (none runs where kgate is built).

    .venv/bin/python tools/check_image.py --upstream 127.0.0.1:9092   # all steps, live health check included
    .venv/bin/python tools/check_image.py                              # without the live step

What a ``docker build`` would do is done here the same way, outside a container:

1. **Dockerfile**: parsed (continuations, stages, exec-form JSON); every ``FROM`` pinned to a full
   Python version; the build stage installs gcc, the lock and ``docker/build-requirements.txt``
   with ``--no-deps`` and builds the wheel with the hot modules compiled (``BUILD_COMMAND``,
   setup.py); the run stage installs ``requirements.lock`` with ``--no-deps`` and kgate's wheel
   with ``--no-deps`` (nothing resolved at build time) and runs ``pip check``; it runs as a non-root
   ``USER`` before ``ENTRYPOINT``; ``EXPOSE`` lists the admin and bootstrap ports of the config the
   image ships; ``HEALTHCHECK`` is ``kgate healthcheck`` on that config.
2. **Lock**: ``requirements.lock`` is what ``tools/lock_deps.py`` writes now (pyproject's runtime
   dependencies and their closure, at the tested versions), and each pin satisfies pyproject;
   every line of ``docker/build-requirements.txt`` is pinned.
3. **Install**: kgate's wheel is built as the build stage builds it (a fresh venv with the lock and
   the build tools, ``BUILD_COMMAND``) and installed with the lock into another fresh venv, as the
   run stage does (each venv made ``--without-pip``, this interpreter's pip installing into it:
   ensurepip was most of a warm run); ``pip check`` passes there, and that kgate imports every module of
   ``HOT_MODULES`` compiled and none stale (proxy/runtime/compiled.py). With ``--wheel-cache DIR`` a wheel
   built before from the very same inputs (every file of the build context, the lock, the build
   tools' pins, this Python) is taken from DIR instead of compiled again, and the output says so;
   everything after the build runs as without it.
4. **Commands**: that venv's ``kgate --version`` is the source's version, and ``kgate check-config``
   accepts the config the image ships.
5. **Health check** (with ``--upstream``): that venv's kgate runs the image's config (its ports moved
   to free ones, its upstream pointed at ``--upstream``) and the Dockerfile's HEALTHCHECK command,
   run as written but for the config path, succeeds once kgate is ready and fails once it stopped.

What it cannot check: the base image itself, the non-root user's file permissions in the image,
and anything Docker-specific (layer caching, the ``.dockerignore``d context). Exit 0 if every step
passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import lock_deps  # noqa: E402  (tools/ is not a package)

IMAGE_CONFIG = "/etc/kgate/kgate.yaml"
BUILD_REQUIREMENTS = ROOT / "docker" / "build-requirements.txt"
#: how the build stage builds the wheel (setup.py: KGATE_WHEEL_COMPILED=1 compiles the hot modules)
BUILD_COMMAND = "KGATE_WHEEL_COMPILED=1 pip wheel --no-deps --no-build-isolation"
#: wheels a ``--wheel-cache`` keeps (the newest; one per distinct input)
WHEEL_CACHE_KEEP = 4


@dataclass
class Instruction:
    stage: int
    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON array form's argv (``["kgate", "run"]``), None for the shell form."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        value = json.loads(text)
        return [str(v) for v in value]


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions in order, continuation lines joined, comments dropped; ``stage`` counts FROMs."""
    out: list[Instruction] = []
    stage = -1
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(stage, keyword, args.strip(), start))
    return out


class Checker:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def ok(self, what: str) -> None:
        print(f"ok: {what}", flush=True)

    def check(self, cond: bool, what: str, why: str = "") -> bool:
        if cond:
            self.ok(what)
        else:
            self.failures.append(f"{what}: {why}" if why else what)
            print(f"FAIL: {what}" + (f": {why}" if why else ""), flush=True)
        return cond


def _clean_env() -> dict[str, str]:
    """The environment for what runs in the fresh venv: nothing may reach into the checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _run(argv: list[str], env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=_clean_env() if env is None else env, **kw)


def build_context(dest: Path) -> Path:
    """The build context as ``docker build`` sends it: the tree less what .dockerignore names.

    The wheel is built from this copy, so a build never writes into the checkout (setuptools leaves
    ``build/`` and ``*.egg-info`` behind) and a file the context lacks fails here as in a real build.
    """
    patterns = [
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignore(folder: str, names: list[str]) -> set[str]:
        rel_dir = Path(folder).relative_to(ROOT)
        out = set()
        for name in names:
            rel = (rel_dir / name).as_posix()
            for pat in patterns:
                bare = pat[3:] if pat.startswith("**/") else pat
                if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(name, bare):
                    out.add(name)
        return out

    shutil.copytree(ROOT, dest, symlinks=True, ignore=ignore)
    return dest


def check_dockerfile(c: Checker, dockerfile: Path) -> tuple[list[Instruction], Path | None, list[str] | None]:
    """Step 1; returns the instructions, the config file the image ships, and the HEALTHCHECK argv."""
    ins = parse_dockerfile(dockerfile.read_text())
    final = max(i.stage for i in ins)
    run_stage = [i for i in ins if i.stage == final]
    for i in ins:
        if i.keyword == "FROM":
            image = i.args.split()[0]
            c.check(
                bool(re.search(r":\d+\.\d+\.\d+(-[\w.-]+)?$", image)),
                f"FROM {image} (line {i.line}) is pinned to a full version",
                "use e.g. python:3.11.7-slim-bookworm, not a moving tag",
            )
    runs = " && ".join(i.args for i in run_stage if i.keyword == "RUN")
    copies = [i.args.split() for i in run_stage if i.keyword == "COPY"]
    build_runs = " && ".join(i.args for i in ins if i.stage != final and i.keyword == "RUN")
    c.check(
        "pip install --no-deps -r /tmp/requirements.lock -r /tmp/build-requirements.txt" in build_runs,
        "the build stage installs requirements.lock and docker/build-requirements.txt with --no-deps",
    )
    c.check(
        bool(re.search(r"apt-get install [^&]*\bgcc\b", build_runs)) and BUILD_COMMAND in build_runs,
        "the build stage compiles the hot modules (gcc, KGATE_WHEEL_COMPILED=1 pip wheel --no-build-isolation)",
    )
    c.check(
        any(a[-2:] == ["requirements.lock", "/tmp/requirements.lock"] for a in copies)
        and "pip install --no-deps -r /tmp/requirements.lock" in runs,
        "the run stage installs requirements.lock with --no-deps",
    )
    c.check(
        bool(re.search(r"pip install --no-deps /tmp/wheels/\*\.whl", runs)) and "pip check" in runs,
        "the run stage installs kgate's wheel with --no-deps and runs pip check",
    )
    users = [i for i in run_stage if i.keyword == "USER"]
    entry = next((i for i in run_stage if i.keyword == "ENTRYPOINT"), None)
    user = users[-1].args.split(":")[0] if users else "root"
    c.check(
        user not in ("root", "0") and entry is not None and users[-1].line < entry.line,
        f"runs as non-root USER {user} before ENTRYPOINT",
    )
    shipped = next((a for a in copies if a[-1] == IMAGE_CONFIG), None)
    config_path = ROOT / shipped[-2] if shipped else None
    c.check(config_path is not None and config_path.exists(), f"the image ships a config at {IMAGE_CONFIG}")
    cmd = next((i.exec_form() for i in run_stage if i.keyword == "CMD"), None)
    c.check(cmd == ["-c", IMAGE_CONFIG], f"CMD runs {IMAGE_CONFIG}", f"got {cmd}")
    exposed = {p for i in run_stage if i.keyword == "EXPOSE" for p in i.args.split()}
    if config_path is not None and config_path.exists():
        data = yaml.safe_load(config_path.read_text())
        admin_port = str(data["admin"]["listen"]).rsplit(":", 1)[1]
        boot_port = str(data["virtual_clusters"][0]["listen"]).rsplit(":", 1)[1]
        c.check(admin_port in exposed, f"EXPOSE lists the admin port {admin_port}", f"exposed: {sorted(exposed)}")
        c.check(boot_port in exposed, f"EXPOSE lists the bootstrap port {boot_port}", f"exposed: {sorted(exposed)}")
    health = next((i for i in run_stage if i.keyword == "HEALTHCHECK"), None)
    argv = None
    if health is not None:
        cmd_part = health.args[health.args.index("CMD") + 3 :] if "CMD" in health.args else ""
        argv = json.loads(cmd_part) if cmd_part.strip().startswith("[") else shlex.split(cmd_part)
    c.check(
        argv is not None and argv[:2] == ["kgate", "healthcheck"] and IMAGE_CONFIG in argv,
        "HEALTHCHECK runs `kgate healthcheck` on the image's config",
        f"got {argv}",
    )
    return ins, config_path, argv


def check_lock(c: Checker) -> None:
    """Step 2 (and the build stage's tools: every one pinned)."""
    for line in BUILD_REQUIREMENTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            c.check("==" in line, f"docker/build-requirements.txt pins {line.split('==')[0]}", line)
    lock_text = (ROOT / "requirements.lock").read_text()
    expected = lock_deps.render(lock_deps.closure(lock_deps.runtime_requirements()))
    c.check(lock_text == expected, "requirements.lock matches the tested environment", "run tools/lock_deps.py")
    pins = dict(line.split("==", 1) for line in lock_text.splitlines() if line and not line.startswith("#"))
    for req in lock_deps.runtime_requirements():
        name = lock_deps.canonical(req.name)
        version = pins.get(name)
        c.check(
            version is not None and req.specifier.contains(version, prereleases=True),
            f"requirements.lock pins {name}=={version}, which pyproject's {req} allows",
        )


#: the files setuptools reads for the wheel besides the packages (``project.readme`` is added from
#: pyproject.toml): the rest of the build context (docs/, tools/, examples/, CHANGELOG.md...) is in
#: no wheel, and keying the cache on it made every docs-only change a cold mypyc build
_METADATA_FILES = ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "LICENSE")


def wheel_inputs(src: Path) -> set[str]:
    """Top-level names of the build context that a wheel build reads: the metadata files, the
    readme pyproject.toml names, ``kgate/`` and the folders its symlinks link in."""
    names = set(_METADATA_FILES) | {"kgate"}
    pyproject = src / "pyproject.toml"
    if pyproject.is_file():
        readme = tomllib.loads(pyproject.read_text()).get("project", {}).get("readme")
        if isinstance(readme, dict):
            readme = readme.get("file")
        if isinstance(readme, str):
            names.add(readme.split("/", 1)[0])
    kgate = src / "kgate"
    if kgate.is_dir():
        for entry in kgate.iterdir():
            if entry.is_symlink():
                target = os.readlink(entry)
                if target.startswith("../"):
                    names.add(target[3:].split("/", 1)[0])
    return names


def build_inputs_digest(src: Path) -> str:
    """SHA-256 of everything a wheel build reads: each file the build reads of the context
    (``wheel_inputs``: path and bytes), the build tools' pins, the lock, the build command and this
    interpreter. Equal digests build the same wheel, so a cached one stands for a new build."""
    h = hashlib.sha256()
    for extra in (BUILD_REQUIREMENTS, ROOT / "requirements.lock"):
        h.update(extra.name.encode() + b"\0" + extra.read_bytes() + b"\0")
    h.update(f"{BUILD_COMMAND}\0{sys.version}\0{sys.platform}\0{os.uname().machine}\0".encode())
    inputs = wheel_inputs(src)
    for path in sorted(p for p in src.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(src).as_posix()
        if rel.split("/", 1)[0] not in inputs:
            continue
        data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        h.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def _cached_wheel(c: Checker, cache: Path, digest: str, wheels: Path) -> bool:
    """Copy the wheel built before from inputs with ``digest`` into ``wheels``; False if none."""
    found = sorted((cache / digest).glob("*.whl")) if (cache / digest).is_dir() else []
    if len(found) != 1:
        return False
    wheels.mkdir(parents=True, exist_ok=True)
    shutil.copy2(found[0], wheels / found[0].name)
    built = time.strftime("%Y-%m-%d %H:%M", time.gmtime(found[0].stat().st_mtime))
    c.ok(
        f"kgate's wheel ({BUILD_COMMAND}): {found[0].name}, built {built} UTC from these exact inputs "
        f"(sha256 {digest[:16]}), taken from {cache}"
    )
    return True


def _store_wheel(cache: Path, digest: str, wheels: Path) -> None:
    """Keep the wheel just built for a later run with the same inputs (atomic: a rename)."""
    built = sorted(wheels.glob("*.whl"))
    if len(built) != 1:
        return
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:16]}-", dir=cache))
    shutil.copy2(built[0], tmp / built[0].name)
    try:
        tmp.rename(cache / digest)
    except OSError:  # another run stored the same inputs' wheel first
        shutil.rmtree(tmp, ignore_errors=True)
    kept = sorted((d for d in cache.iterdir() if d.is_dir() and not d.name.startswith(".")), key=os.path.getmtime)
    for old in kept[:-WHEEL_CACHE_KEEP]:
        shutil.rmtree(old, ignore_errors=True)


def install(c: Checker, work: Path, wheel_cache: Path | None = None) -> Path | None:
    """Step 3: the wheel, built as the build stage does (or taken from ``wheel_cache``, built there
    from the same inputs), and a fresh venv with the lock; its bin dir."""
    wheels = work / "wheels"
    src = build_context(work / "src")
    digest = build_inputs_digest(src) if wheel_cache is not None else ""
    if wheel_cache is None or not _cached_wheel(c, wheel_cache, digest, wheels):
        if not _build_wheel(c, work, src, wheels):
            return None
        if wheel_cache is not None:
            _store_wheel(wheel_cache, digest, wheels)
    return _install_wheel(c, work, wheels)


def _fresh_venv(c: Checker, venv: Path, what: str) -> list[str] | None:
    """A new venv at ``venv`` and the pip command that installs into it; None if it failed.

    Made ``--without-pip``, and this interpreter's pip runs in it (``pip --python``: pip's own code
    under the venv's interpreter, installing into the venv as the venv's pip would): ensurepip
    installs and byte-compiles pip into every new venv, most of a warm run's time on a busy core,
    for a tool the checks do not examine."""
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    if not c.check(made.returncode == 0, what, made.stderr[-2000:]):
        return None
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(venv / "bin" / "python")]


def _build_wheel(c: Checker, work: Path, src: Path, wheels: Path) -> bool:
    """The build stage: a fresh venv with the lock and the pinned build tools, then ``BUILD_COMMAND``."""
    tools_pip = _fresh_venv(c, work / "build-venv", "a fresh venv for the build stage")  # the lock, the build tools
    if tools_pip is None:
        return False
    lock, build_reqs = ROOT / "requirements.lock", BUILD_REQUIREMENTS
    got = _run([*tools_pip, "install", "--no-deps", "-r", str(lock), "-r", str(build_reqs)])
    if not c.check(got.returncode == 0, "the build stage's tools install (--no-deps)", got.stderr[-2000:]):
        return False
    variable, _pip, *wheel_args = BUILD_COMMAND.split()  # KGATE_WHEEL_COMPILED=1 pip wheel ...
    name, value = variable.split("=")
    built = _run([*tools_pip, *wheel_args, "--wheel-dir", str(wheels), str(src)], env={**_clean_env(), name: value})
    why = built.stdout[-2000:] + built.stderr[-2000:]
    return c.check(built.returncode == 0, f"kgate's wheel builds ({BUILD_COMMAND})", why)


def _install_wheel(c: Checker, work: Path, wheels: Path) -> Path | None:
    """The run stage: a fresh venv with the lock and kgate's wheel, all --no-deps; its bin dir."""
    venv = work / "venv"
    pip = _fresh_venv(c, venv, "a fresh venv")
    if pip is None:
        return None
    deps = _run([*pip, "install", "--no-deps", "-r", str(ROOT / "requirements.lock")])
    if not c.check(deps.returncode == 0, "pip install --no-deps -r requirements.lock", deps.stderr[-2000:]):
        return None
    wheel = _run([*pip, "install", "--no-deps", *map(str, wheels.glob("*.whl"))])
    if not c.check(wheel.returncode == 0, "pip install --no-deps kgate's wheel", wheel.stderr[-2000:]):
        return None
    checked = _run([*pip, "check"])
    c.check(checked.returncode == 0, "pip check in the fresh venv", checked.stdout + checked.stderr)
    probe = (
        "from kgate.proxy.runtime.compiled import *; print(HOT_MODULES == tuple(compiled_modules()), stale_modules())"
    )
    compiled = _run([str(venv / "bin" / "python"), "-c", probe], cwd=work)
    c.check(
        compiled.stdout == "True []\n",
        "the installed kgate runs every hot module compiled, none stale",
        compiled.stdout + compiled.stderr,
    )
    return venv / "bin"


def check_commands(c: Checker, bin_dir: Path, config: Path, work: Path) -> None:
    """Step 4."""
    sys.path.insert(0, str(ROOT))
    from kgate import __version__

    version = _run([str(bin_dir / "kgate"), "--version"], cwd=work)
    c.check(version.stdout.strip() == f"kgate {__version__}", "kgate --version", version.stdout + version.stderr)
    checked = _run([str(bin_dir / "kgate"), "check-config", str(config)], cwd=work)
    c.check(checked.returncode == 0, f"kgate check-config {config.relative_to(ROOT)}", checked.stderr)


def _free_port(avoid: range = range(0)) -> int:
    """A free port outside ``avoid`` (the node-port range: the kernel may hand out a port in it,
    since nothing is bound there until kgate starts)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in avoid:
            return port


def _free_range(count: int) -> int:
    for _ in range(200):
        base = _free_port()
        if base + count > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                # as kgate's listeners bind: a port that only a closed connection's TIME_WAIT holds is
                # free to them, and a suite run leaves hundreds of those across the ephemeral range
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def check_health(c: Checker, bin_dir: Path, config: Path, health: list[str], upstream: str, work: Path) -> None:
    """Step 5: the HEALTHCHECK command against a live kgate from the fresh venv."""
    data = yaml.safe_load(config.read_text())
    base = _free_range(256)
    node_range = range(base, base + 256)
    admin_port = _free_port(avoid=node_range)
    data["admin"]["listen"] = f"127.0.0.1:{admin_port}"
    listen_port = admin_port
    while listen_port == admin_port:  # each was free when picked; neither is bound yet
        listen_port = _free_port(avoid=node_range)
    vc = data["virtual_clusters"][0]
    vc.update(
        listen=f"127.0.0.1:{listen_port}",
        advertised_host="127.0.0.1",
        upstream=[upstream],
        node_ports={"base": base, "count": 256, "first_node_id": 0},
    )
    live = work / "kgate.yaml"
    live.write_text(yaml.safe_dump(data, sort_keys=False))
    argv = [str(live) if a == IMAGE_CONFIG else a for a in health]
    argv[0] = str(bin_dir / argv[0])
    log = (work / "kgate.log").open("wb")
    proc = subprocess.Popen(
        [str(bin_dir / "kgate"), "run", "-c", str(live)],
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_clean_env(),
    )
    try:
        deadline = time.monotonic() + 30
        answer = _run(argv, cwd=work)
        while answer.returncode != 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            answer = _run(argv, cwd=work)
        c.check(answer.returncode == 0, "HEALTHCHECK passes once kgate is ready", answer.stdout + answer.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    answer = _run(argv, cwd=work)
    c.check(answer.returncode == 1, "HEALTHCHECK fails once kgate stopped", f"exit {answer.returncode}")
    c.check(proc.returncode == 0, "kgate from the fresh venv exits 0 on SIGTERM", f"exit {proc.returncode}")
    if c.failures:
        print("kgate's log:\n" + (work / "kgate.log").read_text(errors="replace")[-5000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", metavar="HOST:PORT", help="a Kafka broker for the live health check step")
    parser.add_argument("--dockerfile", default=str(ROOT / "Dockerfile"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory (printed)")
    parser.add_argument(
        "--wheel-cache",
        metavar="DIR",
        help="reuse a wheel built before from the same inputs (sha256 of the context, lock, pins), kept in DIR",
    )
    args = parser.parse_args(argv)
    c = Checker()
    _ins, config, health = check_dockerfile(c, Path(args.dockerfile))
    check_lock(c)
    work = Path(tempfile.mkdtemp(prefix="kgate-image-"))
    try:
        bin_dir = install(c, work, Path(args.wheel_cache) if args.wheel_cache else None)
        if bin_dir is not None and config is not None:
            check_commands(c, bin_dir, config, work)
            if args.upstream and health is not None:
                check_health(c, bin_dir, config, health, args.upstream, work)
            elif not args.upstream:
                print("skipped: the live HEALTHCHECK step (no --upstream given)")
    finally:
        if args.keep:
            print(f"work directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if c.failures:
        print(f"{len(c.failures)} check(s) failed", file=sys.stderr)
        return 1
    print("image build steps: all checks passed")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
