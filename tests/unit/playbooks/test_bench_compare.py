# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/bench_compare.yml as a user of the installed collection runs it
(ansible-playbook dgxspark.cluster.bench_compare, an ansible.cfg of their own,
a localhost-only inventory), on the two report fixtures: no cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from unit_support import FIXTURES, REPO_ROOT

REPORTS = FIXTURES / "bench" / "reports"
LANE, FLEET = "20260101T100000Z-tp4x1.json", "20260101T110000Z-tp1x4.json"
NAME = "compare-20260101T100000Z-tp4x1-vs-20260101T110000Z-tp1x4"
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


@pytest.fixture
def project(tmp_path):
    """A directory of the user's, with an ansible.cfg that finds the collection
    and the two runs in reports/bench/ (plus an older lane run and its Markdown)."""
    (tmp_path / "ansible.cfg").write_text("[defaults]\ncollections_path = %s\n" % (REPO_ROOT / "collections"))
    reports = tmp_path / "reports" / "bench"
    reports.mkdir(parents=True)
    for name in (LANE, FLEET):
        shutil.copy(REPORTS / name, reports)
    shutil.copy(REPORTS / LANE, reports / "20260101T090000Z-tp4x1.json")
    (reports / "20260101T100000Z-tp4x1.md").write_text("# Benchmark\n")
    return tmp_path


def run(project, *args, inventory="localhost,"):
    env = dict(os.environ, ANSIBLE_CONFIG=str(project / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_LOCAL_TEMP=str(project / ".tmp"))
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", inventory, "dgxspark.cluster.bench_compare", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def recap(result):
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=(\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    return {"ok": int(match[1]), "changed": int(match[2]), "failed": int(match[3])}


def written(directory):
    return sorted(path.name for path in directory.iterdir() if path.name.startswith("compare-"))


def test_the_newest_run_of_each_layout_is_compared_in_the_working_directory(project):
    reports = project / "reports" / "bench"
    checked = run(project, "--check")
    assert recap(checked)["changed"] == 1 and written(reports) == [], checked.stdout
    first = run(project)
    assert recap(first) == {"ok": 2, "changed": 1, "failed": 0}, first.stdout
    assert written(reports) == [NAME + ".json", NAME + ".md", NAME + ".png"]
    assert "| cold | 2 | 0.300s | 0.300s | 10.00 tok/s | 10.00 tok/s | 11.00 | 16.50 | +50.0% | — | — |" in first.stdout
    assert "Written: %s.md" % (reports.resolve() / NAME) in first.stdout
    again = run(project)
    assert recap(again) == {"ok": 2, "changed": 0, "failed": 0}, again.stdout


def test_named_reports_of_different_profiles_need_force(project):
    # What -e bench_compare_reports=[A.json,B.json] passes: text, paths relative to the working directory.
    reports = project / "reports" / "bench"
    text = (reports / FLEET).read_text().replace('"profile": "field"', '"profile": "community"')
    (project / "community.json").write_text(text)
    named = "bench_compare_reports=[reports/bench/%s,community.json]" % LANE
    refused = run(project, "-e", named)
    assert recap(refused)["failed"] == 1
    assert "ran profile 'field' and" in refused.stdout and "-e bench_compare_force=true compares them anyway" in refused.stdout
    assert written(project) == []
    forced = run(project, "-e", named, "-e", "bench_compare_force=true")
    assert recap(forced)["changed"] == 1, forced.stdout
    # Beside B.
    assert written(project) == ["compare-20260101T100000Z-tp4x1-vs-20260101T110000Z-tp1x4.%s" % ext
                                for ext in ("json", "md", "png")]
    assert "Profiles differ" in (project / (NAME + ".md")).read_text()


def test_the_inventory_s_bench_report_dir_for_the_cluster_is_searched(project):
    elsewhere = project / "elsewhere"
    (project / "reports" / "bench").rename(elsewhere)
    (project / "hosts.yml").write_text(
        "dgxspark_cluster:\n  hosts:\n    spark1: {ansible_connection: local}\n"
        "  vars:\n    bench_report_dir: %s\n" % elsewhere)
    result = run(project, inventory=str(project / "hosts.yml"))
    assert recap(result)["changed"] == 1, result.stdout
    assert written(elsewhere) == [NAME + ".json", NAME + ".md", NAME + ".png"]


def test_a_directory_without_two_layouts_is_refused_with_the_fix(project):
    (project / "reports" / "bench" / FLEET).unlink()
    result = run(project)
    assert recap(result)["failed"] == 1
    assert "found tp4x1 (newest 20260101T100000Z-tp4x1.json)" in result.stdout
    assert "-e bench_compare_reports=[A.json,B.json]" in result.stdout
