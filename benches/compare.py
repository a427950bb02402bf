"""Compare the ratios of the two newest saved pytest-benchmark runs; fail on a regression over 15%.

    python benches/compare.py                    # the two newest runs under .benchmarks/
    python benches/compare.py OLD.json NEW.json  # two given runs
    python benches/compare.py --threshold 0.10
    python benches/compare.py --against 2        # the newest run against the one before the previous

Every benchmark here saves, in its `extra_info`, its ratio to a named peer measured in the
same run (`ratio`, and `ratio_float64` / `ratio_float32` for the product metrics), always
oriented so that higher is better (neuroneval's throughput over the peer's). Absolute times
move by 10-25% between runs on a shared VM, so they are shown but never gated; the ratios
cancel most of that. A benchmark regresses when one of its ratios falls below
(1 - threshold) x the previous run's. Benchmarks are matched by their full name, which holds
the size ("[small]", "[full]"); ones present in only one run are listed, not gated. With
fewer than two saved runs there is nothing to compare and the exit status is 0.

Even ratios move between identical runs when a benchmark times one round (the full-size
product metrics moved by up to 19%), so `make bench` confirms a regression before failing:
when this script fails, it runs the benchmarks once more and fails only if the new run also
regressed against the same baseline (`--against 2`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def saved_runs(directory: Path) -> list[Path]:
    """The saved runs of the machine that saved most recently, oldest first (by their
    autosave counter, NNNN_...json)."""
    files = [p for p in directory.glob("*/*.json") if p.name[:4].isdigit()]
    if not files:
        return []
    newest = max(files, key=lambda p: p.stat().st_mtime)
    return sorted((p for p in files if p.parent == newest.parent), key=lambda p: int(p.name.split("_")[0]))


def ratios(run: dict[str, Any]) -> dict[str, dict[str, float]]:
    """fullname -> {ratio key: value} for every benchmark of a saved run."""
    out: dict[str, dict[str, float]] = {}
    for bench in run.get("benchmarks", []):
        info = bench.get("extra_info") or {}
        keys = {
            k: float(v)
            for k, v in info.items()
            if (k == "ratio" or k.startswith("ratio_")) and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        out[bench["fullname"]] = keys
    return out


def compare(old: dict[str, Any], new: dict[str, Any], threshold: float) -> tuple[list[str], list[str]]:
    """Lines of a markdown table and the regressions."""
    before, after = ratios(old), ratios(new)
    lines = ["| benchmark | ratio | previous | now | change |", "|---|---|---:|---:|---:|"]
    regressions: list[str] = []
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            lines.append(f"| {name} | | | | {'new' if name in after else 'gone'} |")
            continue
        for key in sorted(set(before[name]) | set(after[name])):
            b, a = before[name].get(key), after[name].get(key)
            if b is None or a is None or b <= 0:
                lines.append(f"| {name} | {key} | {b} | {a} | not compared |")
                continue
            change = a / b - 1.0
            flag = ""
            if a < (1.0 - threshold) * b:
                flag = " **regressed**"
                regressions.append(f"{name} {key}: {b:.4g} -> {a:.4g} ({change:+.1%})")
            lines.append(f"| {name} | {key} | {b:.4g} | {a:.4g} | {change:+.1%}{flag} |")
    return lines, regressions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="OLD.json NEW.json (default: the two newest saved)")
    parser.add_argument("--dir", type=Path, default=ROOT / ".benchmarks", help="pytest-benchmark's storage")
    parser.add_argument("--threshold", type=float, default=0.15, help="largest allowed fall of a ratio (0.15)")
    parser.add_argument(
        "--against",
        type=int,
        default=1,
        help="compare the newest run with the one this many runs before it (default 1, the previous one; "
        "make bench uses 2 to confirm a regression by a second run against the same baseline)",
    )
    args = parser.parse_args(argv)

    if args.runs:
        if len(args.runs) != 2:
            parser.error("give two saved runs (OLD NEW), or none")
        old_path, new_path = args.runs
    else:
        if args.against < 1:
            parser.error("--against must be at least 1")
        runs = saved_runs(args.dir)
        if len(runs) < args.against + 1:
            print(f"{len(runs)} saved run(s) in {args.dir}: nothing to compare yet (this run is the baseline)")
            return 0
        old_path, new_path = runs[-1 - args.against], runs[-1]
    old = json.loads(old_path.read_text(encoding="utf-8"))
    new = json.loads(new_path.read_text(encoding="utf-8"))
    lines, regressions = compare(old, new, args.threshold)
    print(f"Ratios to the peers: {old_path.name} -> {new_path.name} (higher is better)\n")
    print("\n".join(lines))
    if regressions:
        print(f"\n{len(regressions)} ratio(s) fell by more than {args.threshold:.0%}:", file=sys.stderr)
        for r in regressions:
            print(f"  {r}", file=sys.stderr)
        return 1
    print(f"\nNo ratio fell by more than {args.threshold:.0%}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
