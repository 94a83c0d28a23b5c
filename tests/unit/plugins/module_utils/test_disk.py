# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._disk import disk_space, nearest_existing


def test_existing_path_is_measured_itself(tmp_path):
    assert nearest_existing(str(tmp_path)) == str(tmp_path)


def test_missing_path_is_measured_at_its_deepest_existing_ancestor(tmp_path):
    (tmp_path / "srv").mkdir()
    assert nearest_existing(str(tmp_path / "srv" / "models" / "v4")) == str(tmp_path / "srv")


def test_relative_path_is_refused():
    with pytest.raises(ValueError, match="absolute path"):
        nearest_existing("srv/models")


def test_free_and_total_bytes_come_from_statvfs(tmp_path):
    class Stat:
        f_bavail, f_blocks, f_frsize = 3, 10, 4096

    seen = []

    def fake_statvfs(path):
        seen.append(path)
        return Stat()

    result = disk_space(str(tmp_path / "missing"), statvfs=fake_statvfs)
    assert seen == [str(tmp_path)]
    assert result == {
        "path": str(tmp_path / "missing"),
        "checked_path": str(tmp_path),
        "free_bytes": 3 * 4096,
        "total_bytes": 10 * 4096,
    }


def test_real_filesystem_reports_plausible_numbers(tmp_path):
    result = disk_space(str(tmp_path))
    st = os.statvfs(str(tmp_path))
    assert result["total_bytes"] == st.f_blocks * st.f_frsize
    assert 0 <= result["free_bytes"] <= result["total_bytes"]
