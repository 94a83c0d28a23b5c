# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The progress of a long step, kept in a small JSON file on the node.

A module that downloads or loads for minutes writes where it stands to the
file its action names (the module's ``progress_file`` option); the action
reads it between polls and shows one line per poll (see
``plugins/plugin_utils/_progress.py``). The record::

    {"version": 1, "phase": "weights", "done": 12400000000,
     "total": 300000000000, "estimated": false,
     "started": 1764950000.1, "updated": 1764950130.4}

``done`` and ``total`` count bytes (``total`` is null when not known,
``estimated`` true when it is only a guess); ``started`` and ``updated``
are the node's clock, so the rate and the time elapsed never mix two
clocks. The file is replaced atomically: a reader sees the previous record
or the next, never half of one.

The action touches ``<progress_file>.seen`` at every poll. A step that has
not been followed for ``abandon_after`` seconds stops (``ProgressAbandoned``),
as a synchronous module stops when the controller's connection drops, so an
interrupted run leaves no download or load behind that a rerun would race.

Standard library only (nodes run it on their system Python).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

PROGRESS_VERSION = 1
SEEN_SUFFIX = ".seen"


class ProgressAbandoned(Exception):
    """Raised when no controller has polled the step for too long."""


def progress_record(phase, done, total, started, updated, estimated=False):
    """The record a progress file holds."""
    return {
        "version": PROGRESS_VERSION,
        "phase": phase,
        "done": int(done),
        "total": None if total is None else int(total),
        "estimated": bool(estimated),
        "started": round(float(started), 3),
        "updated": round(float(updated), 3),
    }


def write_progress(path, record):
    """Replace the file at O(path) with O(record), atomically."""
    directory = os.path.dirname(path) or "."
    handle, temp = tempfile.mkstemp(prefix=".progress-", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out, sort_keys=True)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def parse_progress(text):
    """The record in O(text) (what a progress file holds), or None when it is
    empty, not yet written or not a record of this version."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("version") != PROGRESS_VERSION:
        return None
    for key in ("done", "started", "updated"):
        if not isinstance(record.get(key), (int, float)) or isinstance(record.get(key), bool):
            return None
    if record.get("total") is not None and not isinstance(record["total"], (int, float)):
        return None
    return record


class ProgressFile:
    """Writes the progress of one step to O(path) at most every O(every)
    seconds (a call with ``force`` writes at once); without O(path) it only
    counts, so a module run without an action keeps working unchanged.

    O(abandon_after) seconds without a poll (the ``.seen`` file's mtime, or
    the start before the first poll) raise ProgressAbandoned from update()."""

    def __init__(self, path, phase, total=None, estimated=False, every=1.0, abandon_after=None, clock=time.time):
        self.path = path or None
        self.phase = phase
        self.total = total
        self.estimated = estimated
        self.every = every
        self.abandon_after = abandon_after
        self.clock = clock
        self.done = 0
        self.started = clock()
        self._written = None

    def record(self, now=None):
        return progress_record(self.phase, self.done, self.total, self.started,
                               self.clock() if now is None else now, self.estimated)

    def update(self, done=None, advance=0, force=False):
        """Set (O(done)) or advance (O(advance)) the bytes done, and write
        the record when O(every) seconds have passed since the last write."""
        if done is not None:
            self.done = done
        self.done += advance
        if self.path is None:
            return
        now = self.clock()
        if not force and self._written is not None and now - self._written < self.every:
            return
        self._check_followed(now)
        write_progress(self.path, self.record(now))
        self._written = now

    def finish(self, done=None):
        """Write the last record at once: the step has ended, so it is not
        stopped for want of a poll any more."""
        if done is not None:
            self.done = done
        if self.path is not None:
            write_progress(self.path, self.record())

    def _check_followed(self, now):
        if not self.abandon_after:
            return
        try:
            seen = os.stat(self.path + SEEN_SUFFIX).st_mtime
        except OSError:
            seen = self.started
        quiet = now - max(seen, self.started)
        if quiet > self.abandon_after:
            raise ProgressAbandoned(
                "no controller has followed this step for %d s (more than %d s); it stops, as it would when the "
                "connection to the controller drops, and the next run continues it" % (quiet, self.abandon_after))


def abandon_after(interval):
    """Seconds without a poll after which a step polled every O(interval)
    seconds counts as abandoned: ten polls missed, and never under two minutes,
    so a slow connection or a busy controller does not stop it."""
    return max(120.0, 10.0 * float(interval))


def writer_interval(interval):
    """How often a module rewrites its progress file for an action polling
    every O(interval) seconds: twice per poll, at most once a second."""
    return max(1.0, float(interval) / 2.0)
