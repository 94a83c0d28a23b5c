# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster's run lock, the controller's side: this run's record, whether another run's
record is stale, and the texts of a refusal, a take-over, a break and a release.

The run_lock action names this run by the controller's ansible-playbook process (the
parent of the worker the action runs in): its pid, its start time (/proc/<pid>/stat, in
clock ticks since boot) and the controller's boot id, so that a pid the kernel gave to
another process later is not taken for the run. A holder on this controller is checked
here; a holder on another controller cannot be, and is refused unless the lock is broken.

Standard library only, unit-tested without Ansible (tests/unit/plugins/plugin_utils/test_run_lock.py).
"""

from __future__ import annotations

import datetime
import getpass
import os
import socket

from ansible_collections.dgxspark.cluster.plugins.module_utils._run_lock_file import same_run

BREAK_VARIABLE = "dgxspark_run_lock_break"
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def process_start(pid, proc="/proc"):
    """The start time of process O(pid) (clock ticks since boot, as text), None when it
    does not exist or has exited (a zombie), or '' where /proc cannot tell (not Linux)."""
    if not os.path.isdir(proc):
        # No /proc (a macOS controller): whether the pid exists is all there is to know.
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return None
        except (OSError, ValueError):
            pass
        return ""
    try:
        with open(os.path.join(proc, str(int(pid)), "stat"), encoding="utf-8") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return ""
    # The command name (field 2) may hold spaces and parentheses: the fields after it
    # start after its last ')'. Field 3 is the state, field 22 the start time.
    fields = stat[stat.rfind(")") + 2:].split()
    if len(fields) < 20:
        return ""
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def boot_id(path=BOOT_ID):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def this_run(playbook, now, pid=None, proc="/proc"):
    """This run's lock record: the controller's ansible-playbook process is the parent of
    the worker process an action runs in."""
    pid = os.getppid() if pid is None else pid
    return {
        "user": getpass.getuser(),
        "controller": socket.gethostname(),
        "boot_id": boot_id(os.path.join(proc, "sys", "kernel", "random", "boot_id")),
        "pid": pid,
        "start": process_start(pid, proc) or None,
        "playbook": playbook,
        "since": _utc(now),
    }


def _utc(moment):
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _since(record):
    try:
        return datetime.datetime.strptime(str(record.get("since")), "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.UTC)
    except ValueError:
        return None


def age(record, now):
    """How long the holder has held the lock, as 45s, 5m12s, 2h03m or 3d04h ('unknown age'
    without a readable time)."""
    since = _since(record)
    if since is None:
        return "unknown age"
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % divmod(seconds, 60)
    if seconds < 86400:
        return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)
    return "%dd%02dh" % (seconds // 86400, seconds % 86400 // 3600)


def describe(record, now):
    """The holder as a person reads it: who, where, which playbook, since when."""
    if "unreadable" in record:
        return "an unreadable record (%r)" % record["unreadable"][:80]
    return "%s@%s, running %s (ansible-playbook pid %s) since %s (%s ago)" % (
        record.get("user", "?"), record.get("controller", "?"), record.get("playbook", "?"),
        record.get("pid", "?"), record.get("since", "?"), age(record, now))


def holder_alive(holder, me, start_of=process_start):
    """Whether the run O(holder) names still runs, seen from this controller (O(me), this
    run's record): True, False, or None when it cannot be checked from here (another
    controller host, or an unreadable record)."""
    if "unreadable" in holder or holder.get("controller") != me.get("controller") or holder.get("pid") is None:
        return None
    if holder.get("boot_id") and me.get("boot_id") and holder["boot_id"] != me["boot_id"]:
        # The controller has rebooted since: no process of that boot runs.
        return False
    started = start_of(holder["pid"])
    if started is None:
        return False
    if started == "" or not holder.get("start"):
        # This controller cannot read start times (or the holder could not): a live pid counts.
        return True
    return str(started) == str(holder["start"])


def decide(holder, me, break_lock, start_of=process_start):
    """What a run (O(me)) does with a lock O(holder) holds: V(take) (free), V(held) (this run's
    own), V(take_over) (a run of this controller that is gone), V(break) (O(break_lock)) or
    V(refuse)."""
    if holder is None:
        return "take"
    if same_run(holder, me):
        return "held"
    if break_lock:
        return "break"
    if holder_alive(holder, me, start_of) is False:
        return "take_over"
    return "refuse"


def refusal(holder, me, lock_host, path, now):
    """Why this run stops: who holds the lock, and how to break it when that run is gone."""
    where = "%s:%s" % (lock_host, path)
    text = "The cluster's run lock (%s) is held by %s: another run is changing these nodes, and a second one " \
           "would stop its image sender and rsync daemon. " % (where, describe(holder, now))
    if "unreadable" in holder:
        check = "Nothing tells whether a run holds it."
    elif holder.get("controller") == me.get("controller"):
        check = "That ansible-playbook still runs on this controller (pid %s): wait for it to end." % holder.get("pid")
    else:
        check = "It ran on another controller, %s, which cannot be checked from here: wait for that run to end, or " \
                "look there for an ansible-playbook with pid %s." % (holder.get("controller"), holder.get("pid"))
    return text + check + (
        " If no run holds it any more (its controller crashed or is gone), break the lock: run again with "
        "-e %s=true (or remove %s on %s)." % (BREAK_VARIABLE, path, lock_host))


def take_over_warning(holder, lock_host, path, now, check_mode=False):
    return "%s the cluster's run lock (%s:%s) from a run on this controller that ended without releasing it " \
           "(a failed or killed run): %s." % ("Check mode: a run would take over" if check_mode else "Took over",
                                              lock_host, path, describe(holder, now))


def break_warning(holder, lock_host, path, now, check_mode=False):
    return "%s the cluster's run lock (%s:%s), as %s=true asks: it was held by %s. If that run still goes on, " \
           "the two runs disturb each other." % ("Check mode: a run would break" if check_mode else "Broke",
                                                 lock_host, path, BREAK_VARIABLE, describe(holder, now))


def check_mode_warning(holder, lock_host, path, now):
    return "Check mode: the cluster's run lock (%s:%s) is held by %s; a run that changes nodes would be refused " \
           "now (check mode takes no lock and goes on)." % (lock_host, path, describe(holder, now))


def release_warning(outcome, holder, lock_host, path, now):
    """A release that found no lock of this run's, or None when there is nothing to say."""
    if outcome == "other":
        return "The cluster's run lock (%s:%s) is no longer this run's: %s holds it (broken with %s=true?). " \
               "Left as it is." % (lock_host, path, describe(holder, now), BREAK_VARIABLE)
    if outcome == "free":
        return "The cluster's run lock (%s:%s) was no longer held when this run ended (removed or broken by " \
               "another run?)." % (lock_host, path)
    return None
