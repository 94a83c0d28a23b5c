# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark's arithmetic (module_utils/_bench.py) and its PNG writer."""

from __future__ import annotations

import re
import struct
import zlib

import pytest

from unit_support import FIXTURES

from ansible_collections.dgxspark.cluster.plugins.module_utils import _bench
from ansible_collections.dgxspark.cluster.plugins.module_utils._png import line_plot

METRICS = (FIXTURES / "bench" / "vllm-cpu-metrics.txt").read_text()

# vLLM v1's speculative-decoding counters, in the exposition format of the
# CPU engine's own /metrics above (the CPU build runs no speculative method).
SPEC_LINES = """\
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="tiny"}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="tiny"}} {draft_tokens}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="tiny"}} {accepted}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="tiny",position="0"}} {accepted}
"""


def bumped(text, name, labels_pattern, increase):
    """text with the sample(s) of name whose labels match labels_pattern raised by increase."""
    def bump(match):
        return "%s %s" % (match.group(1), float(match.group(2)) + increase)
    return re.sub(r"^(%s\{[^}]*%s[^}]*\}) (\S+)$" % (re.escape(name), labels_pattern), bump, text, flags=re.MULTILINE)


def test_percentile_interpolates_like_numpy():
    assert _bench.percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert _bench.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert _bench.percentile([7.0], 0.95) == 7.0
    assert _bench.percentile([None, None], 0.5) is None


def test_real_metrics_parse_and_the_cpu_engine_drafts_nothing():
    samples = _bench.parse_prometheus(METRICS)
    assert _bench.counter_total(samples, "vllm:prefix_cache_hits") == 3200.0
    # finished_reason abort and error are not completed requests.
    assert _bench.counter_total(samples, "vllm:request_success", {"finished_reason": ("abort", "error")}) == 79.0
    deltas = _bench.metric_deltas(METRICS, METRICS)
    assert deltas["spec_decode_num_drafts"] is None
    assert deltas["prefix_cache_hits"] == 0.0
    assert _bench.spec_decode_stats(deltas) == {"acceptance_rate": None, "mean_accepted_length": None}


def test_acceptance_arithmetic_on_real_metrics_text():
    before = METRICS + SPEC_LINES.format(drafts=100.0, draft_tokens=300.0, accepted=150.0)
    after = METRICS + SPEC_LINES.format(drafts=140.0, draft_tokens=420.0, accepted=222.0)
    after = bumped(after, "vllm:prefix_cache_queries_total", "", 400)
    after = bumped(after, "vllm:prefix_cache_hits_total", "", 300)
    after = bumped(after, "vllm:num_preemptions_total", "", 2)
    after = bumped(after, "vllm:request_success_total", 'finished_reason="length"', 5)
    after = bumped(after, "vllm:request_success_total", 'finished_reason="abort"', 3)
    deltas = _bench.metric_deltas(before, after)
    stats = _bench.spec_decode_stats(deltas)
    # 72 accepted of 120 drafted tokens in 40 drafts.
    assert stats["acceptance_rate"] == pytest.approx(72 / 120)
    assert stats["mean_accepted_length"] == pytest.approx(1 + 72 / 40)
    assert _bench.prefix_cache_hit_rate(deltas) == pytest.approx(0.75)
    assert deltas["num_preemptions"] == 2
    assert deltas["request_success"] == 5
    # Two replica heads: the counters add up before the rates are taken.
    both = _bench.sum_deltas([deltas, deltas])
    assert both["spec_decode_num_draft_tokens"] == 240
    assert _bench.spec_decode_stats(both)["acceptance_rate"] == pytest.approx(0.6)


def request(ok=True, ttft=0.1, decode_seconds=1.0, tokens=11, phase=None, error=None, started=1000.0):
    return {"ok": ok, "ttft": ttft if ok else None, "decode_seconds": decode_seconds if ok else None,
            "completion_tokens": tokens if ok else 0, "prompt_tokens": 100 if ok else None, "phase": phase,
            "error": error, "started": started, "latency": 1.1 if ok else None, "text": "x"}


def wave(kind="cold", records=(), concurrency=2, started=1000.0, finished=1002.0, before=METRICS, after=METRICS,
         label=None, prime=None):
    return {"kind": kind, "label": label or kind, "concurrency": concurrency, "started": started, "finished": finished,
            "requests": list(records), "prime": prime, "metrics_before": {"http://h:8000": {"lines": before.splitlines()}},
            "metrics_after": {"http://h:8000": {"lines": after.splitlines()}}}


