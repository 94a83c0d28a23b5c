# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reports land where the user runs ansible-playbook: each role that writes one
on the controller turns its directory variable into an absolute path taken from
the working directory (not the inventory's, the playbook's or the installed
collection's), keeps an absolute one as it is, and expands ~."""

from __future__ import annotations

import os

import pytest

from unit_support import template_role_vars

# role: (the variable the user sets, its default, the absolute path the tasks use)
REPORT_DIRS = {
    "bench": ("bench_report_dir", "reports/bench", "bench_report_controller_dir"),
    "fabric_report": ("fabric_report_dir", "reports/fabric", "fabric_report_controller_dir"),
    "engine_service": ("engine_service_log_dir", "reports/engine", "engine_service_controller_log_dir"),
}


@pytest.mark.parametrize("role", sorted(REPORT_DIRS))
def test_a_report_directory_is_taken_from_where_ansible_playbook_runs(role, tmp_path, monkeypatch):
    variable, default, resolved = REPORT_DIRS[role]
    run_dir = tmp_path / "project"
    run_dir.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cases = [
        ({}, {"default": "{{ %s }}" % variable, "resolved": "{{ %s }}" % resolved}),
        ({variable: "/srv/reports/x"}, {"resolved": "{{ %s }}" % resolved}),
        ({variable: "out/x"}, {"resolved": "{{ %s }}" % resolved}),
        ({variable: "~/x"}, {"resolved": "{{ %s }}" % resolved}),
    ]
    # The inventory's and the playbook's directories must not matter.
    inventory = {"inventory_dir": str(tmp_path / "elsewhere" / "inventory"), "playbook_dir": str(tmp_path / "pb")}
    results = template_role_vars(role, [(dict(inventory, **variables), expr) for variables, expr in cases], cwd=run_dir)
    real_run_dir = os.path.realpath(run_dir)
    assert results[0] == {"default": default, "resolved": os.path.join(real_run_dir, default)}
    assert [r["resolved"] for r in results[1:]] == [
        "/srv/reports/x", os.path.join(real_run_dir, "out", "x"), str(tmp_path / "home" / "x")]


def test_an_empty_engine_log_dir_keeps_no_journals(tmp_path):
    (result,) = template_role_vars("engine_service", [({"engine_service_log_dir": ""},
                                                       {"resolved": "{{ engine_service_controller_log_dir }}"})],
                                   cwd=tmp_path)
    assert result == {"resolved": ""}
