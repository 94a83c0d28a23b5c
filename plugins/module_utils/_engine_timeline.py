# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where did the serving gap go? The engine's start, split into its parts.

After a coordinated start the playbook reads the head rank's journal::

    journalctl -u dgxspark-engine.service --since @EPOCH --no-pager -o short-iso-precise

and ``start_timeline`` splits the time from the unit's start to the first
checked completion into parts, each ending at a line that vLLM logs:

=================  ==========================================================
part               ends at (the marker)
=================  ==========================================================
stop               not in the journal: the controller measured it and passes
                   it as ``stop_seconds``; it comes first
startup            ``distributed_init_method=`` (*distributed init*): imports,
                   configuration, the engine core's and the worker's spawn
rendezvous         the first of ``Starting to load model``,
                   ``Initializing model took``, ``Loading weights took``
                   (*model load start*): the worker logs again once the
                   process group of all ranks is up
model load         the last of ``Loading weights took``, ``Model loading
                   took`` (*model load end*)
engine init        ``Application startup complete`` (*application startup*):
                   profiling, KV cache, warm-up, CUDA graphs, the API server
first completion   not in the journal: ``ready_at``, the epoch at which the
                   checked completion answered
=================  ==========================================================

Every part starts where the one before it ended; ``startup`` starts at the
unit's ``Started dgxspark-engine.service`` line. A part whose marker is not in
the journal is left out and its time goes to the next part that is there, so
the parts always add up to (``ready_at``, or else the last marker found) minus
the unit's start, plus the stop. The markers not found are named in
``missing``, so the caller can say which line vLLM did not log.

The strings are vLLM's own (v0.32, ``vllm/distributed/parallel_state.py``,
``v1/worker/gpu_model_runner.py``, ``v1/worker/cpu_model_runner.py``,
``model_executor/model_loader/base_loader.py`` and ``default_loader.py``,
``v1/engine/core.py``) and uvicorn's (``Application startup complete.``).
Releases before about v0.11 log the ``distributed_init_method=`` line at DEBUG
only; there ``startup`` is missing and ``rendezvous`` holds both.
``init engine (profile, create kv cache, warmup model) took`` is no part's end
(the API server still starts after it) but is reported in ``marks`` as
*engine initialised*.

Times are the journal's own (its first field, ``short-iso-precise``, with a
``+0000`` or ``+00:00`` offset), not vLLM's ``INFO 12-03 16:16:07`` field,
which has neither year nor fraction nor zone. They are counted in whole
microseconds, so the parts add up exactly. ``ready_at`` should come from a
clock that agrees with the node's: a controller's clock that is off shows as
a wrong (even negative) ``first completion``.

Only the last ``Started`` line counts: a journal that also covers an earlier
(failed) start must not have its lines mixed in, so every marker before the
last start is ignored. Each marker is looked for after the one before it.

