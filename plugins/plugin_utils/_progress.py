# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The line a person reads while a long step runs, from the record a module
keeps on the node (``plugins/module_utils/_progress.py``), and the command
that reads it there.

    spark1 | weights: 12.4 of 300.0 GB, 1.1 GB/s, 2m10s elapsed, ~4m22s left

Sizes are decimal (GB = 10^9 bytes), as the roles' messages give them.
"""

from __future__ import annotations

import json
import shlex

from ansible_collections.dgxspark.cluster.plugins.module_utils._progress import SEEN_SUFFIX, parse_progress

# Separates the progress record from the job file in the poll's output.
POLL_SEPARATOR = "--dgxspark-progress-job--"


class ProgressError(ValueError):
    """Raised on a setting the progress display cannot use."""


def human_bytes(count):
    """``12.4 GB``, ``512.0 MB``, ``3.0 kB``, ``12 B``."""
    count = float(count)
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(count) >= size:
            return "%.1f %s" % (count / size, unit)
    return "%d B" % count


def _scaled(count, size, unit):
    return "%.1f %s" % (float(count) / size, unit)


def bytes_of(done, total, estimated=False):
    """``12.4 of 300.0 GB``: both in the unit of the total; ``of ~300.0 GB``
    when the total is only an estimate."""
    about = "~" if estimated else ""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if total >= size:
            return "%.1f of %s%s" % (float(done) / size, about, _scaled(total, size, unit))
    return "%d of %s%d B" % (done, about, total)


def human_duration(seconds):
    """``45s``, ``2m10s``, ``1h05m``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


def rate(record):
    """Bytes per second since the step started, or None before a second has passed."""
    elapsed = float(record["updated"]) - float(record["started"])
    if elapsed < 1.0:
        return None
    return float(record["done"]) / elapsed


def seconds_left(record):
    """Seconds until the total at the rate so far, or None when the total or the rate is not known (or the
    total is reached)."""
    total = record.get("total")
    speed = rate(record)
    if total is None or not speed or record["done"] >= total:
        return None
    return max(0.0, (float(total) - float(record["done"])) / speed)


def progress_line(host, record, label=None):
    """The line of O(host) for O(record) (parse_progress's), under
    O(label) (else the record's phase)."""
    elapsed = float(record["updated"]) - float(record["started"])
    words = []
    total = record.get("total")
    if total:
        words.append(bytes_of(record["done"], total, record.get("estimated")))
    elif record["done"]:
        words.append(human_bytes(record["done"]))
    speed = rate(record)
    if speed is not None and record["done"]:
        words.append("%s/s" % human_bytes(speed))
    words.append("%s elapsed" % human_duration(elapsed))
    left = seconds_left(record)
    if left is not None:
        words.append("~%s left" % human_duration(left))
    return "%s | %s: %s" % (host, label or record.get("phase") or "progress", ", ".join(words))


def done_line(host, label, count, seconds):
    """The closing line of a step that moved O(count) bytes in O(seconds):
    ``spark1 | weights download: 300.0 GB in 4m32s, 1.1 GB/s``."""
    words = "%s in %s" % (human_bytes(count), human_duration(seconds))
    if seconds >= 1.0:
        words += ", %s/s" % human_bytes(count / float(seconds))
    return "%s | %s: %s" % (host, label, words)


def start_phase_line(phase, host):
    """The line of O(host)'s rank for the O(phase) its probe reported
    (``_engine_timeline.start_phase``): ``spark2 | engine start: model load,
    2m10s since the unit started, 25s in this part``."""
    if not isinstance(phase, dict) or not isinstance(phase.get("phase"), str):
        raise ProgressError("%s: the probe reported no phase of the start (%.200r)" % (host, phase))
    words = [phase["phase"]]
    if phase.get("elapsed") is not None:
        words.append("%s since the unit started" % human_duration(phase["elapsed"]))
        if phase.get("since") is not None and phase["since"] != phase["elapsed"]:
            words.append("%s in this part" % human_duration(phase["since"]))
    if phase.get("detail"):
        words.append(str(phase["detail"]))
    return "%s | engine start: %s" % (host, ", ".join(words))


def poll_interval(value, host, variable):
    """O(value) as seconds between polls (0: no progress lines), or ProgressError naming the variable."""
    if isinstance(value, bool):
        value = None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds >= 0:
        raise ProgressError("%s: %s is %r; expected seconds between progress lines (a number, 0 for none)"
                            % (host, variable, value))
    return seconds


def poll_command(progress_path, job_path):
    """One shell command for a poll: note that a controller still follows the
    step (touch the .seen file), print the progress record, the separator and
    the async job file. Nothing but the shell runs on the node."""
    return "sh -c %s" % shlex.quote(
        "touch %s 2>/dev/null; cat %s 2>/dev/null; echo; echo %s; cat %s 2>/dev/null; true" % (
            shlex.quote(progress_path + SEEN_SUFFIX), shlex.quote(progress_path), POLL_SEPARATOR,
            shlex.quote(job_path)))


def split_poll(stdout):
    """(record or None, job text, finished) from the output of poll_command.

    The job file holds ``{"started": true, "finished": false, ...}`` while the
    module runs and the module's result once it ended (as async_status reads it)."""
    progress_text, _sep, job_text = (stdout or "").partition(POLL_SEPARATOR)
    record = parse_progress(progress_text.strip())
    job_text = job_text.strip()
    finished = False
    if job_text:
        try:
            job = json.loads(job_text)
        except ValueError:
            job = None
        finished = isinstance(job, dict) and not ("started" in job and not job.get("finished"))
    return record, job_text, finished
