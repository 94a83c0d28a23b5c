# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""One run at a time changes the cluster (the run lock, /var/lib/dgxspark/run.lock on the
engine head): a run is refused while another holds the lock, naming it, and changes
nothing; a lock left by a run of this controller that is gone is taken over and released
at the end; another controller's lock is refused unless dgxspark_run_lock_break breaks it.

The holders are planted: a live one is a `sleep` started here (its pid and start time
are what a real ansible-playbook's would be). The runs choose one cheap part
(--tags hardening: one read per converged node); a refused run stops after the preflight."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from helpers import assert_nothing_changed, engine_head, flat, node_state, run_playbook

testinfra_hosts = ["local://"]

HEAD = engine_head()[0]
LOCK = "/var/lib/dgxspark/run.lock"
CHEAP = ("--tags", "hardening")
BREAK = {"dgxspark_run_lock_break": True}


def process_start(pid):
    """The start time of a process of this controller, as the action records it."""
    stat = Path("/proc/%d/stat" % pid).read_text()
    return stat[stat.rfind(")") + 2:].split()[19]


def holder(pid, start, controller=None, playbook="restart.yml", user="operator2"):
    return {"user": user, "controller": controller or socket.gethostname(),
            "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
            "pid": pid, "start": start, "playbook": playbook, "since": "2026-12-06T06:00:00Z"}


def plant(record):
    node_state(HEAD, "mkdir -p %s && printf '%%s\\n' %s > %s"
               % (LOCK.rsplit("/", 1)[0], shlex.quote(json.dumps(record)), LOCK))


def lock_on_head():
    text = node_state(HEAD, "cat %s 2>/dev/null || true" % LOCK).strip()
    return json.loads(text) if text else None


def output(result):
    # Ansible writes its warnings and errors to stderr, the task results to stdout.
    return flat(result.stdout + "\n" + result.stderr)


@pytest.fixture
def sleeper():
    """A live process of this controller standing in for another run's ansible-playbook;
    the lock file removed whatever the test left."""
    process = subprocess.Popen(["sleep", "600"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()
        node_state(HEAD, "rm -f %s" % LOCK)


def test_a_live_run_of_this_controller_refuses_the_next_one_and_a_gone_one_is_taken_over(sleeper):
    planted = holder(sleeper.pid, process_start(sleeper.pid))
    plant(planted)
    refused = run_playbook("site.yml", *CHEAP)
    out = output(refused)
    assert refused.returncode != 0, out[-3000:]
    assert re.search(r"The cluster's run lock \(%s:%s\) is held by operator2@%s, running restart\.yml "
                     r"\(ansible-playbook pid %d\) since 2026-12-06T06:00:00Z \(\w+ ago\)"
                     % (HEAD, re.escape(LOCK), re.escape(socket.gethostname()), sleeper.pid), out), out[-3000:]
    assert "That ansible-playbook still runs on this controller (pid %d)" % sleeper.pid in out
    assert "-e dgxspark_run_lock_break=true" in out
    # Refused at the lock, after the checks and before the first change.
    assert "PLAY [Preflight" in refused.stdout and "PLAY [Node software" not in refused.stdout
    assert_nothing_changed(refused)
    assert lock_on_head() == planted

    # That run is gone: the next run takes its lock over, says so, and releases it at the end.
    sleeper.kill()
    sleeper.wait()
    taken = run_playbook("site.yml", *CHEAP)
    out = output(taken)
    assert taken.returncode == 0, out[-3000:]
    assert ("Took over the cluster's run lock (%s:%s) from a run on this controller that ended without releasing it"
            % (HEAD, LOCK)) in out, out[-3000:]
    assert "operator2@%s, running restart.yml (ansible-playbook pid %d)" % (socket.gethostname(), sleeper.pid) in out
    assert lock_on_head() is None


def test_another_controllers_lock_is_refused_and_broken_only_when_asked(sleeper):
    # Its pid is one that lives here: a lock of another controller is never judged by it.
    planted = holder(sleeper.pid, process_start(sleeper.pid), controller="ops-elsewhere.example", user="cron")
    plant(planted)
    refused = run_playbook("site.yml", *CHEAP)
    out = output(refused)
    assert refused.returncode != 0, out[-3000:]
    assert "held by cron@ops-elsewhere.example, running restart.yml" in out, out[-3000:]
    assert "another controller, ops-elsewhere.example, which cannot be checked from here" in out
    assert "-e dgxspark_run_lock_break=true" in out
    assert_nothing_changed(refused)
    assert lock_on_head() == planted

    broken = run_playbook("site.yml", *CHEAP, extra_vars=BREAK)
    out = output(broken)
    assert broken.returncode == 0, out[-3000:]
    assert re.search(r"Broke the cluster's run lock \(%s:%s\), as dgxspark_run_lock_break=true asks: it was held by "
                     r"cron@ops-elsewhere\.example, running restart\.yml" % (HEAD, re.escape(LOCK)), out), out[-3000:]
    assert lock_on_head() is None
