# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The actions of the long modules (hf_snapshot, engine_image, weights_rsync): the module
runs as an async job, each poll is one shell command (here a local shell
standing in for SSH) that reads the progress file, a line is displayed per
poll while the job still runs, and the module's result comes back as a
synchronous run returns it. The job stands in for the async wrapper: it
writes its job file and its progress as the wrapper and the module do."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionSkip

from ansible_collections.dgxspark.cluster.plugins.action import engine_image as engine_image_action
from ansible_collections.dgxspark.cluster.plugins.action import hf_snapshot as hf_snapshot_action
from ansible_collections.dgxspark.cluster.plugins.action import weights_rsync as weights_rsync_action
from ansible_collections.dgxspark.cluster.plugins.module_utils._progress import ProgressFile
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _progress_action


class Shell:
    def __init__(self):
        self.tmpdir = None

    def join_path(self, *parts):
        return os.path.join(*parts)


class Job:
    """The async job of one module run: its progress advances only once the
    action displayed the line of the record before, so every line can only
    have been displayed while the job ran."""

    def __init__(self, tmp_path, steps, result):
        self.tmp_path, self.steps, self.result = tmp_path, steps, result
        self.job_path = str(tmp_path / "async" / "j1.42")
        self.thread = None
        self.module_args = None
        self.lines_when_done = None

    def start(self, module_args, lines):
        self.module_args = module_args
        os.makedirs(os.path.dirname(self.job_path))
        with open(self.job_path, "w", encoding="utf-8") as handle:
            json.dump({"started": True, "finished": False, "ansible_job_id": "j1.42"}, handle)
        self.thread = threading.Thread(target=self._run, args=(lines,), daemon=True)
        self.thread.start()
        return {"started": True, "finished": False, "ansible_job_id": "j1.42", "results_file": self.job_path,
                "changed": True}

    def _run(self, lines):
        clock = iter(range(1000, 2000, 10))
        progress = ProgressFile(self.module_args["progress_file"], "weights", total=self.steps[-1],
                                clock=lambda: float(next(clock)))
        for index, done in enumerate(self.steps):
            progress.update(done=done, force=True)
            deadline = time.monotonic() + 10
            # A poll that finds the same record again shows the same line again.
            while len(dict.fromkeys(lines)) <= index:
                assert time.monotonic() < deadline, "the action displayed no line of record %d" % index
                time.sleep(0.01)
        self.lines_when_done = list(dict.fromkeys(lines))
        temp = self.job_path + ".tmp"
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump(self.result, handle)
        os.rename(temp, self.job_path)


def action(module, args, tmp_path, job=None, check_mode=False, async_val=0, name="hf_snapshot"):
    task = SimpleNamespace(args=args, async_val=async_val, check_mode=check_mode, action="dgxspark.cluster." + name,
                           environment=[])
    connection = SimpleNamespace(_shell=Shell(), has_native_async=False)
    plugin = module.ActionModule(task, connection, None, None, None)
    calls = {"modules": [], "commands": [], "lines": [], "removed": []}

    def execute_module(module_args=None, task_vars=None, wrap_async=False):
        calls["modules"].append({"args": dict(module_args or task.args), "wrap_async": wrap_async,
                                 "async_val": task.async_val})
        if wrap_async and not task.async_val:
            raise AssertionError("the async wrapper reads its time limit from the task")
        if wrap_async and job is not None:
            return job.start(module_args, calls["lines"])
        return {"changed": False, "ran": "synchronously"}

    def low_level(command, sudoable=True, executable=None, in_data=None):
        calls["commands"].append(command)
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    def make_tmp_path(remote_user=None):
        path = tmp_path / "ansible-tmp-1-2"
        path.mkdir()
        connection._shell.tmpdir = str(path)
        return str(path)

    plugin._execute_module = execute_module
    plugin._low_level_execute_command = low_level

    def remove_tmp_path(path, force=False):
        calls["removed"].append(path)

    plugin._make_tmp_path = make_tmp_path
    plugin._remove_tmp_path = remove_tmp_path
    # Polls a little apart, not progress_interval: the test takes no longer than its job.
    plugin.sleep = lambda seconds: time.sleep(0.05)
    return plugin, calls


