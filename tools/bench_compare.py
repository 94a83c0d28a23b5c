# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compare two benchmark runs of playbooks/bench.yml.

    tools/bench-compare A.json B.json [--force] [--out PREFIX]

Writes PREFIX.md (a side-by-side table of every wave both runs measured,
B's aggregate against A's) and PREFIX.png (aggregate and per-request decode
against concurrency, A solid, B dashed); PREFIX defaults to
reports/bench/compare-<A>-vs-<B>. Runs of different profiles are refused
unless --force: their numbers do not measure the same thing.
"""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "plugins" / "module_utils" / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path, help="run A (.json)")
    parser.add_argument("second", type=Path, help="run B (.json)")
    parser.add_argument("--force", action="store_true", help="compare runs of different profiles")
    parser.add_argument("--out", type=Path, help="output path without extension")
    args = parser.parse_args(argv)
    bench, png = _load("_bench"), _load("_png")
    first, second = (json.loads(path.read_text()) for path in (args.first, args.second))
    try:
        text = bench.compare(first, second, force=args.force)
    except bench.BenchError as exc:
        print("bench-compare: %s" % exc, file=sys.stderr)
        return 2
    out = args.out or ROOT / "reports" / "bench" / ("compare-%s-vs-%s" % (first["meta"]["name"], second["meta"]["name"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text)
    series = (bench.plot_series(first["summary"], prefix="A ") +
              bench.plot_series(second["summary"], prefix="B ", dashed=True))
    out.with_suffix(".png").write_bytes(png.line_plot(series, "A %s VS B %s" % (first["meta"]["layout"], second["meta"]["layout"]),
                                                      "CONCURRENCY", "TOK/S"))
    print(text)
    print("Written: %s, %s" % (out.with_suffix(".md"), out.with_suffix(".png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
