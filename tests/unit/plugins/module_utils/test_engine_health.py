# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import functools
import itertools
import json
import socket
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from unit_support import REPO_ROOT, serving

from ansible_collections.dgxspark.cluster.plugins.module_utils import _engine_health
from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_health import (
    EngineHealthError,
    RestartBudget,
    api_address,
    api_answers,
    cluster_verdict,
    follow,
    judge_completion,
    judge_models,
    main,
    port_accepts,
    probe,
    rejoin,
    restarts_in_window,
    watch,
)

ACTIVE = {"active": "active", "sub": "running", "result": "success", "status": ""}
FAILED = {"active": "failed", "sub": "failed", "result": "exit-code", "status": "1"}
ACCEPTS = {"ready": True, "detail": "port 8000 of 10.0.0.11 accepts connections"}
REFUSED = {"ready": False, "detail": "port 8000 of 10.0.0.11: [Errno 111] Connection refused"}
HEAD = ("10.0.0.11", 8000)
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

    behaviour: ClassVar[dict] = {}  # reset by the engine fixture, shared by the handler instances

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
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), FakeEngine)) as server:
        yield "http://127.0.0.1:%d" % server.server_address[1], FakeEngine.behaviour


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


def test_probe_looks_at_least_every_two_seconds_while_waiting():
    clock = FakeClock()
    looks = []

    def look():
        looks.append(clock.now)
        return {"ready": False, "detail": "starting", "text": None}

    probe("u", {"x": 1}, wait=9, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE, look=look)
    assert looks == [0, 2, 4, 6, 8, 9]


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


def test_watch_looks_often_until_the_engine_has_served_then_at_its_interval(systemctl_stop):
    clock = FakeClock()
    good = {"ready": True, "detail": "ok", "text": " 42"}
    bad = {"ready": False, "detail": "/health: connection refused", "text": None}
    answers = iter([bad, bad, good, bad, bad])
    looks = []

    def look():
        looks.append(clock.now)
        return next(answers)

    reason = watch("u", {"x": 1}, 60, 2, True, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE,
                   look=look, log=lambda m: None)
    assert "half-alive" in reason
    # Every STARTING_INTERVAL (5 s) while the engine starts, then every 60 s: a rank that
    # dies right after the start is not left unwatched for a whole interval.
    gaps = [round(b - a, 3) for a, b in itertools.pairwise(looks)]
    assert gaps == [5.0, 5.0, 60.0, 60.0]


def test_watch_ends_quietly_when_the_unit_stops(monkeypatch):
    monkeypatch.setattr(_engine_health.subprocess, "run", lambda *a, **k: pytest.fail("must not stop anything"))
    clock = FakeClock()
    states = iter([ACTIVE, FAILED])
    assert watch("u", {"x": 1}, 15, 3, True, clock=clock, sleep=clock.sleep, units=lambda: next(states),
                 look=lambda: {"ready": True, "detail": "ok", "text": "x"}, log=lambda m: None) is None


@pytest.fixture
def systemctl_stop(monkeypatch):
    """The units the watchdog stopped, instead of stopping them."""
    stopped = []
    monkeypatch.setattr(_engine_health.subprocess, "run", lambda argv, check: stopped.append(argv))
    return stopped


@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server
    server.close()


def test_api_address_is_host_and_port_of_the_url():
    assert api_address("http://10.0.0.11:8000") == ("10.0.0.11", 8000)
    assert api_address("http://[fd00::11]:8000/") == ("fd00::11", 8000)
    assert api_address("https://head.example") == ("head.example", 443)
    with pytest.raises(EngineHealthError, match="names no host"):
        api_address("10.0.0.11:8000")


def test_port_accepts_sends_nothing_and_sees_a_closed_port(listening_port):
    host, port = listening_port.getsockname()
    assert port_accepts(host, port, 1) == {"ready": True, "detail": "port %d of 127.0.0.1 accepts connections" % port}
    connection, _peer = listening_port.accept()
    with connection:
        assert connection.recv(1) == b"", "the look must close the connection without a request"
    listening_port.close()
    answer = port_accepts(host, port, 1)
    assert answer["ready"] is False and "refused" in answer["detail"]


def test_follow_never_stops_the_rank_before_the_head_has_accepted(systemctl_stop):
    clock = FakeClock()
    states = iter([ACTIVE] * 50 + [FAILED])
    messages = []
    assert follow("u.service", HEAD, 5, 3, True, clock=clock, sleep=clock.sleep, units=lambda: next(states),
                  connect=lambda: REFUSED, log=messages.append) is None
    assert systemctl_stop == [] and clock.now == 250
    assert messages[1:] == ["unit u.service is failed; watchdog ends"]