def test_wave_summary_counts_timeouts_as_failures():
    records = [request(ttft=0.1, decode_seconds=1.0), request(ttft=0.3, decode_seconds=0.5),
               request(ok=False, error="timeout after 5s")]
    after = bumped(METRICS, "vllm:request_success_total", 'finished_reason="length"', 3)
    summary = _bench.summarize_wave(wave(records=records, concurrency=3, after=after))
    assert (summary["success"], summary["total"]) == (2, 3)
    assert summary["ttft_p50"] == pytest.approx(0.2)
    assert summary["ttft_p95"] == pytest.approx(0.29)
    # 10 tokens after the first in 1.0 s and in 0.5 s.
    assert summary["decode_p50"] == pytest.approx(15.0)
    # 22 tokens of the two good requests over the 2 s wave.
    assert summary["aggregate_tps"] == pytest.approx(11.0)
    assert summary["errors"] == ["timeout after 5s"]
    # Three completions in the engine, two of them ours: one health probe.
    assert summary["other_requests"] == 1
    line = _bench.wave_line(wave(records=records, concurrency=3, after=after))
    assert line.startswith("cold C=3: 2/3 ok, TTFT p50 0.200s, decode p50 15.00 tok/s, aggregate 11.00 tok/s")
    assert "timeout after 5s" in line


def test_power_and_nic_errors_are_taken_from_the_samples_inside_the_wave():
    samples = {
        "n1": [{"t": 999.0, "power": [10.0], "counters": {"hca/symbol_error": 1}},
               {"t": 1000.5, "power": [20.0], "counters": {"hca/symbol_error": 1}},
               {"t": 1001.5, "power": [30.0], "counters": {"hca/symbol_error": 4}},
               {"t": 1003.0, "power": [99.0], "counters": {"hca/symbol_error": 6}}],
        "n2": [{"t": 1001.0, "power": [5.0, 7.0], "counters": {}}],
    }
    power, per_host = _bench.wave_power(samples, 1000.0, 1002.0)
    assert per_host["n1"] == {"watts": 25.0, "samples": 2}
    assert power == pytest.approx(25.0 + 12.0)
    assert _bench.wave_nic_errors(samples, 1000.0, 1002.0) == {"n1:hca/symbol_error": 5}
    # A wave between two samples takes the nearest one.
    assert _bench.wave_power({"n1": samples["n1"]}, 1000.9, 1001.0)[0] == 20.0
    assert _bench.wave_power({"n1": [{"t": 1.0, "power": [], "counters": {}}]}, 0, 2)[0] is None


def raw_run(profile="field", answers=("42",)):
    context = [request(phase="cold", ttft=0.5), request(phase="cache_hit", ttft=0.1)]
    cold = [request(ttft=0.2), request(ttft=0.4)]
    quality = [dict(request(), pair=0, text=answers[0])]
    hits = bumped(bumped(METRICS, "vllm:prefix_cache_queries_total", "", 200), "vllm:prefix_cache_hits_total", "", 100)
    return {
        "meta": {"name": "run-%s" % profile, "date": "20260101T000000Z", "layout": "tp4x1", "tool": "client",
                 "engine_versions": {"http://h:8000": "0.32.0"}, "image_ref": "img@sha256:1", "image_id": "sha256:2",
                 "model": "m", "model_revision": "abc", "deployed_version": "v1", "prompt_source": "synthetic",
                 "bench_host": "spark1", "engine_argv": ["vllm", "serve", "m"]},
        "config": {"profile": profile, "max_tokens": 11, "quality_pairs": [{"prompt": "12+30=", "expect": r"\b42\b"}]},
        "waves": [wave("context", context, 1, label="ctx 1000", after=hits), wave("cold", cold, 2),
                  wave("quality", quality, 2)],
        "samples": {"spark1": '{"t": 1001, "power": [4.0], "counters": {}}\n{"t": 10'},
    }


def test_report_tables_come_from_the_raw_run():
    raw = raw_run()
    summary = _bench.build_summary(raw)
    text = _bench.markdown(raw, summary)
    assert summary["quality_passed"] and not summary["spec_decode_measured"]
    assert "not measured: no speculative decoding" in text
    # Cold prime vs cache hit: 100 prompt tokens / TTFT.
    assert "| ctx 1000 | Cold prime | 1/1 | 0.500s | 200 tok/s | 10.00 tok/s |" in text
    assert "| ctx 1000 | KV cache hit | 1/1 | 0.100s | 1000 tok/s | 10.00 tok/s |" in text
    assert "| 2 | 2/2 | 0.300s / 0.390s | 10.00 tok/s | 11.00 | — | 4.0 W |" in text
    assert "| ctx 1000 | 1 | — | — | 50.00% | 0 | 0 | 4.0 W | 0 |" in text
    assert "| Image ID | sha256:2 |" in text and "`vllm serve m`" in text
    assert "passed" in text


