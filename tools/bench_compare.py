# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compare two benchmark runs of playbooks/bench.yml.

    tools/bench-compare A.json B.json [--force] [--out DIR]

The checkout's command line for what playbooks/bench_compare.yml does (the
same code, plugins/plugin_utils/_bench_compare.py): writes
compare-<A>-vs-<B>.md (a side-by-side table of every wave both runs
measured, B's aggregate against A's), .json (the same as data) and .png
(aggregate and per-request decode against concurrency, A solid, B dashed)
in DIR, by default B's directory. Runs of different profiles are refused
unless --force: their numbers do not measure the same thing.
"""

import argparse
import sys
from pathlib import Path

# The checkout is the collection; collections/ links it as
# ansible_collections/dgxspark/cluster, so its code imports as installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._bench_compare import (
    BenchCompareError,
    write_comparison,
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path, help="run A (.json)")
    parser.add_argument("second", type=Path, help="run B (.json)")
    parser.add_argument("--force", action="store_true", help="compare runs of different profiles")
    parser.add_argument("--out", type=Path, help="directory for the comparison (default: B's directory)")
    args = parser.parse_args(argv)
    try:
        written = write_comparison(str(args.first), str(args.second), dest=str(args.out) if args.out else None,
                                   force=args.force, force_hint="--force")
    except BenchCompareError as exc:
        print("bench-compare: %s" % exc, file=sys.stderr)
        return 2
    print(written["markdown"])
    print("Written: %s" % ", ".join(written["paths"].values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
