# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The progress file a long module keeps on the node: written atomically, at
most every few seconds, and a step nobody follows any more stops."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import _progress


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def test_the_record_is_written_whole_and_read_back(tmp_path):
    path = str(tmp_path / "progress.json")
    clock = Clock()
    progress = _progress.ProgressFile(path, "weights", total=300, every=5, clock=clock)
    clock.now += 2
    progress.update(done=120)
    record = _progress.parse_progress((tmp_path / "progress.json").read_text())
    assert record == {"version": 1, "phase": "weights", "done": 120, "total": 300, "estimated": False,
                      "started": 1000.0, "updated": 1002.0}
    # Replaced, never appended to, and no temporary file left beside it.
    assert sorted(os.listdir(tmp_path)) == ["progress.json"]


def test_writes_are_throttled_until_forced(tmp_path):
    path = tmp_path / "progress.json"
    clock = Clock()
    progress = _progress.ProgressFile(str(path), "received", every=5, clock=clock)
    progress.update(advance=10)
    clock.now += 1
    progress.update(advance=10)
    assert json.loads(path.read_text())["done"] == 10
    progress.update(advance=5, force=True)
    assert json.loads(path.read_text())["done"] == 25
    clock.now += 5
    progress.update(advance=1)
    assert json.loads(path.read_text())["done"] == 26


def test_without_a_path_it_only_counts(tmp_path):
    progress = _progress.ProgressFile(None, "weights")
    progress.update(done=7)
    progress.update(advance=3, force=True)
    assert progress.done == 10 and os.listdir(tmp_path) == []


def test_a_step_no_controller_polls_any_more_stops(tmp_path):
    path = tmp_path / "progress.json"
    clock = Clock()
    progress = _progress.ProgressFile(str(path), "weights", every=1, abandon_after=120, clock=clock)
    clock.now += 100
    progress.update(done=1)
    # The action touched the .seen file at a poll: the step is followed.
    seen = tmp_path / ("progress.json" + _progress.SEEN_SUFFIX)
    seen.touch()
    os.utime(seen, (clock.now, clock.now))
    clock.now += 100
    progress.update(done=2)
    clock.now += 50
    with pytest.raises(_progress.ProgressAbandoned, match=r"no controller has followed this step for 150 s"):
        progress.update(done=3)


def test_without_a_poll_yet_the_start_counts(tmp_path):
    clock = Clock()
    progress = _progress.ProgressFile(str(tmp_path / "p.json"), "weights", abandon_after=120, clock=clock)
    clock.now += 121
    with pytest.raises(_progress.ProgressAbandoned):
        progress.update(done=1)


@pytest.mark.parametrize("text", [
    "", "   ", "{not json", "[]", '{"version": 2, "done": 1, "started": 1, "updated": 2}',
    '{"version": 1, "done": "1", "started": 1, "updated": 2}',
    '{"version": 1, "done": 1, "started": 1, "updated": 2, "total": "many"}',
    '{"version": 1, "done": true, "started": 1, "updated": 2}',
])
def test_what_is_not_a_record_reads_as_none(text):
    assert _progress.parse_progress(text) is None


def test_the_intervals_follow_the_poll():
    assert _progress.writer_interval(10) == 5.0 and _progress.writer_interval(1) == 1.0
    assert _progress.abandon_after(10) == 120.0 and _progress.abandon_after(30) == 300.0


def test_the_last_record_is_written_even_when_no_poll_came_for_long(tmp_path):
    path = tmp_path / "progress.json"
    clock = Clock()
    progress = _progress.ProgressFile(str(path), "weights", every=60, abandon_after=120, clock=clock)
    progress.update(done=1)
    clock.now += 500
    progress.finish(done=9)
    assert json.loads(path.read_text())["done"] == 9