def test_a_wrong_answer_fails_the_quality_gate():
    raw = raw_run(answers=("41",))
    summary = _bench.build_summary(raw)
    assert not summary["quality_passed"]
    assert summary["quality"][0]["answer"] == "41"
    assert "| 12+30= | `\\b42\\b` | 41 | WRONG |" in _bench.markdown(raw, summary)


def test_png_is_a_valid_image_with_the_lines_drawn():
    data = line_plot([("a", [(1, 10.0), (2, 20.0), (4, None)], False), ("b", [(1, 5.0), (4, 8.0)], True)],
                     "T", "C", "TOK/S", width=200, height=120)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (200, 120)
    length = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT"
    pixels = zlib.decompress(data[41:41 + length])
    assert len(pixels) == height * (1 + 3 * width)
    # The first series' colour is on the canvas.
    assert bytes((31, 119, 180)) in pixels


def test_llama_benchy_command_line_has_the_profile_and_never_the_key():
    settings = {"base_url": "http://h:8000/v1", "model": "org/m", "served_model_name": "m", "tokenizer": "/srv/m",
                "result_file": "/tmp/r.json", "runs": 3, "latency_mode": "api", "pp": [2048], "tg": [128],
                "depth": [0, 4096], "concurrency": [1, 2, 5, 10], "prefix_caching": True, "exact_tg": True,
                "book_url": "https://example/book.txt", "extra_args": ["--no-warmup"]}
    args = _bench.llama_benchy_args(settings)
    assert args[args.index("--depth") + 1:args.index("--depth") + 3] == ["0", "4096"]
    assert args[args.index("--concurrency") + 1:args.index("--concurrency") + 5] == ["1", "2", "5", "10"]
    assert "--enable-prefix-caching" in args and "--exact-tg" in args and args[-1] == "--no-warmup"
    assert args[args.index("--tokenizer") + 1] == "/srv/m"
    assert args[args.index("--format") + 1] == "json"
    assert "--api-key" not in args
    with pytest.raises(_bench.BenchError, match="bench_community_pp is empty"):
        _bench.llama_benchy_args(dict(settings, pp=[]))


LLAMA_BENCHY_JSON = {
    "version": "0.4.0", "timestamp": "2026-07-01 10:00:00", "latency_mode": "api", "latency_ms": 1.2, "model": "org/m",
    "prefix_caching_enabled": True, "max_concurrency": 2,
    "benchmarks": [
        {"concurrency": 2, "context_size": 4096, "prompt_size": 2048, "response_size": 128,
         "is_context_prefill_phase": False,
         "pp_throughput": {"mean": 3000.0, "std": 10.0, "values": [2990.0, 3010.0]},
         "pp_req_throughput": {"mean": 1500.0, "std": 5.0, "values": [1500.0]},
         "tg_throughput": {"mean": 80.0, "std": 1.0, "values": [80.0]},
         "tg_req_throughput": {"mean": 40.0, "std": 0.5, "values": [40.0]},
         "e2e_ttft": {"mean": 700.0, "std": 20.0, "values": [700.0]}},
        {"concurrency": 2, "context_size": 4096, "prompt_size": 2048, "response_size": 128,
         "is_context_prefill_phase": True, "pp_throughput": {"mean": 2500.0, "std": 0.0, "values": [2500.0]},
         "e2e_ttft": None, "tg_throughput": None},
    ],
}


def test_llama_benchy_json_rows_use_its_notation():
    rows = _bench.llama_benchy_rows(LLAMA_BENCHY_JSON)
    assert [r["test"] for r in rows] == ["pp2048 @ d4096 (c2)", "tg128 @ d4096 (c2)", "ctx_pp @ d4096 (c2)"]
    assert rows[0]["ttft_ms"] == 700.0 and rows[1]["tps_req"] == 40.0
    text = _bench.llama_benchy_markdown(LLAMA_BENCHY_JSON)
    assert "| pp2048 @ d4096 (c2) | 3000.00 ± 10.00 | 1500.00 | 700 ms |" in text
    with pytest.raises(_bench.BenchError, match="no list 'benchmarks'"):
        _bench.llama_benchy_rows({"runs": []})