def test_follow_stops_the_rank_after_consecutive_refusals_and_a_success_resets_the_count(systemctl_stop):
    clock = FakeClock()
    looks = iter([REFUSED, ACCEPTS, REFUSED, REFUSED, ACCEPTS, REFUSED, REFUSED, REFUSED])
    messages = []
    reason = follow("u.service", HEAD, 5, 3, True, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE,
                    connect=lambda: next(looks), log=messages.append)
    assert reason == ("the cluster stopped serving (port 8000 of 10.0.0.11: [Errno 111] Connection refused); "
                      "stopping rank unit u.service so that no rank is left half-alive")
    assert systemctl_stop == [["systemctl", "stop", "--no-block", "u.service"]]
    assert clock.now == 35, "the eighth look, 35 s after the first, stops the rank"
    assert [m.split(":")[0] for m in messages[1:]] == [
        "the engine serves", "look 1 of 3 failed", "look 2 of 3 failed",
        "the engine serves", "look 1 of 3 failed", "look 2 of 3 failed", "look 3 of 3 failed",
        "the cluster stopped serving (port 8000 of 10.0.0.11",
    ]


def test_follow_with_no_stop_reports_without_stopping(systemctl_stop):
    clock = FakeClock()
    looks = iter([ACCEPTS, REFUSED, REFUSED])
    reason = follow("u", HEAD, 5, 2, False, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE,
                    connect=lambda: next(looks), log=lambda m: None)
    assert "half-alive" in reason and systemctl_stop == []


def test_follow_ends_when_the_unit_stops_by_itself(systemctl_stop):
    clock = FakeClock()
    states = iter([ACTIVE, ACTIVE, ACTIVE, {"active": "inactive", "sub": "dead", "result": "success", "status": "0"}])
    looks = iter([ACCEPTS, REFUSED, REFUSED])
    messages = []
    assert follow("u", HEAD, 5, 3, True, clock=clock, sleep=clock.sleep, units=lambda: next(states),
                  connect=lambda: next(looks), log=messages.append) is None
    assert systemctl_stop == [] and messages[-1] == "unit u is inactive; watchdog ends"


def test_follow_logs_state_changes_not_looks(systemctl_stop):
    clock = FakeClock()
    states = iter([ACTIVE] * 100 + [FAILED])
    messages = []
    follow("u", HEAD, 5, 3, True, clock=clock, sleep=clock.sleep, units=lambda: next(states),
           connect=lambda: ACCEPTS, log=messages.append)
    assert messages == [
        "watchdog of u: looks at port 8000 of the head 10.0.0.11 every 5 s; "
        "once it has accepted, 3 failed looks in a row stop the unit",
        "the engine serves: port 8000 of 10.0.0.11 accepts connections",
        "unit u is failed; watchdog ends",
    ]


def test_follow_keeps_its_pace_when_a_look_is_slow(systemctl_stop):
    clock = FakeClock()
    states = iter([ACTIVE] * 3 + [FAILED])
    looks = []

    def slow_connect():
        looks.append(clock.now)
        clock.now += 4
        return REFUSED

    follow("u", HEAD, 5, 3, True, clock=clock, sleep=clock.sleep, units=lambda: next(states),
           connect=slow_connect, log=lambda m: None)
    assert looks == [0, 5, 10]


def test_follow_sees_the_head_close_its_port(listening_port):
    host, port = listening_port.getsockname()
    reason = follow("u", (host, port), 0.5, 2, False, sleep=lambda seconds: listening_port.close(),
                    units=lambda: ACTIVE, log=lambda m: None)
    assert reason.startswith("the cluster stopped serving (port %d of 127.0.0.1: " % port)
    assert "Connection refused" in reason


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


