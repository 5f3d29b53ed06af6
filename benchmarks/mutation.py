"""Mutation testing with mutmut (validate/, preflight/, sglangargv/, rolloutreport/): kill ratio per module, survivors.

Why: a test suite that stays green when the code under it is broken protects nothing
(30 of 54 planted bugs once left the suite green). mutmut changes one operator, constant
or argument at a time and reruns the tests that cover that function; a mutant that no test
notices "survives". Not in CI (minutes of CPU); run it after changing one of those packages or its tests:

    .venv/bin/python benchmarks/mutation.py            # runs mutmut, prints the table
    .venv/bin/python benchmarks/mutation.py --no-run   # only reads the last run's results
    .venv/bin/python benchmarks/mutation.py --modules client,gate   # only those modules' mutants
    .venv/bin/python benchmarks/mutation.py --package preflight     # preflight/'s modules (default validate)
    .venv/bin/python benchmarks/mutation.py --package sglangargv    # the SGLang command line's

Configuration (which tests, which files): [tool.mutmut] in pyproject.toml. Results are
written to benchmarks/results/mutation-<date>.json (per module: killed, survived, untested,
and the survivors' names, for review).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTMUT = Path(sys.executable).parent / "mutmut"
TARGET = 0.90
# mutmut's result words -> our three buckets
KILLED = {"killed", "timeout", "segfault"}
SURVIVED = {"survived", "suspicious"}


def results() -> dict[str, Counter[str]]:
    """Per module (validate.<module>), the count of each mutmut status, plus the survivors."""
    out = subprocess.run(
        [str(MUTMUT), "results", "--all", "true"], cwd=REPO, capture_output=True, text=True, check=True
    )
    per: dict[str, Counter[str]] = defaultdict(Counter)
    survivors: dict[str, list[str]] = defaultdict(list)
    for line in out.stdout.splitlines():
        m = re.match(r"\s*((?:validate|preflight|sglangargv|rolloutreport)\.\w+)\.\S+__mutmut_\d+: (.+)$", line)
        if not m:
            continue
        module, status = m.group(1), m.group(2).strip()
        bucket = "killed" if status in KILLED else "survived" if status in SURVIVED else "untested"
        per[module][bucket] += 1
        if bucket != "killed":
            survivors[module].append(line.split(":")[0].strip())
    for module in per:
        per[module]["_survivors"] = survivors[module]  # type: ignore[assignment]
    return per


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-run", action="store_true", help="read the last run's results only")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--package", default="validate", choices=["validate", "preflight", "sglangargv", "rolloutreport"])
    ap.add_argument("--modules", default="", help="comma list of the package's modules to mutate (default: all)")
    args = ap.parse_args(argv)
    modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    if not args.no_run:
        shutil.rmtree(REPO / "mutants", ignore_errors=True)
        patterns = [f"{args.package}.{m}.*" for m in modules] or [f"{args.package}.*"]
        # one mutmut run per pattern: mutmut 3 given several patterns at once collected the tests
        # and ran no mutant (every one "untested"); a run stopped part-way goes on where it left off
        for pattern in patterns:
            subprocess.run(
                [str(MUTMUT), "run", "--max-children", str(args.jobs), pattern],
                cwd=REPO,
                check=False,
                stdout=subprocess.DEVNULL,
            )
    per = {k: v for k, v in results().items() if k.split(".", 1)[0] == args.package}
    if modules:
        per = {k: v for k, v in per.items() if k.split(".", 1)[1] in modules}
    rows = []
    print(f"{'module':<22} {'mutants':>8} {'killed':>7} {'survived':>9} {'untested':>9} {'kill ratio':>11}")
    for module in sorted(per):
        c = per[module]
        total = c["killed"] + c["survived"] + c["untested"]
        ratio = c["killed"] / total if total else 0.0
        rows.append(
            {
                "module": module,
                "mutants": total,
                "killed": c["killed"],
                "survived": c["survived"],
                "untested": c["untested"],
                "kill_ratio": round(ratio, 4),
                "survivors": c["_survivors"],
            }
        )
        flag = "" if ratio >= TARGET else f"  (below {TARGET:.0%})"
        print(f"{module:<22} {total:>8} {c['killed']:>7} {c['survived']:>9} {c['untested']:>9} {ratio:>10.1%}{flag}")
    part = "" if args.package == "validate" else f"-{args.package}"
    part += ("-" + "-".join(sorted(modules))) if modules else ""
    out = REPO / "benchmarks" / "results" / f"mutation-{datetime.date.today().isoformat()}{part}.json"
    out.write_text(json.dumps({"tool": "mutmut", "target": TARGET, "modules": rows}, indent=1) + "\n")
    print(f"survivors per module: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
