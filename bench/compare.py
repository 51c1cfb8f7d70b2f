"""Run one bench script at another revision and at the working tree, in turns, in one run.

A bench's absolute figures move by ±25% from one minute to the next on a shared 2-core
machine, so "not slower than before" is only meaningful when both sides are measured in
the same window. This checks the other revision out into a temporary git worktree and
runs ``base, head, base, head, …``; each side imports its own tree (the bench scripts
put their repository root first on ``sys.path``). It prints one JSON object: every run's
output, and for each numeric field the median of each side and ``head / base``.

    python bench/compare.py --base REV [--rounds N] bench/pipeline.py [bench args...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def leaves(value: Any, prefix: str = "") -> dict[str, float]:
    """Numeric fields of a JSON value, flattened to dotted names."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, int | float):
        return {prefix: float(value)}
    if isinstance(value, dict):
        out: dict[str, float] = {}
        for key, item in value.items():
            out.update(leaves(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {}


def run(tree: Path, script: str, args: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(tree / script), *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree / script} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    out = done.stdout
    result, _ = json.JSONDecoder().raw_decode(out, out.index("{"))  # indented or one line
    return dict(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("script", help="e.g. bench/pipeline.py")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base), opts.base],
            check=True,
        )
        try:
            runs: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
            for _ in range(opts.rounds):
                runs["base"].append(run(base, opts.script, opts.args))
                runs["head"].append(run(ROOT, opts.script, opts.args))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False
            )
    medians = {
        side: {
            name: statistics.median(leaves(r)[name] for r in results if name in leaves(r))
            for name in leaves(results[0])
        }
        for side, results in runs.items()
    }
    ratios = {
        name: round(medians["head"][name] / value, 3)
        for name, value in medians["base"].items()
        if value and name in medians["head"]
    }
    print(
        json.dumps(
            {
                "benchmark": f"compare:{opts.script}",
                "base": opts.base,
                "rounds": opts.rounds,
                "median": medians,
                "head_over_base": ratios,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
