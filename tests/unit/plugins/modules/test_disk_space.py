# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from unit_support import module_result

from ansible_collections.dgxspark.cluster.plugins.modules import disk_space


def run(capsys, **params):
    return module_result(disk_space.main, capsys, params)[0]


def test_reports_free_space_without_a_minimum(tmp_path, capsys):
    result = run(capsys, path=str(tmp_path / "not" / "yet"))
    assert result["checked_path"] == str(tmp_path)
    assert result["changed"] is False and not result.get("failed")
    assert 0 <= result["free_bytes"] <= result["total_bytes"]


def test_fails_below_the_minimum_saying_what_was_found(tmp_path, capsys):
    result = run(capsys, path=str(tmp_path), min_free_gb=10.0**9)
    assert result["failed"] is True
    assert f"GB free on the filesystem holding {tmp_path} (measured at {tmp_path}); 1000000000.0 GB is required" in result["msg"]


def test_passes_at_a_minimum_it_meets(tmp_path, capsys):
    result = run(capsys, path=str(tmp_path), min_free_gb=0)
    assert not result.get("failed")