@pytest.mark.parametrize("argv, problem", [
    (["--watch", "--follow", "--api-url", "http://10.0.0.11:8000", "--model", "tiny"], "not allowed with argument"),
    (["--follow"], "--follow needs --api-url"),
    (["--watch"], "--watch needs --api-url"),
    (["--follow", "--api-url", "10.0.0.11:8000"], "names no host"),
    (["--api-url", "http://10.0.0.11:8000"], "--api-url needs --model"),
    (["--watch", "--api-url", "http://10.0.0.11:8000", "--model", "tiny", "--restarts", "2"],
     "--restarts needs --restart-log"),
    (["--rejoin", "--api-url", "http://10.0.0.11:8000"], "--rejoin needs --master"),
    (["--follow", "--api-url", "http://10.0.0.11:8000", "--rejoin-wait", "60"], "--rejoin-wait needs --master"),
    (["--follow", "--api-url", "http://10.0.0.11:8000", "--master", "10.0.0.11"], "'10.0.0.11' is not HOST:PORT"),
])
def test_script_refuses_contradicting_or_incomplete_arguments(argv, problem, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--unit", "u"] + argv)
    assert exit_info.value.code == 2
    assert problem in capsys.readouterr().err


def test_script_follows_the_head_without_a_model_or_secrets(tmp_path, listening_port):
    # A systemctl that reports the unit active twice, then stopped.
    systemctl = tmp_path / "systemctl"
    systemctl.write_text("#!/bin/sh\n"
                         "echo look >> %s/calls\n"
                         "if [ $(wc -l < %s/calls) -le 2 ]; then state=active; else state=inactive; fi\n"
                         "echo ActiveState=$state\n" % (tmp_path, tmp_path))
    systemctl.chmod(0o755)
    host, port = listening_port.getsockname()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--unit", "u", "--api-url", "http://%s:%d" % (host, port), "--follow",
         "--interval", "0.1"],
        capture_output=True, text=True, env={"PATH": "%s:/usr/bin:/bin" % tmp_path}, check=False, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == [
        "the engine serves: port %d of 127.0.0.1 accepts connections" % port,
        "unit u is inactive; watchdog ends",
    ]


def test_the_installed_probe_reports_the_part_of_the_start_its_rank_is_in(tmp_path):
    # As the role installs them: both files side by side, nothing of the collection on the path.
    libexec = tmp_path / "libexec"
    libexec.mkdir()
    module_utils = REPO_ROOT / "plugins" / "module_utils"
    (libexec / "engine_health.py").write_text((module_utils / "_engine_health.py").read_text())
    (libexec / "engine_timeline.py").write_text((module_utils / "_engine_timeline.py").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text("#!/bin/sh\necho ActiveState=active\necho SubState=running\n")
    # The journal since the start: the unit started 30 s ago and the rank has joined the process group.
    (bin_dir / "journalctl").write_text(
        "#!/bin/sh\necho \"$@\" > %s/journalctl-args\n"
        "now=$(date +%%s)\n"
        "stamp() { date -u -d @$(($now - $1)) +%%Y-%%m-%%dT%%H:%%M:%%S.000000+0000; }\n"
        "echo \"$(stamp 30) spark2 systemd[1]: Started dgxspark-engine.service - dgxspark engine rank 1.\"\n"
        "echo \"$(stamp 10) spark2 docker[5]: INFO [parallel_state.py:1] distributed_init_method=tcp://10.0.0.11:29501\"\n"
        % tmp_path)
    for tool in ("systemctl", "journalctl"):
        (bin_dir / tool).chmod(0o755)
    result = subprocess.run(
        [sys.executable, str(libexec / "engine_health.py"), "--unit", "u", "--journal-since", "1796314493"],
        capture_output=True, text=True, env={"PATH": "%s:/usr/bin:/bin" % bin_dir}, check=True, cwd=tmp_path,
    )
    report = json.loads(result.stdout)
    assert report["unit"]["active"] == "active"
    assert report["phase"]["phase"] == "rendezvous"
    assert 29 <= report["phase"]["elapsed"] <= 33 and 9 <= report["phase"]["since"] <= 13
    assert (tmp_path / "journalctl-args").read_text().split() == [
        "--unit", "u", "--since", "@1796314493", "--no-pager", "--output", "short-iso-precise"]


def test_a_journal_that_cannot_be_read_gives_an_unknown_phase_not_a_failed_probe():
    def unreadable():
        raise OSError("journalctl: not found")

    assert _engine_health.start_phase("u", 0, journal=unreadable) == {
        "phase": "unknown", "elapsed": None, "since": None, "detail": "journalctl: not found"}
    assert _engine_health.start_phase("u", 0, journal=lambda: "", clock=lambda: 5.0)["phase"] == "waiting for the unit"


# --- Automatic restarts of a wedged head, and the other ranks' rejoin -------------------

GOOD = {"ready": True, "detail": "ok", "text": " 42"}
TIMED_OUT = {"ready": False, "detail": "/v1/completions: timed out", "text": None}


@pytest.fixture
def systemctl_calls(monkeypatch):
    """Every command the watchdog ran, each answered with success."""
    calls = []

    def run(argv, check):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0)
    monkeypatch.setattr(_engine_health.subprocess, "run", run)
    return calls


