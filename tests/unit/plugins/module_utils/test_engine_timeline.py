# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import calendar

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_timeline import (
    APPLICATION_STARTUP,
    DISTRIBUTED_INIT,
    ENGINE_INITIALISED,
    MODEL_LOAD_END,
    MODEL_LOAD_START,
    UNIT_STARTED,
    EngineTimelineError,
    format_timeline,
    parse_timestamp,
    start_phase,
    start_timeline,
)

# The head of the simulated cluster (vLLM 0.32 CPU build), as journalctl
# -u dgxspark-engine.service -o short-iso-precise printed it. A backslash at
# the end of a line continues it, so the text stays as printed within pep8's
# 160 columns (likewise below).
CPU_JOURNAL = """\
2026-12-03T16:14:58.314523+0000 spark1 systemd[1]: Started dgxspark-engine.service - dgxspark engine rank 0 (tiny, version 168ee1761a544f77).
2026-12-03T16:15:59.183407+0000 spark1 docker[4582]: (EngineCore pid=21) INFO 12-03 16:15:59 [core.py:133] Initializing a V1 LLM engine \
(v0.32.0+dgxspark.patched) with config: model='/models/tiny', ...
2026-12-03T16:16:07.294787+0000 spark1 docker[4582]: (Worker pid=29) INFO 12-03 16:16:07 [parallel_state.py:1906] world_size=4 rank=0 local_rank=0 \
distributed_init_method=tcp://192.168.100.11:29501 backend=gloo
2026-12-03T16:16:09.955854+0000 spark1 docker[4582]: (Worker_TP0 pid=29) INFO 12-03 16:16:09 [base_loader.py:82] Initializing model took 0.211906 seconds
2026-12-03T16:16:09.971946+0000 spark1 docker[4582]: (Worker_TP0 pid=29) INFO 12-03 16:16:09 [default_loader.py:501] Loading weights took 0.01 seconds
2026-12-03T16:16:19.729943+0000 spark1 docker[4582]: (EngineCore pid=21) INFO 12-03 16:16:19 [core.py:402] init engine (profile, create kv cache, \
warmup model) took 7.94 s
2026-12-03T16:16:20.217353+0000 spark1 docker[4582]: (APIServer pid=7) INFO 12-03 16:16:20 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000
2026-12-03T16:16:20.511924+0000 spark1 docker[4582]: INFO:     Application startup complete.
"""

# date -u -d 2026-12-03T16:14:58 +%s
CPU_START = 1796314498.314523
CPU_MARKS = {
    "distributed init": 1796314567.294787,
    "model load start": 1796314569.955854,
    "model load end": 1796314569.971946,
    "engine initialised": 1796314579.729943,
    "application startup": 1796314580.511924,
}
READY_AT = 1796314581.7

# A GPU rank as vLLM 0.32 logs it (gpu_model_runner.py, default_loader.py,
# core.py, uvicorn), with the +00:00 offset of newer journalctl and a
# speculative drafter whose weights load after the target's.
GPU_JOURNAL = """\
-- Boot 3c8e5e3b0a5c4f0c9d2f1a2b3c4d5e6f --
2026-12-03T16:20:00.000000+00:00 spark1 systemd[1]: Starting dgxspark-engine.service - dgxspark engine rank 0 (deepseek, version 0123456789abcdef)...
2026-12-03T16:20:00.500000+00:00 spark1 systemd[1]: Started dgxspark-engine.service - dgxspark engine rank 0 (deepseek, version 0123456789abcdef).
2026-12-03T16:20:30.250000+00:00 spark1 docker[811]: (EngineCore_DP0 pid=60) INFO 12-03 16:20:30 [core.py:133] Initializing a V1 LLM engine (v0.32.0) \
with config: model='/models/deepseek', ...
2026-12-03T16:20:41.000000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:20:41 [parallel_state.py:1906] world_size=4 rank=0 \
local_rank=0 distributed_init_method=tcp://192.168.100.11:29501 backend=nccl
2026-12-03T16:20:52.125000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:20:52 [parallel_state.py:1250] rank 0 in world size 4 is \
assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0
2026-12-03T16:20:53.000000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:20:53 [gpu_model_runner.py:5039] Starting to load model \
/models/deepseek...
2026-12-03T16:21:40.000000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:21:40 [default_loader.py:501] Loading weights took 45.60 seconds
2026-12-03T16:21:41.000000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:21:41 [gpu_model_runner.py:5073] Loading drafter model...
2026-12-03T16:21:44.000000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:21:44 [default_loader.py:501] Loading weights took 2.10 seconds
2026-12-03T16:21:45.500000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:21:45 [gpu_model_runner.py:5149] Model loading took 12.3 GiB \
memory and 52.345678 seconds
2026-12-03T16:22:10.000000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:22:10 [gpu_worker.py:440] Available KV cache memory: 80.12 GiB
2026-12-03T16:22:11.000000+00:00 spark1 docker[811]: Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 51/51 [00:18<00:00,  2.80it/s]
2026-12-03T16:22:31.000000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:22:31 [gpu_model_runner.py:6581] Graph capturing finished in \
20 secs, took 0.61 GiB
2026-12-03T16:22:32.000000+00:00 spark1 docker[811]: (EngineCore_DP0 pid=60) INFO 12-03 16:22:32 [core.py:396] init engine (profile, create kv cache, \
warmup model) took 46.50 s (compilation: 20.10 s)
2026-12-03T16:22:35.000000+00:00 spark1 docker[811]: (APIServer pid=1) INFO 12-03 16:22:35 [api_server.py:1200] Starting vLLM API server 0 on \
http://0.0.0.0:8000
2026-12-03T16:22:36.750000+00:00 spark1 docker[811]: INFO:     Application startup complete.
2026-12-03T16:22:38.000000+00:00 spark1 docker[811]: (APIServer pid=1) INFO:     192.168.100.1:51234 - "POST /v1/completions HTTP/1.1" 200 OK
"""
GPU_START = calendar.timegm((2026, 12, 3, 16, 20, 0, 0, 0, 0)) + 0.5


