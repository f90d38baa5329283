"""Compare pipeline.sh runs on another device with runs on the CPU: is each one more draw of the
training noise the CPU seeds show?

A run on another device (or precision) takes other float rounding, which acts on training like
another seed; so the tolerance is the CPU seeds' spread, not a fixed number. Per split, the CPU
runs' test EM gives a mean and SD; a run elsewhere is "inside" when it falls in the 95 % prediction
interval of one more run, mean +- t(0.975, n-1) * SD * sqrt(1 + 1/n). Exit 1 when any run is outside.

usage: python benchmarks/gpu_check/compare.py CPU_OUT OTHER_OUT [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

from scipy import stats

NAME = re.compile(r"^(test|dev)-(\w+)-(fp32|bf16|fp16)-(\d+)\.json$")


def runs(folder: Path) -> dict:
    out = {}
    for f in sorted(folder.glob("*.json")):
        m = NAME.match(f.name)
        if m:
            split, dev, prec, seed = m.groups()
            out[(split, dev, prec, int(seed))] = json.loads(f.read_text())["metrics"]["em"]
    return out


def answers(folder: Path, dev: str, prec: str, seed: int) -> list[str] | None:
    f = folder / f"test-pred-{dev}-{prec}-{seed}.jsonl"
    return [json.loads(line)["prediction"] for line in f.open()] if f.exists() else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cpu", type=Path)
    p.add_argument("other", type=Path)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    cpu, other = runs(a.cpu), runs(a.other)
    result, bad = {"splits": {}, "runs": []}, 0
    for split in ("dev", "test"):
        em = [v for (s, d, pr, _), v in cpu.items() if s == split and d == "cpu" and pr == "fp32"]
        if len(em) < 2:
            print(f"error: {a.cpu}: fewer than 2 CPU fp32 runs of {split}", file=sys.stderr)
            return 2
        n, mean, sd = len(em), statistics.mean(em), statistics.stdev(em)
        half = float(stats.t.ppf(0.975, n - 1)) * sd * math.sqrt(1 + 1 / n)
        result["splits"][split] = {"cpu_runs": n, "mean": mean, "sd": sd, "interval": [mean - half, mean + half]}
        print(f"{split}: CPU fp32, {n} seeds: EM {mean:.2f} (SD {sd:.2f}); one more run: [{mean - half:.2f}, {mean + half:.2f}]")
        for (s, d, pr, seed), v in sorted(other.items()):
            if s != split or d == "cpu":
                continue
            inside = bool(mean - half <= v <= mean + half)
            bad += not inside
            row = {"split": split, "device": d, "precision": pr, "seed": seed, "em": v, "inside": inside,
                   "cpu_same_seed": cpu.get((split, "cpu", "fp32", seed))}
            if split == "test":
                mine, ref = answers(a.other, d, pr, seed), answers(a.cpu, "cpu", "fp32", seed)
                if mine and ref:
                    row["answers_equal_to_cpu_same_seed"] = sum(x == y for x, y in zip(mine, ref)) / len(ref)
            result["runs"].append(row)
            same = row["cpu_same_seed"]
            extra = f", CPU seed {seed}: {same:.2f}" if same is not None else ""
            agree = row.get("answers_equal_to_cpu_same_seed")
            extra += f", {agree:.0%} of answers as CPU's" if agree is not None else ""
            print(f"  {d} {pr} seed {seed}: {v:.2f} {'inside' if inside else 'OUTSIDE'}{extra}")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