def test_restarts_in_window_counts_the_recent_epochs_and_skips_what_is_not_one():
    assert restarts_in_window("100.5\nnot a time\n\n3000\n3500 note\n", 3600, 3600) == [100.5, 3000.0, 3500.0]
    assert restarts_in_window("0\n100\n3601\n3700.0004\n", 3700, 3600) == [3601.0, 3700.0004]
    assert restarts_in_window("", 10, 3600) == []


def test_the_budget_allows_its_restarts_within_the_window_then_refuses_until_they_age_out(tmp_path):
    now = [1000.0]
    log = tmp_path / "state" / "restarts.log"
    budget = RestartBudget(str(log), 2, 3600, clock=lambda: now[0])
    assert budget.spend() == (True, 1)
    now[0] = 2000.0
    assert budget.spend() == (True, 2)
    now[0] = 4000.0
    assert budget.spend() == (False, 2)
    assert log.read_text() == "1000.000\n2000.000\n", "a refused restart is not recorded"
    now[0] = 4601.0  # the first restart is more than an hour old
    assert budget.spend() == (True, 2)
    assert log.read_text() == "2000.000\n4601.000\n", "only the restarts within the window are kept"


def test_watch_restarts_a_wedged_head_within_its_budget_then_stops_it(tmp_path, systemctl_calls):
    budget = RestartBudget(str(tmp_path / "restarts.log"), 1, 3600)
    reasons, messages = [], []
    for _run in range(2):
        clock = FakeClock()
        answers = iter([GOOD, TIMED_OUT, TIMED_OUT])
        reasons.append(watch("u.service", {"x": 1}, 15, 2, True, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE,
                             look=functools.partial(next, answers), log=messages.append, budget=budget))
    assert systemctl_calls == [["systemctl", "restart", "--no-block", "u.service"],
                               ["systemctl", "stop", "--no-block", "u.service"]]
    assert reasons[0] == ("the cluster stopped serving (/v1/completions: timed out); restarting rank unit u.service, "
                          "automatic restart 1 of 1 within 3600 s")
    assert reasons[1].startswith("the cluster stopped serving (/v1/completions: timed out) and the watchdog's restart "
                                 "budget is spent (1 automatic restarts in the last 3600 s); stopping rank unit u.service")
    assert "stays stopped until site.yml or restart.yml starts it" in reasons[1]
    assert messages[0] == ("watchdog of u.service: a checked completion every 15 s; once the engine has served, 2 failed "
                           "looks in a row restart the unit, at most 1 times within 3600 s, then stop it")


def test_watch_without_restarts_stops_the_head_as_before(systemctl_calls):
    clock = FakeClock()
    answers = iter([GOOD, TIMED_OUT])
    reason = watch("u", {"x": 1}, 15, 1, True, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE,
                   look=lambda: next(answers), log=lambda m: None, budget=None)
    assert "half-alive" in reason and systemctl_calls == [["systemctl", "stop", "--no-block", "u"]]


@pytest.mark.parametrize("watchdog", ["watch", "follow"])
def test_a_cluster_that_never_serves_is_stopped_after_the_bound_never_restarted_or_rejoined(
        watchdog, tmp_path, systemctl_calls):
    clock = FakeClock()
    messages = []
    common = {"clock": clock, "sleep": clock.sleep, "units": lambda: ACTIVE, "log": messages.append,
              "serve_within": 60}
    if watchdog == "watch":
        reason = watch("u", {"x": 1}, 15, 2, True, look=lambda: TIMED_OUT,
                       budget=RestartBudget(str(tmp_path / "r.log"), 2, 3600), **common)
    else:
        reason = follow("u", HEAD, 5, 2, True, connect=lambda: REFUSED, rejoin_argv=["systemd-run", "rejoin"], **common)
    assert reason == ("the cluster did not serve within 60 s of this rank's start; stopping rank unit u so that no "
                      "rank is left half-alive")
    assert systemctl_calls == [["systemctl", "stop", "--no-block", "u"]]
    assert clock.now == 60, "looked every 5 s until the bound"
    assert not (tmp_path / "r.log").exists()


