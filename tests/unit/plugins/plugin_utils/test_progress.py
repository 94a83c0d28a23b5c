# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The progress lines a person reads, and the one shell command of a poll."""

from __future__ import annotations

import json
import subprocess

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._progress import progress_record
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _progress


def record(done, total, seconds, estimated=False, phase="weights"):
    return progress_record(phase, done, total, 1000.0, 1000.0 + seconds, estimated)


def test_a_line_with_a_known_total_says_rate_elapsed_and_time_left():
    line = _progress.progress_line("spark1", record(12_400_000_000, 300_000_000_000, 130), "weights download")
    # 12.4 GB in 130 s is 95.4 MB/s; 287.6 GB more at that rate is 3015 s.
    assert line == "spark1 | weights download: 12.4 of 300.0 GB, 95.4 MB/s, 2m10s elapsed, ~50m15s left"


def test_an_estimated_total_is_marked_and_the_phase_labels_a_line_without_one():
    line = _progress.progress_line("spark3", record(3_100_000_000, 24_000_000_000, 3700, estimated=True,
                                                    phase="received"))
    assert line == "spark3 | received: 3.1 of ~24.0 GB, 837.8 kB/s, 1h01m elapsed, ~6h55m left"


def test_without_a_total_there_is_no_time_left_and_before_a_second_no_rate():
    assert _progress.progress_line("spark2", record(5_000_000, None, 10), "load") == (
        "spark2 | load: 5.0 MB, 500.0 kB/s, 10s elapsed")
    assert _progress.progress_line("spark2", record(0, 1000, 0.5), "load") == "spark2 | load: 0.0 of 1.0 kB, 0s elapsed"


def test_the_closing_line_says_what_moved_and_how_fast():
    assert _progress.done_line("spark1", "weights download", 300_000_000_000, 272) == (
        "spark1 | weights download: 300.0 GB in 4m32s, 1.1 GB/s")
    assert _progress.done_line("spark4", "image from 192.168.100.11", 52_400_000, 0.4) == (
        "spark4 | image from 192.168.100.11: 52.4 MB in 0s")


@pytest.mark.parametrize(("value", "seconds"), [(10, 10.0), ("2.5", 2.5), (0, 0.0)])
def test_a_poll_interval_is_seconds(value, seconds):
    assert _progress.poll_interval(value, "spark1", "model_weights_progress_interval") == seconds


@pytest.mark.parametrize("value", [-1, "often", None, True])
def test_a_poll_interval_that_is_not_seconds_is_refused_naming_host_and_variable(value):
    with pytest.raises(_progress.ProgressError, match=r"^spark2: engine_image_progress_interval is .*expected seconds"):
        _progress.poll_interval(value, "spark2", "engine_image_progress_interval")


def poll(command):
    return subprocess.run(command, shell=True, capture_output=True, text=True, check=True).stdout


def test_the_poll_reads_the_record_and_a_running_job_and_marks_the_step_followed(tmp_path):
    progress, job = tmp_path / "my dir" / "progress.json", tmp_path / "job"
    progress.parent.mkdir()
    progress.write_text(json.dumps(record(5, 10, 2)))
    job.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "j1.2"}))
    found, job_text, finished = _progress.split_poll(poll(_progress.poll_command(str(progress), str(job))))
    assert found == record(5, 10, 2) and not finished and job_text
    assert (tmp_path / "my dir" / "progress.json.seen").exists()


def test_the_poll_sees_a_finished_job_and_a_record_not_yet_written():
    result = {"changed": True, "bytes_received": 3}
    found, job_text, finished = _progress.split_poll("\n%s\n%s\n" % (_progress.POLL_SEPARATOR, json.dumps(result)))
    assert found is None and finished and json.loads(job_text) == result


def test_a_poll_without_a_job_file_is_not_finished(tmp_path):
    output = poll(_progress.poll_command(str(tmp_path / "none.json"), str(tmp_path / "no-job")))
    assert _progress.split_poll(output) == (None, "", False)


def test_a_phase_line_names_the_part_and_its_times():
    assert _progress.start_phase_line({"phase": "model load", "elapsed": 130.0, "since": 25.2}, "spark2") == (
        "spark2 | engine start: model load, 2m10s since the unit started, 25s in this part")
    assert _progress.start_phase_line({"phase": "startup", "elapsed": 12.0, "since": 12.0}, "spark1") == (
        "spark1 | engine start: startup, 12s since the unit started")
    assert _progress.start_phase_line({"phase": "waiting for the unit", "elapsed": None, "since": None}, "spark3") == (
        "spark3 | engine start: waiting for the unit")
    assert _progress.start_phase_line({"phase": "unknown", "elapsed": None, "since": None,
                                       "detail": "journalctl: not found"}, "spark4") == (
        "spark4 | engine start: unknown, journalctl: not found")


def test_a_probe_without_a_phase_is_refused_naming_the_host():
    with pytest.raises(_progress.ProgressError, match="^spark2: the probe reported no phase"):
        _progress.start_phase_line(None, "spark2")
