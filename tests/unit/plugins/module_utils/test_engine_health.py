# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import _engine_health
from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_health import (
    EngineHealthError,
    api_answers,
    cluster_verdict,
    judge_completion,
    judge_models,
    probe,
    watch,
)
from unit_support import REPO_ROOT

ACTIVE = {"active": "active", "sub": "running", "result": "success", "status": ""}
FAILED = {"active": "failed", "sub": "failed", "result": "exit-code", "status": "1"}
SCRIPT = REPO_ROOT / "plugins" / "module_utils" / "_engine_health.py"


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeEngine(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible API: what vLLM answers, or its failures."""

    behaviour = {}

    def log_message(self, *args):
        pass

    def _reply(self, status, payload):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.behaviour.setdefault("auth", []).append(self.headers.get("Authorization"))
        if self.path == "/health":
            self._reply(self.behaviour.get("health", 200), {})
        elif self.path == "/v1/models":
            self._reply(200, {"object": "list", "data": [{"id": m} for m in self.behaviour.get("models", ["tiny"])]})
        else:
            self._reply(404, {})

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        request = json.loads(self.rfile.read(length))
        self.behaviour["last_request"] = request
        status = self.behaviour.get("completion_status", 200)
        self._reply(status, {"choices": [{"text": self.behaviour.get("text", " 42")}]} if status == 200 else {"error": "dead"})


@pytest.fixture
def engine():
    FakeEngine.behaviour = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1], FakeEngine.behaviour
    server.shutdown()


def api(url, **overrides):
    settings = {"base_url": url, "model": "tiny", "prompt": "17 + 25 =", "expect": r"\b42\b", "max_tokens": 4, "timeout": 5}
    settings.update(overrides)
    return settings


def test_judge_models_names_what_is_served():
    assert judge_models({"data": [{"id": "tiny"}]}, "tiny") is None
    assert judge_models({"data": [{"id": "other"}]}, "tiny") == "/v1/models lists other, not tiny"
    assert "without a data list" in judge_models({"error": "x"}, "tiny")


def test_judge_completion_checks_the_text():
    assert judge_completion({"choices": [{"text": " 42"}]}, r"\b42\b") == (" 42", None)
    text, problem = judge_completion({"choices": [{"text": " 41"}]}, r"\b42\b")
    assert text == " 41" and "does not match" in problem
    assert judge_completion({"choices": []}, ".")[1].startswith("the completion answered without choices")


def test_api_answers_ready_with_a_matching_completion(engine):
    url, behaviour = engine
    answer = api_answers(**api(url, api_key="k3y"))
    assert answer["ready"] is True and answer["text"] == " 42"
    assert behaviour["last_request"] == {"model": "tiny", "prompt": "17 + 25 =", "max_tokens": 4, "temperature": 0}
    assert set(behaviour["auth"]) == {"Bearer k3y"}


def test_api_answers_not_ready_when_health_is_fine_but_completions_fail(engine):
    url, behaviour = engine
    behaviour["completion_status"] = 500
    answer = api_answers(**api(url))
    assert answer == {"ready": False, "detail": "/v1/completions answered HTTP 500", "text": None}


def test_api_answers_not_ready_on_a_wrong_answer_or_model(engine):
    url, behaviour = engine
    behaviour["text"] = " banana"
    assert "does not match" in api_answers(**api(url))["detail"]
    behaviour["models"] = ["other"]
    assert api_answers(**api(url))["detail"] == "/v1/models lists other, not tiny"


def test_api_answers_not_ready_when_nothing_listens():
    answer = api_answers(**api("http://127.0.0.1:9", timeout=1))
    assert answer["ready"] is False and answer["detail"].startswith("/health:")


def test_probe_reports_a_stopped_unit_without_asking_the_api():
    looks = []
    report = probe("dgxspark-engine.service", {"x": 1}, units=lambda: FAILED, look=lambda: looks.append(1))
    assert report["ready"] is False and looks == []
    assert report["detail"] == "unit dgxspark-engine.service is failed (failed, result exit-code)"


def test_probe_waits_until_the_head_answers():
    clock = FakeClock()
    answers = iter([{"ready": False, "detail": "/health: refused", "text": None}] * 3
                   + [{"ready": True, "detail": "ok", "text": " 42"}])
    report = probe("u", {"x": 1}, wait=60, interval=5, clock=clock, sleep=clock.sleep,
                   units=lambda: ACTIVE, look=lambda: next(answers))
    assert report["ready"] is True and clock.now == 15


def test_probe_gives_up_after_its_wait():
    clock = FakeClock()
    report = probe("u", {"x": 1}, wait=12, interval=5, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE,
                   look=lambda: {"ready": False, "detail": "starting", "text": None})
    assert report["ready"] is False and report["detail"] == "starting" and clock.now == 12


def test_probe_stops_waiting_when_the_unit_dies():
    clock = FakeClock()
    states = iter([ACTIVE, ACTIVE, FAILED])
    report = probe("u", {"x": 1}, wait=600, interval=5, clock=clock, sleep=clock.sleep, units=lambda: next(states),
                   look=lambda: {"ready": False, "detail": "starting", "text": None})
    assert report["unit"] == FAILED and clock.now == 10


def test_watch_stops_the_rank_after_consecutive_failures_once_served(monkeypatch):
    stopped = []
    monkeypatch.setattr(_engine_health.subprocess, "run", lambda argv, check: stopped.append(argv))
    clock = FakeClock()
    good = {"ready": True, "detail": "ok", "text": " 42"}
    bad = {"ready": False, "detail": "/v1/completions answered HTTP 500", "text": None}
    answers = iter([bad, good, bad, good, bad, bad, bad])
    messages = []
    reason = watch("u.service", {"x": 1}, 15, 3, True, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE,
                   look=lambda: next(answers), log=messages.append)
    assert "HTTP 500" in reason and "half-alive" in reason
    assert stopped == [["systemctl", "stop", "--no-block", "u.service"]]
    # The failure before the first answer and the single one between answers did not count.
    assert [m for m in messages if m.startswith("look")] == [
        "look 1 of 3 failed: /v1/completions answered HTTP 500",
        "look 1 of 3 failed: /v1/completions answered HTTP 500",
        "look 2 of 3 failed: /v1/completions answered HTTP 500",
        "look 3 of 3 failed: /v1/completions answered HTTP 500",
    ]


def test_watch_ends_quietly_when_the_unit_stops(monkeypatch):
    monkeypatch.setattr(_engine_health.subprocess, "run", lambda *a, **k: pytest.fail("must not stop anything"))
    clock = FakeClock()
    states = iter([ACTIVE, FAILED])
    assert watch("u", {"x": 1}, 15, 3, True, clock=clock, sleep=clock.sleep, units=lambda: next(states),
                 look=lambda: {"ready": True, "detail": "ok", "text": "x"}, log=lambda m: None) is None


def probes(**overrides):
    base = {
        "spark1": {"unit": ACTIVE, "ready": True, "detail": "a completion answered ' 42'", "text": " 42"},
        "spark2": {"unit": ACTIVE, "ready": False, "detail": "unit u is active", "text": None},
        "spark3": {"unit": ACTIVE, "ready": False, "detail": "unit u is active", "text": None},
    }
    base.update(overrides)
    return base


def test_cluster_verdict_ready_when_all_units_run_and_the_head_answers():
    assert cluster_verdict(probes(), "spark1") == {"state": "ready", "problems": [], "ready_text": " 42"}


def test_cluster_verdict_names_every_rank_that_is_down():
    verdict = cluster_verdict(probes(spark3={"unit": FAILED, "ready": False, "detail": "unit u is failed (failed, result exit-code)"},
                                     spark2={"unit": {"active": "inactive"}, "detail": "unit u is inactive"}), "spark1")
    assert verdict["state"] == "failed"
    assert verdict["problems"] == ["spark2: unit u is inactive", "spark3: unit u is failed (failed, result exit-code)"]


def test_cluster_verdict_starting_while_the_head_does_not_answer():
    verdict = cluster_verdict(probes(spark1={"unit": ACTIVE, "ready": False, "detail": "/health: refused"}), "spark1")
    assert verdict == {"state": "starting", "problems": ["/health: refused"], "ready_text": None}


def test_cluster_verdict_needs_the_head():
    with pytest.raises(EngineHealthError, match="the head spark9"):
        cluster_verdict(probes(), "spark9")


def test_script_reads_the_api_key_from_the_secrets_file_and_never_prints_it(engine, tmp_path):
    url, behaviour = engine
    secrets = tmp_path / "secrets.env"
    secrets.write_text("VLLM_API_KEY=s3cr3t-key\n")
    systemctl = tmp_path / "systemctl"
    systemctl.write_text("#!/bin/sh\necho ActiveState=active\necho SubState=running\necho Result=success\n")
    systemctl.chmod(0o755)
    env = {"PATH": "%s:/usr/bin:/bin" % tmp_path}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--unit", "u", "--api-url", url, "--model", "tiny", "--expect", "42",
         "--secrets-file", str(secrets)],
        capture_output=True, text=True, env=env, check=True,
    )
    report = json.loads(result.stdout)
    assert report["ready"] is True and report["unit"]["active"] == "active"
    assert "s3cr3t" not in result.stdout + result.stderr
    assert "Bearer s3cr3t-key" in behaviour["auth"]