def test_follow_starts_the_rejoin_before_it_stops_its_rank(systemctl_calls):
    clock = FakeClock()
    looks = iter([ACCEPTS, REFUSED, REFUSED])
    reason = follow("u", HEAD, 5, 2, True, clock=clock, sleep=clock.sleep, units=lambda: ACTIVE,
                    connect=lambda: next(looks), log=lambda m: None, rejoin_argv=["systemd-run", "--unit", "u-rejoin"])
    assert "half-alive" in reason
    assert systemctl_calls == [["systemd-run", "--unit", "u-rejoin"], ["systemctl", "stop", "--no-block", "u"]]


MASTER = ("10.0.0.11", 29501)


def _rejoin(units, master, api, wait=30):
    clock = FakeClock()
    states, masters, apis = iter(units), iter(master), iter(api)
    messages = []

    def connect(address):
        return {"ready": next(masters if address == MASTER else apis), "detail": ""}
    result = rejoin("u", MASTER, HEAD, wait, interval=2, clock=clock, sleep=clock.sleep, connect=connect,
                    units=lambda: {"active": next(states)}, log=messages.append)
    return result, clock.now, messages


def test_rejoin_starts_the_rank_once_it_stopped_and_the_heads_rendezvous_port_is_back(systemctl_calls):
    # Still running (the follower's stop is under way), then stopped; the old head's ports are
    # closed, then its restart listens for the rendezvous before its API.
    result, seconds, messages = _rejoin(["active", "deactivating", "inactive", "inactive", "failed"],
                                        master=[False, True], api=[False])
    assert result == "started" and seconds == 6
    assert systemctl_calls == [["systemctl", "start", "--no-block", "u"]]
    assert messages[-1] == "port 29501 of the head 10.0.0.11 accepts again: starting rank unit u to rejoin the head's start"


def test_rejoin_leaves_a_serving_head_alone_and_a_rank_started_meanwhile(systemctl_calls):
    # The rendezvous port accepts while the API answers: that cluster serves without this rank.
    result, _seconds, messages = _rejoin(["inactive"] * 16, master=[True] * 16, api=[True] * 16)
    assert result is None and systemctl_calls == []
    assert messages[-1] == ("the head did not come back within 30 s; rank unit u stays stopped until site.yml or "
                            "restart.yml starts it")
    result, _seconds, messages = _rejoin(["inactive", "activating"], master=[False], api=[])
    assert result == "running" and systemctl_calls == []
    assert messages[-1] == "unit u was started meanwhile; the rejoin ends"


def test_the_rejoin_runs_as_a_transient_unit_with_the_followers_addresses():
    args = _engine_health._argument_parser().parse_args(
        ["--unit", "dgxspark-engine.service", "--api-url", "http://10.0.0.11:8000", "--follow",
         "--master", "10.0.0.11:29501", "--rejoin-wait", "420"])
    argv = _engine_health.rejoin_argv(args, "/usr/local/libexec/dgxspark/engine_health.py")
    assert argv[:4] == ["systemd-run", "--unit", "dgxspark-engine-rejoin", "--collect"]
    assert "RuntimeMaxSec=480" in argv
    assert argv[argv.index(sys.executable):] == [
        sys.executable, "/usr/local/libexec/dgxspark/engine_health.py", "--unit", "dgxspark-engine.service", "--rejoin",
        "--master", "10.0.0.11:29501", "--api-url", "http://10.0.0.11:8000", "--rejoin-wait", "420"]
    # The command it runs is one the script accepts.
    rejoined = _engine_health._argument_parser().parse_args(argv[argv.index(sys.executable) + 2:])
    assert rejoined.rejoin and rejoined.master == "10.0.0.11:29501" and rejoined.rejoin_wait == 420


def test_a_rank_that_dies_with_its_head_rejoins_and_one_stopped_while_the_head_answers_does_not(systemctl_calls):
    # The third look comes after the unit stopped: the head's port, once more.
    for looks, rejoined in (([ACCEPTS, REFUSED, REFUSED], True), ([ACCEPTS, ACCEPTS, REFUSED], True),
                            ([ACCEPTS, ACCEPTS, ACCEPTS], False), ([REFUSED, REFUSED, REFUSED], False)):
        systemctl_calls.clear()
        clock = FakeClock()
        answers, states = iter(looks), iter([ACTIVE, ACTIVE, FAILED])
        assert follow("u", HEAD, 5, 3, True, clock=clock, sleep=clock.sleep, units=functools.partial(next, states),
                      connect=functools.partial(next, answers), log=lambda m: None,
                      rejoin_argv=["systemd-run", "rejoin"]) is None
        assert systemctl_calls == ([["systemd-run", "rejoin"]] if rejoined else []), looks
