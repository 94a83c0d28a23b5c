# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster's run lock: the controller's judgement of a held lock (plugin_utils/_run_lock.py),
the node's compare-and-swap of the lock file (module_utils/_run_lock_file.py), and the
run_lock action over both, its module call made here on a temporary directory."""

from __future__ import annotations

import datetime
import json
import os
import stat
import subprocess
import sys
from types import SimpleNamespace

import pytest

from ansible_collections.dgxspark.cluster.plugins.action.run_lock import ActionModule
from ansible_collections.dgxspark.cluster.plugins.module_utils import _run_lock_file
from ansible_collections.dgxspark.cluster.plugins.module_utils._run_lock_file import read_record, same_run, swap
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _run_lock
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._run_lock import (
    age,
    decide,
    holder_alive,
    process_start,
    refusal,
    this_run,
)

NOW = datetime.datetime(2026, 12, 6, 7, 0, 0, tzinfo=datetime.UTC)
BOOT = "516d1ad1-6471-4ee4-bcea-8384cedb18f4"


def record(pid=4242, start="1000", controller="ops1", boot_id=BOOT, playbook="site.yml", since="2026-12-06T06:55:48Z",
           user="alice"):
    return {"user": user, "controller": controller, "boot_id": boot_id, "pid": pid, "start": start,
            "playbook": playbook, "since": since}


ME = record(pid=5000, start="2000", user="bob", playbook="restart.yml", since="2026-12-06T07:00:00Z")


def running(table):
    """A start_of stand-in: the start time of each live pid of this controller."""
    return lambda pid: table.get(int(pid))


# --- the controller's judgement -------------------------------------------------------


def test_a_free_lock_is_taken():
    assert decide(None, ME, break_lock=False) == "take"


def test_this_runs_own_lock_is_held_not_taken_again():
    assert decide(dict(ME, playbook="engine.yml"), ME, break_lock=False) == "held"


def test_a_live_run_of_this_controller_refuses_naming_holder_playbook_age_and_how_to_break():
    holder = record()
    assert decide(holder, ME, False, start_of=running({4242: "1000"})) == "refuse"
    text = refusal(holder, ME, "spark1", "/var/lib/dgxspark/run.lock", NOW)
    assert "held by alice@ops1, running site.yml (ansible-playbook pid 4242) since 2026-12-06T06:55:48Z (4m12s ago)" in text
    assert "spark1:/var/lib/dgxspark/run.lock" in text
    assert "still runs on this controller (pid 4242)" in text
    assert "-e dgxspark_run_lock_break=true" in text


def test_a_gone_run_of_this_controller_is_taken_over():
    holder = record()
    assert decide(holder, ME, False, start_of=running({})) == "take_over"
    warning = _run_lock.take_over_warning(holder, "spark1", "/var/lib/dgxspark/run.lock", NOW)
    assert warning.startswith("Took over the cluster's run lock (spark1:/var/lib/dgxspark/run.lock)")
    assert "alice@ops1, running site.yml (ansible-playbook pid 4242)" in warning


def test_a_reused_pid_with_another_start_time_is_taken_over():
    assert holder_alive(record(), ME, start_of=running({4242: "987654"})) is False
    assert decide(record(), ME, False, start_of=running({4242: "987654"})) == "take_over"


def test_a_run_from_before_the_controller_rebooted_is_taken_over_whatever_the_pid():
    holder = record(boot_id="another-boot")
    assert decide(holder, ME, False, start_of=running({4242: "1000"})) == "take_over"


def test_a_controller_without_start_times_counts_a_live_pid_as_the_run():
    assert holder_alive(record(start=None), ME, start_of=running({4242: "5"})) is True
    assert holder_alive(record(), ME, start_of=running({4242: ""})) is True


def test_a_run_of_another_controller_cannot_be_checked_and_refuses():
    holder = record(controller="ops2")
    # Even a pid that does not exist here says nothing about ops2.
    assert holder_alive(holder, ME, start_of=running({})) is None
    assert decide(holder, ME, False, start_of=running({})) == "refuse"
    text = refusal(holder, ME, "spark1", "/var/lib/dgxspark/run.lock", NOW)
    assert "held by alice@ops2, running site.yml" in text
    assert "another controller, ops2, which cannot be checked from here" in text
    assert "-e dgxspark_run_lock_break=true" in text


def test_the_break_variable_takes_any_lock_and_the_warning_names_the_broken_holder():
    for holder in (record(controller="ops2"), record()):
        assert decide(holder, ME, True, start_of=running({4242: "1000"})) == "break"
    warning = _run_lock.break_warning(record(controller="ops2"), "spark1", "/var/lib/dgxspark/run.lock", NOW)
    assert "Broke the cluster's run lock" in warning and "dgxspark_run_lock_break=true" in warning
    assert "alice@ops2, running site.yml (ansible-playbook pid 4242) since 2026-12-06T06:55:48Z" in warning


def test_an_unreadable_lock_refuses_and_says_how_to_break_it():
    holder = {"unreadable": "garbage"}
    assert decide(holder, ME, False, start_of=running({})) == "refuse"
    text = refusal(holder, ME, "spark1", "/var/lib/dgxspark/run.lock", NOW)
    assert "an unreadable record ('garbage')" in text and "dgxspark_run_lock_break=true" in text
    assert decide(holder, ME, True) == "break"


@pytest.mark.parametrize(("since", "expected"), [
    ("2026-12-06T06:59:15Z", "45s"), ("2026-12-06T06:55:48Z", "4m12s"), ("2026-12-06T04:57:00Z", "2h03m"),
    ("2026-12-03T03:00:00Z", "3d04h"), ("yesterday", "unknown age"),
])
def test_the_age_reads_like_the_progress_lines(since, expected):
    assert age({"since": since}, NOW) == expected


def test_process_start_reads_proc_stat_and_a_zombie_is_gone(tmp_path):
    (tmp_path / "17").mkdir()
    fields = ["S"] + [str(n) for n in range(4, 22)] + ["123456"] + ["0"] * 30
    (tmp_path / "17" / "stat").write_text("17 (ansible-playbook (x)) %s\n" % " ".join(fields))
    assert process_start(17, proc=str(tmp_path)) == "123456"
    (tmp_path / "17" / "stat").write_text("17 (ansible-playbook) %s\n" % " ".join(["Z"] + fields[1:]))
    assert process_start(17, proc=str(tmp_path)) is None
    assert process_start(18, proc=str(tmp_path)) is None


def test_process_start_of_real_processes():
    assert process_start(os.getpid())
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        started = process_start(sleeper.pid)
        assert started and started.isdigit()
        me = this_run("site.yml", NOW)
        holder = dict(me, pid=sleeper.pid, start=started)
        assert decide(holder, me, False) == "refuse"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert decide(holder, me, False) == "take_over"


def test_this_run_names_the_ansible_playbook_process_the_worker_runs_under():
    run = this_run("site.yml", NOW)
    assert run["pid"] == os.getppid() and run["start"] == process_start(os.getppid())
    assert run["playbook"] == "site.yml" and run["since"] == "2026-12-06T07:00:00Z"
    assert run["user"] and run["controller"]


# --- the lock file on the node -----------------------------------------------------------


def test_a_free_lock_file_is_written_0644_and_taken_once(tmp_path):
    path = str(tmp_path / "dgxspark" / "run.lock")
    assert swap(path, "present", ME) == ("taken", None)
    assert read_record(path) == ME
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(tmp_path / "dgxspark") == ["run.lock"]
    # The playbooks site.yml imports ask again in the same run: nothing is written.
    assert swap(path, "present", dict(ME, playbook="engine.yml")) == ("held", ME)
    assert read_record(path) == ME


def test_a_held_lock_is_replaced_only_while_it_holds_what_the_controller_judged(tmp_path):
    path = str(tmp_path / "run.lock")
    holder = record()
    swap(path, "present", holder)
    assert swap(path, "present", ME) == ("busy", holder)
    assert swap(path, "present", ME, replace=record(pid=1)) == ("busy", holder)
    assert read_record(path) == holder
    assert swap(path, "present", ME, replace=holder) == ("taken_over", holder)
    assert read_record(path) == ME


def test_only_the_holder_releases_and_an_imported_playbook_keeps_it(tmp_path):
    path = str(tmp_path / "run.lock")
    swap(path, "present", ME)
    assert swap(path, "absent", dict(ME, pid=1)) == ("other", ME)
    assert swap(path, "absent", dict(ME, start="1")) == ("other", ME)
    assert swap(path, "absent", dict(ME, playbook="engine.yml")) == ("kept", ME)
    assert read_record(path) == ME
    assert swap(path, "absent", ME) == ("released", ME)
    assert not os.path.exists(path)
    assert swap(path, "absent", ME) == ("free", None)


def test_check_mode_writes_nothing_and_creates_no_directory(tmp_path):
    path = str(tmp_path / "dgxspark" / "run.lock")
    assert swap(path, "present", ME, check_mode=True) == ("taken", None)
    assert not (tmp_path / "dgxspark").exists()
    swap(path, "present", record())
    assert swap(path, "present", ME, replace=record(), check_mode=True) == ("taken_over", record())
    assert read_record(path) == record()


def test_an_unreadable_file_is_reported_not_overwritten(tmp_path):
    path = tmp_path / "run.lock"
    path.write_text("not json\n")
    outcome, current = swap(str(path), "present", ME)
    assert outcome == "busy" and current == {"unreadable": "not json\n"}
    assert not same_run(current, {"unreadable": "other"})
    assert swap(str(path), "present", ME, replace=current)[0] == "taken_over"


def test_the_module_side_is_standard_library_only():
    with open(_run_lock_file.__file__, encoding="utf-8") as source:
        imported = {line.split()[1] for line in source
                    if line.startswith(("import ", "from ")) and "__future__" not in line}
    assert imported <= set(sys.stdlib_module_names), imported


# --- the action, its module call made here ------------------------------------------------


def action(args, check_mode=False, delegate_to="spark1"):
    task = SimpleNamespace(args=args, async_val=0, check_mode=check_mode, action="dgxspark.cluster.run_lock",
                           delegate_to=delegate_to, diff=False)
    plugin = ActionModule(task, SimpleNamespace(_shell=SimpleNamespace(tmpdir=None)), None, None, None)
    calls = []

    def execute_module(module_name=None, module_args=None, task_vars=None):
        del task_vars
        calls.append(module_args)
        holder = dict(module_args["holder"], playbook=module_args["playbook"])
        outcome, previous = swap(module_args["path"], module_args.get("state", "present"), holder,
                                 module_args.get("replace"), check_mode)
        lock = holder if outcome in ("taken", "taken_over") else (None if outcome in ("released", "free") else previous)
        return json.loads(json.dumps({"changed": False, "outcome": outcome, "lock": lock, "previous": previous}))

    plugin._execute_module = execute_module
    return plugin, calls


def test_the_action_takes_releases_and_never_reports_a_change(tmp_path):
    path = str(tmp_path / "run.lock")
    plugin, calls = action({"playbook": "site.yml", "path": path})
    result = plugin.run(task_vars={"inventory_hostname": "spark1"})
    assert result["outcome"] == "taken" and result["changed"] is False and not result.get("warnings")
    assert len(calls) == 1 and read_record(path)["pid"] == os.getppid()
    result = action({"playbook": "site.yml", "path": path, "state": "absent"})[0].run(task_vars={})
    assert result["outcome"] == "released" and not result.get("warnings") and not os.path.exists(path)


def test_the_action_refuses_a_live_holder_and_check_mode_only_warns(tmp_path):
    path = str(tmp_path / "run.lock")
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        holder = dict(this_run("restart.yml", NOW), pid=sleeper.pid, start=process_start(sleeper.pid), user="carol")
        swap(path, "present", holder)
        result = action({"playbook": "site.yml", "path": path})[0].run(task_vars={})
        assert result["failed"] and result["outcome"] == "refused"
        assert "held by carol@" in result["msg"] and "running restart.yml" in result["msg"]
        checked = action({"playbook": "site.yml", "path": path}, check_mode=True)[0].run(task_vars={})
        assert not checked.get("failed") and "would be refused" in checked["warnings"][0]
        assert read_record(path) == holder
    finally:
        sleeper.kill()
        sleeper.wait()
    plugin, calls = action({"playbook": "site.yml", "path": path})
    result = plugin.run(task_vars={})
    assert result["outcome"] == "taken_over" and len(calls) == 2
    assert result["warnings"][0].startswith("Took over the cluster's run lock (spark1:%s)" % path)
    assert read_record(path)["pid"] == os.getppid()


def test_the_action_breaks_another_controllers_lock_only_when_asked(tmp_path):
    path = str(tmp_path / "run.lock")
    holder = record(controller="elsewhere.example")
    swap(path, "present", holder)
    refused = action({"playbook": "site.yml", "path": path})[0].run(task_vars={})
    assert refused["failed"] and "another controller, elsewhere.example" in refused["msg"]
    broken = action({"playbook": "site.yml", "path": path, "break_lock": True})[0].run(task_vars={})
    assert broken["outcome"] == "broken" and not broken.get("failed")
    assert "Broke the cluster's run lock" in broken["warnings"][0] and "alice@elsewhere.example" in broken["warnings"][0]
    mine = read_record(path)
    assert mine["pid"] == os.getppid()
    # The broken holder's release finds the lock is no longer its own and leaves it.
    assert swap(path, "absent", holder) == ("other", mine)
    assert read_record(path) == mine
