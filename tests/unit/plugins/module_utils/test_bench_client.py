# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark client (module_utils/_bench_client.py) against a stand-in
of vLLM's OpenAI server: streaming, timeouts, the serving check."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from unit_support import serving

from ansible_collections.dgxspark.cluster.plugins.module_utils import _bench_client

KEY = "sk-test"


class Engine(BaseHTTPRequestHandler):
    """Tokens are words; each streamed token takes `delay` seconds."""

    delay = 0.0
    # Tokens streamed before the first visible text: empty text, as vLLM streams a
    # token whose bytes end inside a UTF-8 character.
    held_back = 0
    seen: ClassVar[list] = []
    vocabulary: ClassVar[dict] = {}

    def log_message(self, *args):
        pass

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/version":
            self._send(200, {"version": "0.32.0"})
        elif self.path == "/v1/models":
            self._send(200, {"data": [{"id": "tiny"}]})
        elif self.path == "/metrics":
            self._send(200, b'# HELP x\nvllm:prefix_cache_hits_total{engine="0"} 5.0\nvllm:other 1\n', "text/plain")
        else:
            self._send(404, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Engine.seen.append((self.path, self.headers.get("Authorization"), body))
        if self.path == "/tokenize":
            ids = [Engine.vocabulary.setdefault(word, len(Engine.vocabulary)) for word in body["prompt"].split()]
            self._send(200, {"count": len(ids), "tokens": ids})
        elif self.path == "/detokenize":
            words = {index: word for word, index in Engine.vocabulary.items()}
            self._send(200, {"prompt": " ".join(words[t] for t in body["tokens"])})
        elif self.path == "/v1/completions":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for index in range(body["max_tokens"]):
                time.sleep(self.delay)
                text = "" if index < self.held_back else " t%d" % index
                self.wfile.write(b"data: " + json.dumps({"choices": [{"text": text}]}).encode() + b"\n\n")
                self.wfile.flush()
            usage = {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": body["max_tokens"]}
            self.wfile.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\ndata: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True


@pytest.fixture
def engine():
    Engine.delay, Engine.held_back, Engine.seen = 0.0, 0, []
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Engine)) as server:
        yield "http://127.0.0.1:%d" % server.server_address[1]


def test_a_streamed_completion_is_timed_and_sent_as_the_benchmark_needs(engine):
    record = _bench_client.stream_completion(engine, "tiny", KEY, "a b c", 4, 10)
    assert record["ok"] and record["error"] is None
    assert record["completion_tokens"] == 4 and record["prompt_tokens"] == 3
    assert record["text"] == " t0 t1 t2 t3"
    assert 0 < record["ttft"] <= record["latency"]
    path, auth, body = Engine.seen[-1]
    assert (path, auth) == ("/v1/completions", "Bearer " + KEY)
    assert body["temperature"] == 0 and body["ignore_eos"] and body["min_tokens"] == 4 and body["stream"]


def test_tokens_streamed_as_empty_text_still_count_from_the_first(engine):
    """A random model's first tokens may all be partial UTF-8 characters: the request
    succeeded and its TTFT is the first token's arrival, not the first visible text."""
    Engine.delay, Engine.held_back = 0.05, 4
    record = _bench_client.stream_completion(engine, "tiny", KEY, "a b c", 4, 10)
    assert record["ok"] and record["error"] is None and record["text"] == ""
    assert 0.05 <= record["ttft"] < 0.1 and record["decode_seconds"] >= 0.1
    Engine.held_back = 2
    record = _bench_client.stream_completion(engine, "tiny", KEY, "a b c", 4, 10)
    assert record["text"] == " t2 t3" and record["ttft"] < 0.1


def test_a_request_past_its_timeout_fails_and_returns(engine):
    Engine.delay = 0.2
    start = time.monotonic()
    record = _bench_client.stream_completion(engine, "tiny", KEY, "a", 20, 0.5)
    assert time.monotonic() - start < 2
    assert not record["ok"] and record["error"] == "timeout after 0.5s"


