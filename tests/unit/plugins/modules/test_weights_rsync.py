# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The weights_rsync module with the real rsync, between two local directories:
the output the role reads is rsync's own, the progress is counted beside it."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from unit_support import module_result

from ansible_collections.dgxspark.cluster.plugins.modules import weights_rsync

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")


def run(capsys, **params):
    return module_result(weights_rsync.main, capsys, params)[0]


@pytest.fixture
def source(tmp_path):
    directory = tmp_path / "source"
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(os.urandom(3_000_000))
    (directory / "config.json").write_bytes(b"{}\n")
    return directory


def argv(source, dest):
    return ["rsync", "--archive", "--partial", "--stats", "--itemize-changes", str(source) + "/", str(dest) + "/"]


def test_with_a_progress_file_the_bytes_are_counted_and_the_output_is_rsyncs(capsys, source, tmp_path):
    dest, progress = tmp_path / "dest", tmp_path / "progress.json"
    plain = run(capsys, argv=argv(source, tmp_path / "plain"))
    result = run(capsys, argv=argv(source, dest), progress_file=str(progress), expected_bytes=3_000_003)
    assert not result.get("failed"), result.get("msg")
    assert result["cmd"][1] == "--info=progress2" and result["transferred_bytes"] == 3_000_003
    record = json.loads(progress.read_text())
    assert (record["phase"], record["done"], record["total"]) == ("weights sync", 3_000_003, 3_000_003)
    # The itemized changes and the statistics read as without the progress.
    changes = [line for line in result["stdout"].splitlines() if line.startswith(">f")]
    assert sorted(changes) == sorted(line for line in plain["stdout"].splitlines() if line.startswith(">f"))
    assert "Number of regular files transferred: 2" in result["stdout"].splitlines()
    assert "\r" not in result["stdout"] and "100%" not in result["stdout"]
    assert (dest / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()


def test_without_a_progress_file_it_runs_the_command_as_given(capsys, source, tmp_path):
    result = run(capsys, argv=argv(source, tmp_path / "dest"))
    assert result["cmd"][1] == "--archive" and result["transferred_bytes"] == 0 and result["rc"] == 0


def test_a_failing_rsync_fails_with_its_error(capsys, tmp_path):
    result = run(capsys, argv=["rsync", "--archive", str(tmp_path / "absent") + "/", str(tmp_path / "dest") + "/"],
                 progress_file=str(tmp_path / "progress.json"))
    assert result["failed"] is True and result["rc"] != 0
    assert result["msg"].startswith("rsync exited %d: " % result["rc"]) and "absent" in result["msg"]


def test_a_pull_nobody_follows_any_more_is_stopped(capsys, source, tmp_path, monkeypatch):
    monkeypatch.setattr(weights_rsync, "abandon_after", lambda interval: -1)
    result = run(capsys, argv=argv(source, tmp_path / "dest"), progress_file=str(tmp_path / "progress.json"))
    assert result["failed"] is True and "no controller has followed this step" in result["msg"]