@pytest.fixture
def shown(monkeypatch):
    lines = []
    monkeypatch.setattr(_progress_action.display, "display", lambda message, *a, **k: lines.append(message))
    return lines


def test_progress_lines_show_while_the_download_runs_and_the_result_is_the_modules(tmp_path, shown):
    module_result = {"changed": True, "commit": "0" * 40, "bytes_received": 3_000_000_000, "seconds": 30.0,
                     "fetched": [{"path": "model.safetensors", "bytes_received": 3_000_000_000, "resumed_from": 0}],
                     "invocation": {"module_args": {"token": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"}}}
    job = Job(tmp_path, [0, 1_000_000_000, 3_000_000_000], module_result)
    args = {"path": "/srv/models/m", "repo_id": "org/m", "token": "secret", "progress_interval": 10}
    plugin, calls = action(hf_snapshot_action, args, tmp_path, job=job)
    calls["lines"] = shown
    result = plugin.run(task_vars={"inventory_hostname": "spark1"})
    job.thread.join(5)
    # The lines of every record were displayed before the job wrote its result.
    assert job.lines_when_done == [
        "spark1 | weights download: 0.0 of 3.0 GB, 10s elapsed",
        "spark1 | weights download: 1.0 of 3.0 GB, 50.0 MB/s, 20s elapsed, ~40s left",
        "spark1 | weights download: 3.0 of 3.0 GB, 100.0 MB/s, 30s elapsed",
    ]
    assert shown[-1] == "spark1 | weights download: 3.0 GB in 30s, 100.0 MB/s"
    # The module's result, as a synchronous run parses it: nothing of the job added.
    assert result == dict(module_result, _ansible_parsed=True)
    # The module ran once, through the wrapper, with the progress file in the job's temporary directory.
    (started,) = calls["modules"]
    assert started["wrap_async"] and started["async_val"] == _progress_action.JOB_LIMIT_SECONDS
    assert started["args"] == dict(args, progress_file=str(tmp_path / "ansible-tmp-1-2" / "progress.json"))
    assert plugin._task.async_val == 0
    # Each poll was one shell command, the same each time; the last command removed the job file.
    assert calls["commands"][-1] == "rm -f %s" % job.job_path and not os.path.exists(job.job_path)
    assert len(set(calls["commands"][:-1])) == 1 and len(calls["commands"]) >= 4
    # The wrapper removes the job's directory, the progress file with it.
    assert calls["removed"] == []


def test_a_failed_load_comes_back_as_the_module_failed_with_no_closing_line(tmp_path, shown):
    module_result = {"failed": True, "msg": "loading the image streamed from 192.168.100.11:7070 failed", "rc": 1,
                     "stdout": "", "stderr": "unexpected EOF\n", "received_bytes": 1000, "seconds": 2.0}
    job = Job(tmp_path, [0, 1000], module_result)
    args = {"ref": "r", "state": "received", "source_address": "192.168.100.11", "expected_id": "sha256:1",
            "expected_bytes": 5000}
    plugin, calls = action(engine_image_action, args, tmp_path, job=job, name="engine_image")
    calls["lines"] = shown
    result = plugin.run(task_vars={"inventory_hostname": "spark3"})
    job.thread.join(5)
    assert job.lines_when_done == ["spark3 | image from 192.168.100.11: 0.0 of 1.0 kB, 10s elapsed",
                                   "spark3 | image from 192.168.100.11: 1.0 of 1.0 kB, 50 B/s, 20s elapsed"]
    # _parse_returned_data, as for a synchronous run, adds the error's summary and the lines.
    assert result.pop("exception").event.msg == module_result["msg"]
    assert result == dict(module_result, _ansible_parsed=True, stdout_lines=[], stderr_lines=["unexpected EOF"])
    assert not [line for line in shown if " in " in line]


@pytest.mark.parametrize(("module", "name", "args", "check_mode"), [
    (hf_snapshot_action, "hf_snapshot", {"path": "/m", "repo_id": "o/m"}, True),
    (hf_snapshot_action, "hf_snapshot", {"path": "/m", "repo_id": "o/m", "state": "planned"}, False),
    (hf_snapshot_action, "hf_snapshot", {"path": "/m", "repo_id": "o/m", "progress_interval": 0}, False),
    (engine_image_action, "engine_image", {"ref": "r", "state": "inspect"}, False),
    (engine_image_action, "engine_image", {"ref": "r", "state": "pulled"}, False),
    (engine_image_action, "engine_image", {"ref": "r", "state": "received", "source_address": "a"}, True),
])
def test_steps_that_move_nothing_long_run_as_before(tmp_path, shown, module, name, args, check_mode):
    plugin, calls = action(module, args, tmp_path, check_mode=check_mode, name=name)
    result = plugin.run(task_vars={"inventory_hostname": "spark1"})
    assert result == {"changed": False, "ran": "synchronously"}
    assert calls["modules"] == [{"args": args, "wrap_async": False, "async_val": 0}]
    assert calls["commands"] == [] and shown == []
    # As ansible.builtin.normal does, the temporary directory of the run is removed.
    assert calls["removed"] == [None]


def test_a_task_with_async_of_its_own_is_left_to_the_executor(tmp_path, shown):
    args = {"path": "/m", "repo_id": "o/m"}
    plugin, calls = action(hf_snapshot_action, args, tmp_path, async_val=600)
    plugin.run(task_vars={"inventory_hostname": "spark1"})
    assert calls["modules"] == [{"args": args, "wrap_async": True, "async_val": 600}] and calls["commands"] == []
    # The job's directory is the wrapper's to remove.
    assert calls["removed"] == []


def test_an_interval_that_is_not_seconds_fails_before_the_module_runs(tmp_path, shown):
    plugin, calls = action(hf_snapshot_action, {"path": "/m", "repo_id": "o/m", "progress_interval": "often"},
                           tmp_path)
    result = plugin.run(task_vars={"inventory_hostname": "spark2"})
    assert result["failed"] is True and calls["modules"] == []
    assert result["msg"] == ("spark2: model_weights_progress_interval is 'often'; expected seconds between progress "
                             "lines (a number, 0 for none)")


def test_the_weights_sync_shows_its_bytes_and_closes_with_what_rsync_moved(tmp_path, shown):
    module_result = {"changed": True, "rc": 0, "stdout": ">f+++++++++ model.safetensors\n", "stderr": "",
                     "cmd": ["rsync"], "transferred_bytes": 2_000_000, "seconds": 4.0}
    job = Job(tmp_path, [500_000, 2_000_000], module_result)
    plugin, calls = action(weights_rsync_action, {"argv": ["rsync"], "expected_bytes": 2_000_000}, tmp_path, job=job,
                           name="weights_rsync")
    calls["lines"] = shown
    result = plugin.run(task_vars={"inventory_hostname": "spark2"})
    job.thread.join(5)
    assert job.lines_when_done[0] == "spark2 | weights sync: 0.5 of 2.0 MB, 50.0 kB/s, 10s elapsed, ~30s left"
    assert shown[-1] == "spark2 | weights sync: 2.0 MB in 4s, 500.0 kB/s"
    assert result["stdout_lines"] == [">f+++++++++ model.safetensors"]


def test_the_weights_sync_is_skipped_in_check_mode_as_a_command_is(tmp_path, shown):
    plugin, calls = action(weights_rsync_action, {"argv": ["rsync"]}, tmp_path, check_mode=True, name="weights_rsync")
    with pytest.raises(AnsibleActionSkip):
        plugin.run(task_vars={"inventory_hostname": "spark2"})
    assert calls["modules"] == [] and shown == []


def test_a_job_the_wrapper_could_not_start_fails_as_it_said_and_leaves_no_directory(tmp_path, shown):
    plugin, calls = action(hf_snapshot_action, {"path": "/m", "repo_id": "o/m"}, tmp_path)
    refused = {"failed": True, "msg": "could not create directory: /root/.ansible_async - Permission denied"}
    plugin._execute_module = lambda module_args=None, task_vars=None, wrap_async=False: dict(refused)
    result = plugin.run(task_vars={"inventory_hostname": "spark1"})
    assert result == refused and calls["commands"] == [] and shown == []
    assert calls["removed"] == [str(tmp_path / "ansible-tmp-1-2")]
