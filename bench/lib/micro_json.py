#!/usr/bin/env python3
"""Turns package-benchmark's JMH export (a directory of .json files) into bench/results/micro-<stamp>.json.

    micro_json.py RAW_DIR RESULTS_DIR
Per benchmark: p50/p99 wall-clock µs per operation, p50 mallocs per operation, p50 CPU µs.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokendbench import write_result


def metric(element, label):
    m = element.get("secondaryMetrics", {}).get(label)
    return m.get("scorePercentiles", {}) if m else {}


def main():
    raw, results = Path(sys.argv[1]), sys.argv[2]
    rows = []
    for f in sorted(raw.rglob("*.json")):
        data = json.loads(f.read_text())
        for e in data if isinstance(data, list) else [data]:
            name = e["benchmark"].split(".", 3)[-1].split(".", 1)[-1].replace("_", " ")
            wall, mallocs, cpu = metric(e, "Time (wall clock)"), metric(e, "Malloc (total)"), metric(e, "Time (total CPU)")
            p50 = wall.get("50.0")
            rows.append({
                "name": name,
                "wall_p50_us": p50, "wall_p99_us": wall.get("99.0"), "cpu_p50_us": cpu.get("50.0"),
                "mallocs_p50": mallocs.get("50.0"), "samples": e.get("measurementIterations"),
                "time": (f"{p50 * 1000:.0f} ns" if p50 is not None and p50 < 10 else f"{p50:.1f} µs") if p50 is not None else "?",
                "mallocs": "?" if mallocs.get("50.0") is None else f"{mallocs['50.0']:.0f}",
            })
    if not rows:
        print("micro_json: no JMH results found", file=sys.stderr)
        return 1
    out = write_result("micro", {"benchmarks": rows}, results)
    print(f"micro results: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