def names(timeline):
    return [part["name"] for part in timeline["parts"]]


def seconds(timeline):
    return {part["name"]: part["seconds"] for part in timeline["parts"]}


def assert_adds_up(timeline):
    assert sum(part["seconds"] for part in timeline["parts"]) == pytest.approx(timeline["total_seconds"], abs=1e-5)


def test_the_simulated_head_splits_into_every_part():
    timeline = start_timeline(CPU_JOURNAL, ready_at=READY_AT, stop_seconds=4.1)
    assert timeline["started_at"] == CPU_START
    assert timeline["missing"] == []
    assert timeline["marks"] == CPU_MARKS
    assert timeline["parts"] == [
        {"name": "stop", "seconds": 4.1},
        {"name": "startup", "seconds": 68.980264},
        {"name": "rendezvous", "seconds": 2.661067},
        {"name": "model load", "seconds": 0.016092},
        {"name": "engine init", "seconds": 10.539978},
        {"name": "first completion", "seconds": pytest.approx(1.188076, abs=1e-6)},
    ]
    assert timeline["total_seconds"] == pytest.approx(4.1 + READY_AT - CPU_START, abs=1e-6)
    assert_adds_up(timeline)
    assert format_timeline(timeline) == (
        "stop 4.1 s, startup 69.0 s, rendezvous 2.7 s, model load 0.0 s, engine init 10.5 s, "
        "first completion 1.2 s (total 87.5 s)"
    )


def test_the_journal_clock_counts_not_vllms_own_field():
    # vLLM's "INFO 12-03 16:16:07" is the container's clock, without a year
    # or a fraction; the journal's first field is the one to read.
    skewed = CPU_JOURNAL.replace("INFO 12-03 16:16:", "INFO 01-01 00:00:").replace("INFO 12-03 16:15:", "INFO 01-01 00:00:")
    assert skewed != CPU_JOURNAL
    assert start_timeline(skewed, READY_AT, 4.1) == start_timeline(CPU_JOURNAL, READY_AT, 4.1)


def test_lines_and_text_give_the_same_timeline():
    assert start_timeline(CPU_JOURNAL.splitlines(), READY_AT) == start_timeline(CPU_JOURNAL, READY_AT)


def test_a_gpu_start_loads_from_the_first_to_the_last_load_line():
    timeline = start_timeline(GPU_JOURNAL, ready_at=GPU_START + 160.0)
    assert timeline["started_at"] == GPU_START
    assert timeline["missing"] == []
    assert timeline["parts"] == [
        {"name": "startup", "seconds": 40.5},  # Started -> distributed_init_method=
        {"name": "rendezvous", "seconds": 12.0},  # -> Starting to load model
        {"name": "model load", "seconds": 52.5},  # -> Model loading took, after the drafter's weights
        {"name": "engine init", "seconds": 51.25},  # -> Application startup complete, graphs included
        {"name": "first completion", "seconds": 3.75},
    ]
    assert timeline["total_seconds"] == 160.0
    assert timeline["marks"]["engine initialised"] == GPU_START + 151.5
    assert_adds_up(timeline)
    assert format_timeline(timeline) == (
        "startup 40.5 s, rendezvous 12.0 s, model load 52.5 s, engine init 51.2 s, first completion 3.8 s (total 160.0 s)"
    )


