"""The A/B of record: the shared yardstick with kgate's usual targets, in one invocation.

    .venv/bin/python bench/ab_yardstick.py --old-tree /work/wt-old [--reps 5] [--out ab.json] [run.py options...]

Targets: ``direct``, ``python-relay``, ``kgate-old`` (kgate from ``--old-tree``, a worktree of the
build to compare against: ``git worktree add --detach ../wt-old COMMIT``), ``kgate`` (this tree,
passthrough), ``kgate-audit`` (``audit-log`` writing to a scratch directory) and ``kgate-acl``
(the authorizer with five rules, default deny, plus ``internal-topics``); on request (``--targets``)
``kgate-acl-old``, the old tree with the same filters, and ``kgate-authz`` / ``kgate-policy`` (the
authorizer's five rules alone, ``topic-policy`` denying ``secret-*``) with their ``-old`` twins;
with ``--compiled-tree`` (a checkout built
with ``tools/compile_hot.py``) ``kgate-compiled`` and ``kgate-acl-compiled``. Why a script: filter
configs are JSON inside a shell command inside run.py's ``{placeholder}`` templates, so every
brace must be doubled; building the argv here keeps the A/B repeatable. Run it on a quiet
machine only (docs/performance.md: other load turns 20 % differences into noise).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
YARDSTICK = ROOT.parent / "shared" / "bench" / "run.py"
ACL = {
    "default": "deny",
    "rules": [
        {"allow": "all", "topic": "*"},
        {"allow": "all", "group": "*"},
        {"allow": "all", "transactional_id": "*"},
        {"allow": "all", "cluster": True},
        {"deny": "all", "topic": {"glob": "secret-*"}},
    ],
}


def _template(obj: object) -> str:
    """JSON with run.py's placeholder braces escaped."""
    return json.dumps(obj).replace("{", "{{").replace("}", "}}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-tree", required=True, help="a checkout of the build to compare against")
    ap.add_argument("--reps", default="5")
    ap.add_argument("--out", default="ab-yardstick.json")
    ap.add_argument("--targets", default="direct,python-relay,kgate-old,kgate,kgate-audit,kgate-acl")
    ap.add_argument("--compiled-tree", help="a checkout built with tools/compile_hot.py: target kgate-compiled")
    args, rest = ap.parse_known_args()
    if not YARDSTICK.exists():
        print(f"ab_yardstick: {YARDSTICK} not found (the shared material sits beside the repository)", file=sys.stderr)
        return 2
    audit_dir = tempfile.mkdtemp(prefix="kgate-ab-audit-")
    run = "cd {tree} && exec {{python}} -m kgate --listen {{listen}} --upstream {{upstream}}"
    new, old = run.format(tree=ROOT), run.format(tree=Path(args.old_tree).resolve())
    acl = " --filter 'authorizer=" + _template(ACL) + "' --filter internal-topics"
    authz = " --filter 'authorizer=" + _template(ACL) + "'"
    policy = " --filter 'topic-policy=" + _template({"deny": ["secret-*"]}) + "'"
    extras = {
        "kgate-old": old,
        "kgate": new,
        "kgate-audit": new + " --filter 'audit-log=" + _template({"directory": audit_dir}) + "'",
        "kgate-acl": new + acl,
        "kgate-acl-old": old + acl,
        # issue 27 item 9: each policy filter alone against passthrough, both builds
        "kgate-authz": new + authz,
        "kgate-authz-old": old + authz,
        "kgate-policy": new + policy,
        "kgate-policy-old": old + policy,
    }
    if args.compiled_tree:
        compiled = run.format(tree=Path(args.compiled_tree).resolve())
        extras["kgate-compiled"] = compiled
        extras["kgate-acl-compiled"] = compiled + acl
    argv = [
        sys.executable,
        str(YARDSTICK),
        "--reps",
        args.reps,
        "--nice",
        "-10",
        "--out",
        args.out,
        "--targets",
        args.targets,
        *rest,
    ]
    for name, cmd in extras.items():
        if name in args.targets.split(","):
            argv += ["--extra-name", name, "--extra", cmd]
    return subprocess.call(argv)


if __name__ == "__main__":
    sys.exit(main())
