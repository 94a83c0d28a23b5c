# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Comparing two benchmark runs (plugin_utils/_bench_compare.py), and
tools/bench-compare, its command line in the checkout.

The fixtures are two reports of the field profile, a tp4x1 run and a tp1x4 run
whose aggregate rates are 1.5 times the first's (cut to what the comparison
reads: meta, config and the summary)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess

import pytest

from unit_support import FIXTURES, REPO_ROOT

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._bench_compare import (
    BenchCompareError,
    comparison,
    comparison_markdown,
    load_report,
    newest_per_layout,
    pick_reports,
    report_paths,
    write_comparison,
)

REPORTS = FIXTURES / "bench" / "reports"
LANE, FLEET = REPORTS / "20260101T100000Z-tp4x1.json", REPORTS / "20260101T110000Z-tp1x4.json"
NAME = "compare-20260101T100000Z-tp4x1-vs-20260101T110000Z-tp1x4"


def report(path, profile=None):
    data = json.loads(path.read_text())
    if profile:
        data["config"]["profile"] = profile
    return data


def test_compare_refuses_different_profiles_unless_forced():
    with pytest.raises(BenchCompareError, match=r"not comparable \(-e bench_compare_force=true compares them anyway\)"):
        comparison(report(LANE), report(FLEET, "community"))
    forced = comparison(report(LANE), report(FLEET, "community"), force=True)
    assert forced["profiles_differ"]
    assert "Profiles differ" in comparison_markdown(forced)


def test_compare_puts_both_runs_side_by_side():
    compared = comparison(report(LANE), report(FLEET))
    assert compared["name"] == NAME
    assert (compared["a"]["layout"], compared["b"]["layout"]) == ("tp4x1", "tp1x4")
    cold = [w for w in compared["waves"] if w["kind"] == "cold"]
    assert [(w["concurrency"], w["a"]["aggregate_tps"], w["b"]["aggregate_tps"]) for w in cold] == [(2, 11.0, 16.5)]
    assert cold[0]["aggregate_change"] == pytest.approx(0.5)
    text = comparison_markdown(compared)
    assert text.startswith("# Benchmark comparison\n\nA: 20260101T100000Z-tp4x1 (tp4x1, field)")
    assert "| cold | 2 | 0.300s | 0.300s | 10.00 tok/s | 10.00 tok/s | 11.00 | 16.50 | +50.0% | — | — |" in text
    assert "| ctx 1000 | 1 | " in text and text.split("| ctx 1000 | 1 | ")[1].split("\n")[0].endswith("| 50.00% | 50.00% |")
    # The quality gate is no number to compare.
    assert "quality" not in text and not [w for w in compared["waves"] if w["kind"] == "quality"]


def test_a_wave_only_one_run_measured_has_a_dash_for_the_other():
    second = report(FLEET)
    second["summary"]["waves"] = [w for w in second["summary"]["waves"] if w["kind"] != "cold"]
    compared = comparison(report(LANE), second)
    (cold,) = [w for w in compared["waves"] if w["kind"] == "cold"]
    assert cold["b"] is None and cold["aggregate_change"] is None
    assert "| cold | 2 | 0.300s | — | 10.00 tok/s | — | 11.00 | — | — | — | — |" in comparison_markdown(compared)


def test_the_newest_run_of_each_layout_is_picked_older_first():
    names = ["20260101T090000Z-tp4x1.json", "20260101T100000Z-tp4x1.json", "20260101T080000Z-tp1x4.json",
             "20260101T110000Z-tp1x4.json", "20260101T100000Z-tp4x1.md", "%s.json" % NAME, "notes.json"]
    assert newest_per_layout(names) == {"tp4x1": "20260101T100000Z-tp4x1.json", "tp1x4": "20260101T110000Z-tp1x4.json"}
    assert pick_reports("/r", names) == ["/r/20260101T100000Z-tp4x1.json", "/r/20260101T110000Z-tp1x4.json"]
    # The fleet ran first this time: it is A.
    names = ["20260102T000000Z-tp4x1.json", "20260101T110000Z-tp1x4.json"]
    assert pick_reports("/r", names) == ["/r/20260101T110000Z-tp1x4.json", "/r/20260102T000000Z-tp4x1.json"]


