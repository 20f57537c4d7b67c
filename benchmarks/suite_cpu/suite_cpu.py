"""Where the test suite's CPU time goes, case by case, sandboxed work included: runs pytest with
suite_cpu_plugin.py (a cgroup per worker) and prints the total, the costliest cases and the costliest files.

    sudo python benchmarks/suite_cpu/suite_cpu.py [--top 40] [--junit FILE] [-- PYTEST ARGS]

Without PYTEST ARGS it runs make test's suite: -n 3 --dist loadgroup. It changes nothing in the
suite: the per-case figure make test prints counts only the processes a case waited for (a sandbox's zygote reaps
the rest), so a cut found by that figure alone can miss most of a case's work. Docker containers run in docker's
own cgroups and are not counted."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = ["-n", "3", "--dist", "loadgroup"]


def cases(junit: Path) -> list[tuple[float, float, str]]:
    """(CPU seconds, wall seconds, case) for each case of a junit file the plugin wrote."""
    out = []
    for case in ET.parse(junit).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cpu = float(props.get("cgroup_cpu_seconds") or 0)
        out.append((cpu, float(case.get("time") or 0), f"{case.get('classname')}::{case.get('name')}"))
    return sorted(out, reverse=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=40, help="cases and files to list")
    parser.add_argument("--junit", type=Path, help="keep the junit file here (default: a temporary one)")
    parser.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments (default: make test's)")
    args = parser.parse_args()
    junit = args.junit or Path(tempfile.mkdtemp(prefix="suite-cpu-")) / "junit.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parent),
                                                                      os.environ.get("PYTHONPATH")]))}
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_cpu_plugin",
                            f"--junitxml={junit}", *(args.pytest_args or SUITE)], cwd=REPO, env=env)
    found = cases(junit)
    total = sum(cpu for cpu, _wall, _name in found)
    print(f"\n{total:,.0f} CPU-s in {len(found)} cases (junit: {junit})")
    if not total:
        print("no case has a cgroup CPU figure: the plugin needs root and cgroup CPU accounting")
    for cpu, wall, name in found[:args.top]:
        print(f"{cpu:8.1f} CPU-s {wall:7.1f} s  {name}")
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for cpu, _wall, name in found:
        entry = by_file[name.split("::")[0]]
        entry[0] += cpu
        entry[1] += 1
    print()
    for file, (cpu, count) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{cpu:8.1f} CPU-s {int(count):5d} cases  {file}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