def test_without_ready_at_the_timeline_ends_at_the_last_marker():
    timeline = start_timeline(GPU_JOURNAL)
    assert names(timeline) == ["startup", "rendezvous", "model load", "engine init"]
    assert timeline["total_seconds"] == 156.25
    assert_adds_up(timeline)


def test_only_the_last_start_counts():
    # The first start got as far as loading weights and failed; the second
    # one's lines must not borrow its distributed init.
    failed = "\n".join([  # noqa: FLY002  # one journal line per item reads better than one f-string
        "2026-12-03T16:00:00.000000+0000 spark1 systemd[1]: Started dgxspark-engine.service - dgxspark engine rank 0 (tiny).",
        "2026-12-03T16:00:20.000000+0000 spark1 docker[100]: (Worker pid=29) INFO 12-03 16:00:20 [parallel_state.py:1906] "
        "world_size=4 rank=0 local_rank=0 distributed_init_method=tcp://192.168.100.11:29501 backend=gloo",
        "2026-12-03T16:00:25.000000+0000 spark1 docker[100]: (Worker_TP0 pid=29) INFO 12-03 16:00:25 [default_loader.py:501] "
        "Loading weights took 0.01 seconds",
        "2026-12-03T16:00:30.000000+0000 spark1 docker[100]: INFO:     Application startup complete.",
        "2026-12-03T16:05:00.000000+0000 spark1 systemd[1]: dgxspark-engine.service: Main process exited, code=exited, status=1/FAILURE",
        "2026-12-03T16:05:00.100000+0000 spark1 systemd[1]: dgxspark-engine.service: Failed with result 'exit-code'.",
        "",
    ])
    without_init = "".join(line for line in CPU_JOURNAL.splitlines(True) if "distributed_init_method" not in line)
    timeline = start_timeline(failed + without_init, ready_at=READY_AT)
    assert timeline["started_at"] == CPU_START
    assert timeline["missing"] == ["distributed init"]
    assert timeline["parts"][0] == {"name": "rendezvous", "seconds": pytest.approx(71.641331, abs=1e-6)}
    assert start_timeline(failed + CPU_JOURNAL, READY_AT, 4.1) == start_timeline(CPU_JOURNAL, READY_AT, 4.1)


def test_a_missing_marker_gives_its_time_to_the_next_part():
    journal = "".join(line for line in CPU_JOURNAL.splitlines(True) if "distributed_init_method" not in line)
    timeline = start_timeline(journal, READY_AT, 4.1)
    assert names(timeline) == ["stop", "rendezvous", "model load", "engine init", "first completion"]
    assert seconds(timeline)["rendezvous"] == pytest.approx(68.980264 + 2.661067, abs=1e-6)
    assert timeline["total_seconds"] == start_timeline(CPU_JOURNAL, READY_AT, 4.1)["total_seconds"]
    assert timeline["missing"] == ["distributed init"]
    assert_adds_up(timeline)
    assert format_timeline(timeline).endswith("(total 87.5 s; not in the journal: distributed init)")


def test_an_engine_that_never_served_has_no_engine_init():
    journal = "".join(line for line in CPU_JOURNAL.splitlines(True) if "Application startup" not in line)
    timeline = start_timeline(journal, READY_AT)
    assert names(timeline) == ["startup", "rendezvous", "model load", "first completion"]
    assert seconds(timeline)["first completion"] == pytest.approx(READY_AT - CPU_MARKS["model load end"], abs=1e-6)
    assert timeline["missing"] == ["application startup"]
    assert "application startup" not in timeline["marks"]
    assert_adds_up(timeline)


def test_model_loading_took_alone_ends_the_load_and_only_it():
    # A GPU journal whose load start and weights lines are gone: the
    # rendezvous runs to "Model loading took", the model load is missing.
    journal = "".join(
        line for line in GPU_JOURNAL.splitlines(True)
        if "Starting to load model" not in line and "Loading weights took" not in line
    )
    timeline = start_timeline(journal)
    assert names(timeline) == ["startup", "model load", "engine init"]
    assert timeline["missing"] == ["model load start"]
    assert seconds(timeline)["model load"] == 64.5
    assert_adds_up(timeline)


def test_a_weights_reload_after_serving_is_no_part_of_the_start():
    later = (
        "2026-12-03T16:30:00.000000+00:00 spark1 docker[811]: (Worker_TP0 pid=75) INFO 12-03 16:30:00 "
        "[default_loader.py:501] Loading weights took 30.00 seconds\n"
    )
    assert start_timeline(GPU_JOURNAL + later) == start_timeline(GPU_JOURNAL)