@pytest.mark.parametrize(("names", "found"), [
    ([], "found none"),
    (["20260101T100000Z-tp4x1.json", "20260101T110000Z-tp4x1.json"], "found tp4x1 (newest 20260101T110000Z-tp4x1.json)."),
    (["20260101T100000Z-tp4x1.json", "20260101T110000Z-tp1x4.json", "20260101T120000Z-tp2x2.json"],
     "found tp1x4 (newest 20260101T110000Z-tp1x4.json), tp2x2 (newest 20260101T120000Z-tp2x2.json), tp4x1"),
])
def test_picking_needs_exactly_two_layouts_and_says_what_it_found(names, found):
    with pytest.raises(BenchCompareError) as refused:
        pick_reports("/r", names)
    assert str(refused.value).startswith("/r: ")
    assert found in str(refused.value) and "-e bench_compare_reports=[A.json,B.json]" in str(refused.value)


@pytest.mark.parametrize(("value", "paths"), [
    (["a.json", "b.json"], ["a.json", "b.json"]),
    ("[a.json,b.json]", ["a.json", "b.json"]),
    ("['x/a.json', 'y/b.json']", ["x/a.json", "y/b.json"]),
    ("a.json, b.json", ["a.json", "b.json"]),
])
def test_the_two_reports_may_be_a_list_or_its_text(value, paths):
    assert report_paths(value) == paths


@pytest.mark.parametrize("value", [["a.json"], "[a.json]", ["a", "b", "c"], "[a.json,]", {"a": 1}, [1, 2]])
def test_anything_but_two_reports_is_refused(value):
    with pytest.raises(BenchCompareError, match="expected two report files"):
        report_paths(value)


def test_a_file_that_is_no_report_is_named(tmp_path):
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "other.json").write_text('{"meta": {"name": "x"}}')
    with pytest.raises(BenchCompareError, match="broken.json is not a report's JSON"):
        load_report(str(tmp_path / "broken.json"))
    with pytest.raises(BenchCompareError, match=r"other.json is not a report of playbooks/bench.yml "
                                                r"\(no meta.layout, config.profile, summary.waves\)"):
        load_report(str(tmp_path / "other.json"))
    with pytest.raises(BenchCompareError, match="cannot read the report .*missing.json"):
        load_report(str(tmp_path / "missing.json"))


def test_the_comparison_is_written_beside_b_once(tmp_path):
    for path in (LANE, FLEET):
        shutil.copy(path, tmp_path)
    first, second = (str(tmp_path / path.name) for path in (LANE, FLEET))
    checked = write_comparison(first, second, check_mode=True)
    assert checked["changed"] and sorted(os.listdir(tmp_path)) == sorted([LANE.name, FLEET.name])
    written = write_comparison(first, second)
    assert written["changed"]
    assert written["paths"] == {kind: str(tmp_path / (NAME + ext)) for kind, ext in
                                (("markdown", ".md"), ("json", ".json"), ("png", ".png"))}
    assert (tmp_path / (NAME + ".md")).read_text() == written["markdown"]
    data = json.loads((tmp_path / (NAME + ".json")).read_text())
    assert data["reports"] == [first, second] and data["waves"] == written["comparison"]["waves"]
    assert (tmp_path / (NAME + ".png")).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    before = {path: path.stat().st_mtime_ns for path in tmp_path.iterdir()}
    again = write_comparison(first, second)
    assert not again["changed"]
    assert {path: path.stat().st_mtime_ns for path in tmp_path.iterdir()} == before
    # A report changed since: the comparison is written again.
    changed = copy.deepcopy(report(FLEET))
    changed["summary"]["waves"][0]["aggregate_tps"] = 99.0
    (tmp_path / FLEET.name).write_text(json.dumps(changed))
    assert write_comparison(first, second)["changed"]
    assert "| 99.00 |" in (tmp_path / (NAME + ".md")).read_text()


def test_bench_compare_tool_writes_markdown_json_and_png(tmp_path):
    shutil.copy(LANE, tmp_path / "a.json")
    (tmp_path / "b.json").write_text(json.dumps(report(FLEET, "community")))
    tool = str(REPO_ROOT / "tools" / "bench-compare")
    out = tmp_path / "out"
    refused = subprocess.run([tool, str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(out)],
                             capture_output=True, text=True, check=False)
    assert refused.returncode == 2 and "(--force compares them anyway)" in refused.stderr
    assert not out.exists()
    forced = subprocess.run([tool, str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--force", "--out", str(out)],
                            capture_output=True, text=True, check=False)
    assert forced.returncode == 0, forced.stderr
    assert (out / (NAME + ".md")).read_text().startswith("# Benchmark comparison")
    assert json.loads((out / (NAME + ".json")).read_text())["profiles_differ"] is True
    assert (out / (NAME + ".png")).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # Without --out the comparison goes beside B.
    assert subprocess.run([tool, str(LANE), str(tmp_path / "a.json")], capture_output=True, check=False).returncode == 0
    assert (tmp_path / "compare-20260101T100000Z-tp4x1-vs-20260101T100000Z-tp4x1.md").is_file()
