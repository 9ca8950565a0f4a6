"""Each xdist worker's chain of tests, from a ``KGATE_TEST_TIMELINE=FILE ./dev/test`` run.

    KGATE_TEST_TIMELINE=/tmp/tl.jsonl ./dev/test && .venv/bin/python tools/suite_timeline.py /tmp/tl.jsonl

Prints, per worker, its busy time, when it finished, and the time spent in each xdist group and
module: the suite's wall is the last worker's finish, so this shows which chain to shorten. Then
the CPU seconds per module over all workers (the worker's own and its descendants', as they run): the
suite is CPU-bound on two cores, so that is what a cut must lower.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("timeline", type=Path)
    ap.add_argument("--top", type=int, default=8, help="modules shown per worker")
    args = ap.parse_args()
    rows = [json.loads(line) for line in args.timeline.read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit("no rows: was KGATE_TEST_TIMELINE set for the run?")
    t0 = min(r["start"] for r in rows)
    by_worker: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        by_worker[r["worker"]].append(r)
    for worker, mine in sorted(by_worker.items()):
        busy = sum(r["end"] - r["start"] for r in mine)
        last = max(r["end"] for r in mine) - t0
        groups: collections.Counter[str] = collections.Counter()
        modules: collections.Counter[str] = collections.Counter()
        cpu: collections.Counter[str] = collections.Counter()
        for r in mine:
            groups[r["group"] or "-"] += r["end"] - r["start"]
            modules[r["test"].split("::")[0]] += r["end"] - r["start"]
            cpu[r["test"].split("::")[0]] += r.get("cpu", 0.0)
        print(f"{worker}: {len(mine)} tests, busy {busy:.0f} s, {sum(cpu.values()):.0f} CPU-s, done at {last:.0f} s")
        print("  groups: " + ", ".join(f"{g} {s:.0f} s" for g, s in groups.most_common()))
        for module, s in modules.most_common(args.top):
            print(f"  {s:7.1f} s  {cpu[module]:7.1f} CPU-s  {module}")
    cpu_all: collections.Counter[str] = collections.Counter()
    for r in rows:
        cpu_all[r["test"].split("::")[0]] += r.get("cpu", 0.0)
    if any(cpu_all.values()):
        print(f"CPU by module, all workers ({sum(cpu_all.values()):.0f} CPU-s; each process counted as it runs):")
        for module, s in cpu_all.most_common(args.top * 2):
            print(f"  {s:7.1f} CPU-s  {module}")


if __name__ == "__main__":
    main()
