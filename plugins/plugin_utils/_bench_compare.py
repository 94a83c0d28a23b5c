# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Compare two benchmark runs of playbooks/bench.yml (one per layout, say the
lane against the fleet): which two reports, the side-by-side table of every
wave both measured, B's aggregate against A's, and one plot of both.

Used by the bench_compare action (playbooks/bench_compare.yml) and by
tools/bench-compare. Standard library only (and the collection's own
_bench and _png), so it runs without Ansible and is unit-tested so.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.dgxspark.cluster.plugins.module_utils._bench import (
    BenchError,
    fmt_number,
    fmt_percent,
    fmt_rate,
    fmt_seconds,
    markdown_table,
    plot_series,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils._file_set import write_atomically
from ansible_collections.dgxspark.cluster.plugins.module_utils._png import line_plot

# What bench_report names a run: <time>-<layout>.json (a comparison's own
# compare-*.json never matches).
REPORT_NAME = re.compile(r"^(?P<time>\d{8}T\d{6}Z)-(?P<layout>tp\d+x\d+)\.json$")
# The numbers of a wave the comparison puts side by side.
WAVE_FIELDS = ("ttft_p50", "decode_p50", "aggregate_tps", "prefix_cache_hit_rate")


class BenchCompareError(BenchError):
    """Two reports cannot be chosen or compared; the message says why and what to do."""


def report_paths(value):
    """The reports a user named: a list, or the text of one as
    C(-e bench_compare_reports=[a.json,b.json]) gives it (commas, optional brackets)."""
    if isinstance(value, str):
        value = [part.strip().strip("'\"") for part in value.strip().strip("[]").split(",")]
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(isinstance(p, str) and p for p in value):
        raise BenchCompareError("expected two report files (A, then B), for example "
                                "bench_compare_reports=[A.json,B.json]; got %r" % (value,))
    return list(value)


def newest_per_layout(names):
    """{layout: the newest report name of that layout} among file names."""
    newest = {}
    for name in names:
        match = REPORT_NAME.match(name)
        if match and (match["layout"] not in newest or name > newest[match["layout"]]):
            newest[match["layout"]] = name
    return newest


def pick_reports(report_dir, names):
    """The newest report of each of the two layouts in report_dir, the older one
    first (A), as paths; refused unless exactly two layouts are there."""
    newest = newest_per_layout(names)
    if len(newest) != 2:
        found = ", ".join("%s (newest %s)" % (layout, name) for layout, name in sorted(newest.items())) or "none"
        raise BenchCompareError(
            "%s: the newest report of each layout is compared when exactly two layouts are there; found %s. "
            "Run playbooks/bench.yml once per layout, or name the two reports: "
            "-e bench_compare_reports=[A.json,B.json]" % (report_dir, found))
    first, second = sorted(newest.values())
    return [os.path.join(report_dir, first), os.path.join(report_dir, second)]


def load_report(path):
    """A report bench_report wrote, checked for what the comparison reads."""
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except OSError as exc:
        raise BenchCompareError("cannot read the report %s: %s" % (path, exc.strerror or exc)) from exc
    except ValueError as exc:
        raise BenchCompareError("%s is not a report's JSON: %s" % (path, exc)) from exc
    missing = ["%s.%s" % (key, inner) for key, inner in (("meta", "name"), ("meta", "layout"), ("config", "profile"), ("summary", "waves"))
               if not isinstance(report, dict) or not isinstance(report.get(key), dict) or inner not in report[key]]
    if missing:
        raise BenchCompareError("%s is not a report of playbooks/bench.yml (no %s); compare the .json that "
                                "playbooks/bench.yml wrote" % (path, ", ".join(missing)))
    return report


def comparison(first, second, force=False, force_hint="-e bench_compare_force=true"):
    """The comparison as data: each run's name, layout and profile, and one row per
    wave (kind, label, concurrency) that either measured, with both runs' numbers and
    B's aggregate against A's (a fraction). Runs of different profiles are refused
    unless forced: their numbers do not measure the same thing."""
    runs = [{"name": report["meta"]["name"], "layout": report["meta"]["layout"],
             "profile": report["config"]["profile"], "date": report["meta"].get("date")} for report in (first, second)]
    if runs[0]["profile"] != runs[1]["profile"] and not force:
        raise BenchCompareError("%s ran profile %r and %s profile %r: their numbers are not comparable "
                                "(%s compares them anyway)" % (runs[0]["name"], runs[0]["profile"], runs[1]["name"],
                                                               runs[1]["profile"], force_hint))

    def keyed(report):
        return {(w["kind"], w["label"], w["concurrency"]): w for w in report["summary"]["waves"] if w["kind"] != "quality"}

    waves_a, waves_b = keyed(first), keyed(second)
    rows = []
    for key in sorted(set(waves_a) | set(waves_b), key=lambda k: (k[0], k[2], k[1])):
        a, b = waves_a.get(key), waves_b.get(key)
        change = None
        if a and b and a["aggregate_tps"] and b["aggregate_tps"] is not None:
            change = b["aggregate_tps"] / a["aggregate_tps"] - 1
        rows.append({"kind": key[0], "label": key[1], "concurrency": key[2],
                     "a": {field: a[field] for field in WAVE_FIELDS} if a else None,
                     "b": {field: b[field] for field in WAVE_FIELDS} if b else None,
                     "aggregate_change": change})
    return {"name": "compare-%s-vs-%s" % (runs[0]["name"], runs[1]["name"]), "a": runs[0], "b": runs[1],
            "profiles_differ": runs[0]["profile"] != runs[1]["profile"], "waves": rows}


def comparison_markdown(compared):
    """The side-by-side table of a comparison()."""
    header = ["Wave", "C", "TTFT p50 A", "TTFT p50 B", "Decode p50 A", "Decode p50 B", "Aggregate A", "Aggregate B",
              "Aggregate B vs A", "Prefix-cache hits A", "Prefix-cache hits B"]
    rows = []
    for row in compared["waves"]:
        def both(field, fmt, row=row):
            return [fmt(row[run][field]) if row[run] else "—" for run in ("a", "b")]

        change = "—" if row["aggregate_change"] is None else "%+.1f%%" % (100 * row["aggregate_change"])
        rows.append([row["label"], row["concurrency"]] + both("ttft_p50", fmt_seconds) + both("decode_p50", fmt_rate)
                    + both("aggregate_tps", fmt_number) + [change] + both("prefix_cache_hit_rate", fmt_percent))
    lines = ["# Benchmark comparison", ""]
    for run in ("a", "b"):
        lines += ["%s: %s (%s, %s)" % (run.upper(), compared[run]["name"], compared[run]["layout"], compared[run]["profile"]), ""]
    if compared["profiles_differ"]:
        lines += ["Profiles differ (compared anyway).", ""]
    return "\n".join(lines + [markdown_table(header, rows), ""])


def comparison_png(first, second):
    """Aggregate and per-request decode against concurrency, A solid, B dashed."""
    series = plot_series(first["summary"], prefix="A ") + plot_series(second["summary"], prefix="B ", dashed=True)
    return line_plot(series, "A %s VS B %s" % (first["meta"]["layout"], second["meta"]["layout"]), "CONCURRENCY", "TOK/S")


def controller_path(path):
    """An absolute path on the controller: a relative one is taken from the directory
    ansible-playbook runs in (this process's). The report actions resolve their paths so."""
    return os.path.realpath(os.path.expanduser(path))


def _differs(path, data):
    try:
        with open(path, "rb") as handle:
            return handle.read() != data
    except FileNotFoundError:
        return True


def write_report_files(dest, contents, check_mode=False):
    """Write each file of O(contents) ({path under dest: bytes}) whose content differs,
    atomically, mode 0644, creating O(dest); in check mode nothing. True when a file
    changed (or would). A report written again with the same data changes nothing."""
    pending = {path: data for path, data in contents.items() if _differs(path, data)}
    if pending and not check_mode:
        os.makedirs(dest, exist_ok=True)
        for path, data in pending.items():
            write_atomically(path, data, 0o644)
    return bool(pending)


def write_comparison(first_path, second_path, dest=None, force=False, check_mode=False,
                     force_hint="-e bench_compare_force=true"):
    """Compare two report files and write <dest>/compare-<A>-vs-<B>.md, .json and .png
    (dest defaults to B's directory). Files whose content is already that are left
    alone; in check mode nothing is written. Returns the paths, whether a file
    changed (or would), the comparison and its Markdown."""
    first, second = load_report(first_path), load_report(second_path)
    compared = comparison(first, second, force=force, force_hint=force_hint)
    text = comparison_markdown(compared)
    dest = dest or os.path.dirname(os.path.abspath(second_path))
    prefix = os.path.join(dest, compared["name"])
    paths = {"markdown": prefix + ".md", "json": prefix + ".json", "png": prefix + ".png"}
    contents = {paths["markdown"]: text.encode(),
                paths["json"]: (json.dumps(dict(compared, reports=[first_path, second_path]), indent=1,
                                           sort_keys=True) + "\n").encode(),
                paths["png"]: comparison_png(first, second)}
    return {"paths": paths, "changed": write_report_files(dest, contents, check_mode),
            "comparison": compared, "markdown": text}