def test_markers_before_the_start_do_not_count():
    journal = CPU_JOURNAL.splitlines(True)
    # The dist-init line of the start, moved before it: the journal went
    # backwards, the marker must not be used.
    moved = [journal[2]] + journal[:2] + journal[3:]
    timeline = start_timeline("".join(moved))
    assert timeline["missing"] == ["distributed init"]


def test_a_journal_without_a_start_times_only_the_stop():
    journal = "".join(line for line in CPU_JOURNAL.splitlines(True) if "Started dgxspark-engine" not in line)
    timeline = start_timeline(journal, READY_AT, 4.1)
    assert timeline == {
        "parts": [{"name": "stop", "seconds": 4.1}],
        "total_seconds": 4.1,
        "started_at": None,
        "missing": ["unit start", "distributed init", "model load start", "model load end", "application startup"],
        "marks": {},
    }
    assert format_timeline(timeline) == (
        "stop 4.1 s (total 4.1 s; not in the journal: unit start, distributed init, model load start, "
        "model load end, application startup)"
    )
    assert format_timeline(start_timeline("-- No entries --\n")).startswith("no part timed (total 0.0 s; ")


def test_another_units_start_is_not_the_engines():
    journal = CPU_JOURNAL.replace("Started dgxspark-engine.service", "Started dgxspark-engine-watchdog.service")
    assert start_timeline(journal)["started_at"] is None


def test_numbers_given_as_text_are_read():
    assert start_timeline(CPU_JOURNAL, str(READY_AT), " 4.1 ") == start_timeline(CPU_JOURNAL, READY_AT, 4.1)
    assert start_timeline(CPU_JOURNAL, int(READY_AT), 4)["parts"][0] == {"name": "stop", "seconds": 4.0}


@pytest.mark.parametrize(
    "args, message",
    [
        (({"stdout": CPU_JOURNAL},), "the journal must be the text of journalctl"),
        ((None,), "the journal must be the text of journalctl"),
        (([CPU_JOURNAL, 1],), "the journal must be the text of journalctl"),
        ((CPU_JOURNAL, "soon"), "ready_at must be a number of seconds"),
        ((CPU_JOURNAL, True), "ready_at must be a number of seconds"),
        ((CPU_JOURNAL, float("nan")), "ready_at must be a finite number"),
        ((CPU_JOURNAL, None, -1), "stop_seconds must not be negative"),
        ((CPU_JOURNAL, None, [4.1]), "stop_seconds must be a number of seconds"),
    ],
)
def test_bad_arguments_are_refused(args, message):
    with pytest.raises(EngineTimelineError, match=message):
        start_timeline(*args)


@pytest.mark.parametrize("timeline", [None, {}, {"parts": [{"name": "stop"}], "total_seconds": 1}, {"parts": 3}])
def test_format_refuses_what_is_not_a_timeline(timeline):
    with pytest.raises(EngineTimelineError, match="not a timeline of engine_start_timeline"):
        format_timeline(timeline)


@pytest.mark.parametrize(
    "line, epoch",
    [
        ("2026-12-03T16:14:58.314523+0000 spark1 x", 1796314498314523),
        ("2026-12-03T16:14:58.314523+00:00 spark1 x", 1796314498314523),
        ("2026-12-03T17:14:58.314523+0100 spark1 x", 1796314498314523),
        ("2026-12-03T11:44:58.314523-04:30 spark1 x", 1796314498314523),
        ("2026-12-03T16:14:58.314523Z spark1 x", 1796314498314523),
        ("2026-12-03T16:14:58.314523789+0000 spark1 x", 1796314498314523),
        ("2026-12-03T16:14:58.3+0000 spark1 x", 1796314498300000),
        ("2026-12-03T16:14:58+0000 spark1 x", 1796314498000000),
        ("-- Boot 3c8e5e3b0a5c4f0c9d2f1a2b3c4d5e6f --", None),
        ("Dec 03 16:14:58 spark1 systemd[1]: Started dgxspark-engine.service", None),
        ("2026-13-03T16:14:58.314523+0000 spark1 x", None),
        ("", None),
    ],
)
def test_journal_timestamps_are_read_in_microseconds(line, epoch):
    assert parse_timestamp(line) == epoch


