# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster's run lock file on the engine head (the run_lock module's node side).

One JSON record names the run holding the lock: who (user, controller host), which
playbook, since when, and the controller's ansible-playbook process (pid, start time,
boot id). Every change is a compare-and-swap under flock of the lock's directory: the
record is replaced or removed only when the file still holds what the caller expects,
and written to a temporary file renamed over the lock, so a reader never sees half a
record. Standard library only: it runs on the node and is unit-tested without Ansible.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile

# What makes two records the same run: the controller's process, on the same boot of
# the same controller host. The playbook is not part of it: a playbook that site.yml
# imports runs in the same process.
IDENTITY = ("controller", "boot_id", "pid", "start")


def same_run(record, other):
    """Whether two lock records name the same ansible-playbook process."""
    if not isinstance(record, dict) or not isinstance(other, dict) or record.get("pid") is None:
        return False
    return all(record.get(key) == other.get(key) for key in IDENTITY)


def read_record(path):
    """The record the lock file holds: None when there is none, a dict, or
    {'unreadable': text} when the file holds no JSON object (the caller refuses it)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return {"unreadable": text[:200]}
    return record


def _write(path, record):
    directory = os.path.dirname(path)
    fd, temporary = tempfile.mkstemp(prefix=".run.lock.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.rename(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _decide(state, current, holder, replace):
    """(outcome, write): what a swap does with the file holding O(current).

    state present: V(taken) (the file was empty), V(held) (this run holds it already),
    V(taken_over) (it held O(replace), the record the controller judged stale or broke),
    V(busy) (another run holds it: nothing written). state absent: V(released) (this run's
    own record, taken by this playbook), V(kept) (this run holds it for another playbook,
    the one that imported this one), V(free) (no record), V(other) (another run holds it).
    O(write) is the record to write, V(None) to remove the file, False to leave it."""
    if state == "present":
        if current is None:
            return "taken", holder
        if same_run(current, holder):
            return "held", False
        if replace is not None and current == replace:
            return "taken_over", holder
        return "busy", False
    if current is None:
        return "free", False
    if same_run(current, holder):
        if current.get("playbook") == holder.get("playbook"):
            return "released", None
        return "kept", False
    return "other", False


def swap(path, state, holder, replace=None, check_mode=False):
    """Take (O(state)=present) or release (absent) the lock at O(path) for O(holder).
    Returns (outcome, the record the file held before). In check mode nothing is written
    and the lock's directory is not created."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        if check_mode or state == "absent":
            return _decide(state, None, holder, replace)[0], None
        os.makedirs(directory, 0o755)
    lock_fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        current = read_record(path)
        outcome, write = _decide(state, current, holder, replace)
        if not check_mode:
            if write is None:
                os.unlink(path)
            elif write is not False:
                _write(path, write)
        return outcome, current
    finally:
        os.close(lock_fd)