def test_a_wave_with_a_too_short_timeout_reports_failures_and_finishes(engine):
    Engine.delay = 0.2
    spec = {"urls": [engine], "model": "tiny", "kind": "cold", "concurrency": 2, "prompt_tokens": 8,
            "max_tokens": 10, "timeout": 0.3, "seed": "s", "metric_names": ["vllm:prefix_cache"]}
    wave = _bench_client.run_wave(spec, KEY)
    assert [r["ok"] for r in wave["requests"]] == [False, False]
    assert wave["metrics_after"][engine]["lines"] == ['vllm:prefix_cache_hits_total{engine="0"} 5.0']
    assert wave["finished"] >= wave["started"]


def test_context_wave_sends_the_same_prompt_twice_and_cold_prompts_differ(engine):
    spec = {"urls": [engine], "model": "tiny", "kind": "context", "prompt_tokens": 6, "max_tokens": 2,
            "timeout": 5, "seed": "s", "metric_names": [], "repeats": 2}
    wave = _bench_client.run_wave(spec, KEY)
    assert [r["phase"] for r in wave["requests"]] == ["cold", "cache_hit", "cold", "cache_hit"]
    prompts = [body["prompt"] for path, _auth, body in Engine.seen if path == "/v1/completions"]
    assert prompts[0] == prompts[1] and prompts[2] == prompts[3] and prompts[0] != prompts[2]
    assert wave["requests"][0]["prompt_tokens"] == 6


def test_quality_wave_keeps_answers_and_does_not_force_the_length(engine):
    spec = {"urls": [engine], "model": "tiny", "kind": "quality", "concurrency": 2, "max_tokens": 3, "timeout": 5,
            "metric_names": [], "pairs": [{"prompt": "p1", "expect": "x"}, {"prompt": "p2", "expect": "y"},
                                          {"prompt": "p3", "expect": "z"}]}
    wave = _bench_client.run_wave(spec, KEY)
    assert [r["pair"] for r in wave["requests"]] == [0, 1, 2]
    assert all("ignore_eos" not in body for path, _a, body in Engine.seen if path == "/v1/completions")


def test_check_names_the_head_that_does_not_serve(engine):
    versions, problems = _bench_client.check([engine], "tiny", KEY, 2)
    assert versions == {engine: "0.32.0"} and problems == []
    _versions, problems = _bench_client.check([engine], "other", KEY, 2)
    assert problems == ["%s serves ['tiny'], not other" % engine]
    _versions, problems = _bench_client.check(["http://127.0.0.1:9"], "tiny", KEY, 2)
    assert problems[0].startswith("http://127.0.0.1:9: no engine answers")


def test_the_key_comes_from_a_file_and_check_exits_2(tmp_path, capsys):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    assert _bench_client.read_key(str(key_file)) == KEY
    assert _bench_client.main(["check", "--url", "http://127.0.0.1:9", "--model", "tiny", "--key-file", str(key_file)]) == 2
    assert "no engine answers" in capsys.readouterr().err


def test_sampler_writes_power_and_counters_until_stopped(tmp_path):
    port = tmp_path / "sys" / "class" / "infiniband" / "hca0" / "ports" / "1" / "counters"
    port.mkdir(parents=True)
    (port / "symbol_error").write_text("3\n")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 12.5\n")
    smi.chmod(0o755)
    stop = tmp_path / "stop"
    stop.write_text("")
    out = tmp_path / "samples.jsonl"
    assert _bench_client.main(["sample", "--out", str(out), "--stop-file", str(stop), "--nvidia-smi", str(smi),
                               "--sysfs-root", str(tmp_path / "sys"), "--link", "hca0:eth0"]) == 0
    sample = json.loads(out.read_text().splitlines()[0])
    assert sample["power"] == [12.5] and sample["counters"] == {"hca0/symbol_error": 3}