@pytest.mark.parametrize(
    "pattern, message",
    [
        # vllm/distributed/parallel_state.py, logger.info in v0.32 (logger.debug before)
        (DISTRIBUTED_INIT, "world_size=%d rank=%d local_rank=%d distributed_init_method=%s backend=%s"
         % (4, 0, 0, "tcp://192.168.100.11:29501", "nccl")),
        # v1/worker/gpu_model_runner.py and cpu_model_runner.py
        (MODEL_LOAD_START, "Starting to load model %s..." % "/models/deepseek"),
        # model_executor/model_loader/base_loader.py
        (MODEL_LOAD_START, "Initializing model took %.6f seconds" % 0.211906),
        # model_executor/model_loader/default_loader.py
        (MODEL_LOAD_START, "Loading weights took %.2f seconds" % 45.6),
        (MODEL_LOAD_END, "Loading weights took %.2f seconds" % 45.6),
        # v1/worker/gpu_model_runner.py (v0.32) and older releases
        (MODEL_LOAD_END, "Model loading took %s GiB memory and %.6f seconds" % ("12.3", 52.3)),
        (MODEL_LOAD_END, "Model loading took %.4f GiB and %.6f seconds" % (12.3, 52.3)),
        # v1/engine/core.py
        (ENGINE_INITIALISED, "init engine (profile, create kv cache, warmup model) took %.2f s (compilation: %.2f s)"
         % (46.5, 20.1)),
        (ENGINE_INITIALISED, "init engine (profile, create kv cache, warmup model) took %.2f seconds" % 7.94),
        # uvicorn/lifespan/on.py
        (APPLICATION_STARTUP, "INFO:     Application startup complete."),
        (UNIT_STARTED, "spark1 systemd[1]: Started dgxspark-engine.service - dgxspark engine rank 0 (tiny)."),
    ],
)
def test_the_markers_match_what_vllm_logs(pattern, message):
    assert pattern.search(message)


@pytest.mark.parametrize(
    "pattern, message",
    [
        (DISTRIBUTED_INIT, "Initializing a V1 LLM engine (v0.32.0) with config: distributed_executor_backend=mp"),
        (MODEL_LOAD_START, "Loading drafter model..."),
        (MODEL_LOAD_END, "Loading drafter model..."),
        (APPLICATION_STARTUP, "Waiting for application startup."),
        (UNIT_STARTED, "spark1 systemd[1]: Starting dgxspark-engine.service - dgxspark engine rank 0 (tiny)..."),
        (UNIT_STARTED, "spark1 systemd[1]: Stopped dgxspark-engine.service - dgxspark engine rank 0 (tiny)."),
    ],
)
def test_the_markers_do_not_match_their_neighbours(pattern, message):
    assert not pattern.search(message)


# The phase a rank is in while it starts: its journal as far as it goes.
def _journal_until(marker_text):
    lines = CPU_JOURNAL.splitlines()
    (index,) = [position for position, line in enumerate(lines) if marker_text in line]
    return "\n".join(lines[:index + 1])


@pytest.mark.parametrize(("last_line", "phase", "last_mark"), [
    ("systemd[1]: Started", "startup", CPU_START),
    ("Initializing a V1 LLM engine", "startup", CPU_START),
    ("distributed_init_method=", "rendezvous", CPU_MARKS["distributed init"]),
    ("Initializing model took", "model load", CPU_MARKS["model load start"]),
    ("Loading weights took", "engine init", CPU_MARKS["model load end"]),
    ("Starting vLLM server", "engine init", CPU_MARKS["model load end"]),
    ("Application startup complete", "first completion", CPU_MARKS["application startup"]),
])
def test_a_starting_rank_is_in_the_part_after_its_last_marker(last_line, phase, last_mark):
    now = CPU_START + 100
    assert start_phase(_journal_until(last_line), now) == {
        "phase": phase, "elapsed": 100.0, "since": round(now - last_mark, 1)}


def test_a_marker_an_older_vllm_does_not_log_is_skipped():
    journal = "\n".join(line for line in CPU_JOURNAL.splitlines()[:4] if "distributed_init_method=" not in line)
    assert start_phase(journal, CPU_START + 80)["phase"] == "model load"


def test_before_its_unit_started_a_rank_waits_for_it():
    assert start_phase("-- No entries --\n", CPU_START) == {"phase": "waiting for the unit", "elapsed": None, "since": None}


def test_only_the_last_start_gives_the_phase():
    again = CPU_JOURNAL + "2026-12-03T16:30:00.000000+0000 spark1 systemd[1]: Started dgxspark-engine.service - again.\n"
    assert start_phase(again, calendar.timegm((2026, 12, 3, 16, 30, 10, 0, 0, 0)))["phase"] == "startup"


def test_a_phase_needs_the_time_now():
    with pytest.raises(EngineTimelineError, match="now must be"):
        start_phase(CPU_JOURNAL, None)