Standard library only: ``plugins/filter/engine.py`` exposes both functions
as the filters ``engine_start_timeline`` and ``engine_start_timeline_text``.
"""

from __future__ import annotations

import calendar
import math
import re

UNIT = "dgxspark-engine.service"

# The journal's first field in -o short-iso-precise:
# 2026-12-03T16:14:58.314523+0000 (systemd before 255) or ...+00:00.
TIMESTAMP = re.compile(
    r"^(?P<date>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})"
    r"T(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})"
    r"(?:[.,](?P<fraction>\d{1,9}))?"
    r"(?P<zone>Z|[+-]\d{2}:?\d{2})(?:\s|$)"
)

# systemd[1]: Started dgxspark-engine.service - dgxspark engine rank 0 (...).
UNIT_STARTED = re.compile(r"\bsystemd\[\d+\]: Started dgxspark-engine\.service\b")

# The markers, in the order they are looked for; each ends the part named.
DISTRIBUTED_INIT = re.compile(r"\bdistributed_init_method=\S")
MODEL_LOAD_START = re.compile(r"\b(?:Starting to load model|Initializing model took|Loading weights took)\b")
MODEL_LOAD_END = re.compile(r"\b(?:Loading weights took|Model loading took)\b")
APPLICATION_STARTUP = re.compile(r"\bApplication startup complete\b")
# Reported in marks only.
ENGINE_INITIALISED = re.compile(r"\binit engine \(profile, create kv cache, warmup model\) took\b")

UNIT_START = "unit start"
MARKERS = {
    "distributed init": DISTRIBUTED_INIT,
    "model load start": MODEL_LOAD_START,
    "model load end": MODEL_LOAD_END,
    "application startup": APPLICATION_STARTUP,
}
ENGINE_INITIALISED_MARK = "engine initialised"

# (part, the marker that ends it), in order.
PARTS = (
    ("startup", "distributed init"),
    ("rendezvous", "model load start"),
    ("model load", "model load end"),
    ("engine init", "application startup"),
)
STOP = "stop"
FIRST_COMPLETION = "first completion"

MICROSECONDS = 1000000


class EngineTimelineError(ValueError):
    """Raised when the arguments cannot be timed."""


def parse_timestamp(line):
    """The journal timestamp at the start of O(line) in whole microseconds
    since the epoch, or None when the line does not start with one (such as
    ``-- Boot ... --``)."""
    match = TIMESTAMP.match(line)
    if not match:
        return None
    fields = match.groupdict()
    try:
        seconds = calendar.timegm((
            int(fields["date"]), int(fields["month"]), int(fields["day"]),
            int(fields["hour"]), int(fields["minute"]), int(fields["second"]), 0, 0, 0,
        ))
    except (ValueError, OverflowError):
        return None
    zone = fields["zone"]
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = int(digits[:2]) * 3600 + int(digits[2:]) * 60
        seconds -= offset if zone[0] == "+" else -offset
    fraction = (fields["fraction"] or "")[:6].ljust(6, "0")
    return seconds * MICROSECONDS + int(fraction)


def _lines(journal_text):
    if isinstance(journal_text, str):
        return journal_text.splitlines()
    if isinstance(journal_text, (list, tuple)) and all(isinstance(line, str) for line in journal_text):
        return list(journal_text)
    raise EngineTimelineError(
        "the journal must be the text of journalctl (or its lines), not %s" % type(journal_text).__name__
    )


def _seconds(value, what, negative=True):
    """O(value) as a float, or None; a numeric string is accepted, since
    values gathered from a command's output arrive as text."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise EngineTimelineError("%s must be a number of seconds, not %r" % (what, value))
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise EngineTimelineError("%s must be a number of seconds, not %r" % (what, value)) from None
    if not math.isfinite(number):
        raise EngineTimelineError("%s must be a finite number of seconds, not %r" % (what, value))
    if not negative and number < 0:
        raise EngineTimelineError("%s must not be negative, not %r" % (what, value))
    return number


def _entries(lines):
    """(microseconds, line) of every line that carries a journal timestamp."""
    entries = []
    for line in lines:
        stamp = parse_timestamp(line)
        if stamp is not None:
            entries.append((stamp, line))
    return entries


def _first(entries, pattern, begin, end):
    for index in range(begin, end):
        if pattern.search(entries[index][1]):
            return index
    return None


def _last(entries, pattern, begin, end):
    for index in range(end - 1, begin - 1, -1):
        if pattern.search(entries[index][1]):
            return index
    return None


def _find_markers(entries, start):
    """Index of each marker's line after the unit's start at O(start), each
    looked for after the one before it; model load end is the last such line
    between model load start and application startup."""
    found = {}
    cursor = start
    for name in ("distributed init", "model load start"):
        index = _first(entries, MARKERS[name], cursor + 1, len(entries))
        if index is not None:
            found[name] = cursor = index
    application = _first(entries, APPLICATION_STARTUP, cursor + 1, len(entries))
    # "Loading weights took" may be both the first and the last load line.
    load_end = _last(entries, MODEL_LOAD_END, cursor, len(entries) if application is None else application)
    if load_end is not None and load_end > start:
        found["model load end"] = cursor = load_end
    initialised = _first(
        entries, ENGINE_INITIALISED, cursor, len(entries) if application is None else application
    )
    if initialised is not None:
        found[ENGINE_INITIALISED_MARK] = initialised
    if application is not None:
        found["application startup"] = application
    return found


def _round(microseconds):
    return round(microseconds / MICROSECONDS, 6)


def start_timeline(journal_text, ready_at=None, stop_seconds=None):
    """Split the engine's last start in O(journal_text) into its parts.

    O(journal_text) is what ``journalctl -u dgxspark-engine.service -o
    short-iso-precise`` printed (a string, or its list of lines).
    O(ready_at) is the epoch (seconds, a float) at which the checked
    completion answered, O(stop_seconds) how long the stop before the start
    took; each is left out of the parts when None.

    Returns a dict:

    * ``parts``: [{"name", "seconds"}], in order, of ``stop``, ``startup``,
      ``rendezvous``, ``model load``, ``engine init``, ``first completion``,
      less those that cannot be timed;
    * ``total_seconds``: the sum of the parts;
    * ``started_at``: the epoch of the last ``Started`` line, or None when
      the journal has none (then no part but the stop is timed);
    * ``missing``: the markers not found (``unit start``, ``distributed
      init``, ``model load start``, ``model load end``, ``application
      startup``);
    * ``marks``: the epoch of each marker found (and of ``engine
      initialised``), by name.
    """
    entries = _entries(_lines(journal_text))
    ready = _seconds(ready_at, "ready_at")
    stop = _seconds(stop_seconds, "stop_seconds", negative=False)

    parts = []
    if stop is not None:
        parts.append({"name": STOP, "seconds": round(stop, 6)})
    total = round(stop * MICROSECONDS) if stop is not None else 0

    starts = [index for index, (_stamp, line) in enumerate(entries) if UNIT_STARTED.search(line)]
    if not starts:
        return {
            "parts": parts,
            "total_seconds": _round(total),
            "started_at": None,
            "missing": [UNIT_START] + list(MARKERS),
            "marks": {},
        }

    start = starts[-1]
    started = entries[start][0]
    found = _find_markers(entries, start)
    previous = started
    for part, marker in PARTS:
        if marker in found:
            stamp = entries[found[marker]][0]
            parts.append({"name": part, "seconds": _round(stamp - previous)})
            previous = stamp
    if ready is not None:
        ready_stamp = round(ready * MICROSECONDS)
        parts.append({"name": FIRST_COMPLETION, "seconds": _round(ready_stamp - previous)})
        previous = ready_stamp
    total += previous - started

    return {
        "parts": parts,
        "total_seconds": _round(total),
        "started_at": _round(started),
        "missing": [name for name in MARKERS if name not in found],
        "marks": {name: _round(entries[index][0]) for name, index in found.items()},
    }


# The part a rank is in once its API has started: the checked completion is awaited.
AWAITING_COMPLETION = FIRST_COMPLETION
# Before the unit's Started line.
NOT_STARTED = "waiting for the unit"


def start_phase(journal_text, now):
    """The part of its last start that a rank is in at the epoch O(now),
    from its journal as far as it goes: ``{"phase", "elapsed", "since"}``.

    ``phase`` is the part after the last one whose marker is logged (a marker
    an older vLLM does not log is skipped, as in start_timeline; the head is in
    ``first completion`` once its API started), or ``waiting for
    the unit`` before the unit's ``Started`` line (``elapsed`` is None then);
    ``elapsed`` counts the seconds since the unit started, ``since`` those
    since the last marker logged (the part's own time so far). Seconds are
    rounded to tenths; O(now) comes from the node's clock, as the journal's."""
    entries = _entries(_lines(journal_text))
    clock = _seconds(now, "now")
    if clock is None:
        raise EngineTimelineError("now must be the epoch, in seconds, of the journal's clock")
    starts = [index for index, (_stamp, line) in enumerate(entries) if UNIT_STARTED.search(line)]
    if not starts:
        return {"phase": NOT_STARTED, "elapsed": None, "since": None}
    start = starts[-1]
    found = _find_markers(entries, start)
    phase, last = PARTS[0][0], entries[start][0]
    for position, (_part, marker) in enumerate(PARTS):
        if marker in found:
            last = entries[found[marker]][0]
            phase = PARTS[position + 1][0] if position + 1 < len(PARTS) else AWAITING_COMPLETION
    now_us = round(clock * MICROSECONDS)
    return {
        "phase": phase,
        "elapsed": round(max(0, now_us - entries[start][0]) / MICROSECONDS, 1),
        "since": round(max(0, now_us - last) / MICROSECONDS, 1),
    }


def format_timeline(timeline):
    """One line of a O(timeline) from start_timeline, such as ``stop 4.1 s,
    startup 61.0 s, rendezvous 2.7 s, model load 0.0 s, engine init 10.5 s,
    first completion 1.2 s (total 79.5 s)``; the markers not found follow
    the total (``; not in the journal: distributed init``)."""
    try:
        parts = ["%s %.1f s" % (part["name"], float(part["seconds"])) for part in timeline["parts"]]
        total = float(timeline["total_seconds"])
        missing = [str(name) for name in timeline.get("missing") or ()]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise EngineTimelineError("not a timeline of engine_start_timeline: %.200r" % (timeline,)) from None
    tail = "total %.1f s" % total
    if missing:
        tail += "; not in the journal: %s" % ", ".join(missing)
    return "%s (%s)" % (", ".join(parts) or "no part timed", tail)
