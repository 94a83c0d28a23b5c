# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Is the engine serving? Probes of one rank and of the cluster's API.

A TP=4 cluster is healthy only when every rank's unit runs and the head
answers a real completion: after a rank dies, vLLM's /health can still
answer 200 while every completion fails, so /health alone proves nothing.

One implementation with four callers, run on the node's system Python
(standard library only, through an explicit interpreter, ``python3 FILE``):

* the coordinated start: every rank reports its unit and, waiting up to
  ``--wait`` seconds, whether the head answers (``probe``, looking every
  ``--poll`` seconds);
* the engine watchdog beside the head's unit: it sends a checked completion
  every ``--interval`` seconds and, once the cluster has served,
  ``--failures`` failed completions in a row restart the head (a wedged
  engine), at most ``--restarts`` times within ``--restart-window`` seconds
  (recorded in ``--restart-log``); past that budget they stop it, so a
  cluster that lost a rank is stopped rather than left half-alive (``watch``);
* the engine watchdog beside every other rank's unit: it only looks whether
  the head's API port accepts a TCP connection and, once it has, stops its
  rank after ``--failures`` refused or timed-out looks in a row (``follow``).
  With ``--rejoin-wait`` it first starts a transient unit that starts the
  rank again once the head's rendezvous port accepts (the head restarted by
  its watchdog) while its API port does not yet, within that many seconds
  (``rejoin``); a head that does not come back leaves the rank stopped;
* the status playbook (``probe`` with ``--wait 0``).

Both watchdogs stop their rank when the cluster has not served within
``--serve-within`` seconds of the watchdog's start: a head restarted by its
watchdog that waits for a rank that never comes, and the ranks that rejoined
it, are not left waiting.

With ``--journal-since EPOCH`` a probe also says which part of its start
the rank is in (``phase``: ``start_phase`` of ``_engine_timeline.py``, from
the unit's journal since EPOCH), so the coordinated start can show every
rank's progress at each round. That file is installed beside this one as
``engine_timeline.py``.

The head's watchdog is the cluster's one prober. A completion is real work
for every rank and shows in the engine's metrics, so one per watchdog and
interval would keep an idle cluster busy and skew its benchmarks. The
followers need no completion of their own: a head that wedges or loses a
rank fails its watchdog's completions and is stopped by it, and a head that
dies stops as well; either way its API port closes, which is what the
followers see. Their connection is closed unused, so the engine neither
logs nor counts it.

The controller side (``cluster_verdict``) turns the ranks' probes into one
verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

EXIT_FAILURE = 2

UNIT_ACTIVE = "active"


class EngineHealthError(ValueError):
    """Raised when probes cannot be judged."""


def judge_models(payload, model):
    """None when O(model) is listed by a /v1/models O(payload), else why not."""
    try:
        ids = [entry["id"] for entry in payload["data"]]
    except (KeyError, TypeError):
        return "/v1/models answered without a data list: %.200r" % (payload,)
    if model not in ids:
        return "/v1/models lists %s, not %s" % (", ".join(ids) or "no model", model)
    return None


def judge_completion(payload, expect):
    """(text, problem) of a /v1/completions O(payload); problem is None when
    the text of the first choice matches the regular expression O(expect)."""
    try:
        text = payload["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return None, "the completion answered without choices: %.200r" % (payload,)
    if not isinstance(text, str):
        return None, "the completion text is %r, not a string" % (text,)
    if not re.search(expect, text):
        return text, "the completion %r does not match %r" % (text, expect)
    return text, None


def _request(url, api_key, timeout, body=None):
    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Content-Type", "application/json")
    if api_key:
        request.add_header("Authorization", "Bearer " + api_key)
    # The standard library's opener, not ansible.module_utils.urls.open_url: the
    # nodes run this file on their system Python, where Ansible is not installed.
    with urllib.request.build_opener().open(request, timeout=timeout) as response:
        raw = response.read()
    return json.loads(raw.decode("utf-8")) if raw else None


def api_answers(base_url, model, prompt, expect, max_tokens, api_key=None, timeout=30):
    """One look at the API: returns {"ready": bool, "detail": str, "text": str|None}."""
    base = base_url.rstrip("/")
    step = "/health"
    try:
        _request(base + "/health", api_key, timeout)
        step = "/v1/models"
        problem = judge_models(_request(base + "/v1/models", api_key, timeout), model)
        if problem:
            return {"ready": False, "detail": problem, "text": None}
        step = "/v1/completions"
        answer = _request(
            base + "/v1/completions",
            api_key,
            timeout,
            {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        )
    except urllib.error.HTTPError as exc:
        return {"ready": False, "detail": "%s answered HTTP %d" % (step, exc.code), "text": None}
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"ready": False, "detail": "%s: %s" % (step, reason), "text": None}
    text, problem = judge_completion(answer, expect)
    if problem:
        return {"ready": False, "detail": problem, "text": text}
    return {"ready": True, "detail": "a completion answered %r" % text, "text": text}


def api_address(base_url):
    """(host, port) of the API at O(base_url), with the scheme's port when the
    URL names none."""
    parts = urllib.parse.urlsplit(base_url)
    if not parts.hostname:
        raise EngineHealthError("the API URL %r names no host" % (base_url,))
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def port_accepts(host, port, timeout):
    """One look at a TCP port: {"ready": bool, "detail": str}. The connection
    is closed before anything is sent, so no request reaches the server."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        return {"ready": False, "detail": "port %d of %s: %s" % (port, host, exc)}
    return {"ready": True, "detail": "port %d of %s accepts connections" % (port, host)}


def unit_state(unit, systemctl="systemctl"):
    """ActiveState, SubState and Result of a systemd unit."""
    result = subprocess.run(
        [systemctl, "show", "--property=ActiveState,SubState,Result,ExecMainStatus", unit],
        capture_output=True,
        text=True,
        check=False,
    )
    state = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return {
        "active": state.get("ActiveState", "unknown"),
        "sub": state.get("SubState", "unknown"),
        "result": state.get("Result", "unknown"),
        "status": state.get("ExecMainStatus", ""),
    }


def _timeline():
    """The start timeline's module: engine_timeline.py beside this file on a
    node (run as ``python3 FILE``, its directory comes first on sys.path),
    the collection's module_utils on the controller and in tests."""
    try:
        import engine_timeline  # pylint: disable=import-outside-toplevel
    except ImportError:
        from ansible_collections.dgxspark.cluster.plugins.module_utils import (  # pylint: disable=import-outside-toplevel
            _engine_timeline as engine_timeline,
        )
    return engine_timeline


def journal_since(unit, since, journalctl="journalctl"):
    """The journal of O(unit) since the epoch O(since), as the start's timeline reads it."""
    result = subprocess.run(
        [journalctl, "--unit", unit, "--since", "@%d" % int(since), "--no-pager", "--output", "short-iso-precise"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout


def start_phase(unit, since, journal=None, clock=time.time):
    """The part of its start that the rank of O(unit) is in now (see
    ``_engine_timeline.start_phase``); a journal that cannot be read gives
    the phase ``unknown`` with the reason, never a failed probe."""
    try:
        text = journal() if journal else journal_since(unit, since)
        return _timeline().start_phase(text, clock())
    except (OSError, ValueError) as exc:
        return {"phase": "unknown", "elapsed": None, "since": None, "detail": str(exc)}


def probe(unit, api, wait=0.0, interval=2.0, clock=time.monotonic, sleep=time.sleep, look=None, units=None):
    """Report this rank's unit and, when O(api) is given, whether the head
    answers; with O(wait), keep looking every O(interval) seconds until it
    answers, the unit stops, or O(wait) seconds pass."""
    look = look or (lambda: api_answers(**api))
    units = units or (lambda: unit_state(unit))
    deadline = clock() + wait
    while True:
        state = units()
        report = {"unit": state, "ready": False, "detail": "", "text": None}
        if state["active"] != UNIT_ACTIVE:
            report["detail"] = "unit %s is %s (%s, result %s)" % (unit, state["active"], state["sub"], state["result"])
            return report
        if api is None:
            report["detail"] = "unit %s is active" % unit
            return report
        report.update(look())
        if report["ready"] or clock() >= deadline:
            return report
        sleep(min(interval, max(0.0, deadline - clock())))


def _log(message):
    # The watchdogs' log, to their units' journal; no module logs through it.
    # pylint: disable-next=ansible-bad-function
    print(message, flush=True)


# Until the engine has served once, a watchdog looks this often (or at its
# own interval, when shorter): a failed look before then costs the engine
# nothing (nothing listens yet), and a long interval must not leave a rank
# that dies right after the start unwatched until the next look.
STARTING_INTERVAL = 5.0


def _guard(unit, look, interval, failures, act, clock, sleep, units, log, serve_within=None, on_stopped=None):
    """The loop of a watchdog: O(look) every O(interval) seconds while O(unit)
    runs (every STARTING_INTERVAL seconds at most until a look has been
    ready). Once a look has been ready, O(failures) looks in a row that are
    not call O(act) with the last look's detail, and the reason it returns is
    returned; so is the reason of a cluster that has not served within
    O(serve_within) seconds of the first look (O(act) with C(serve_within)).
    Returns None when the unit stops by itself, after calling O(on_stopped)
    when the cluster had served and a look fails then (the rank died with what
    it watched). Logs state changes only, never a healthy look."""
    served = False
    failed = 0
    began = clock()
    while True:
        # Looks start every interval, however long a look itself takes.
        look_began = clock()
        state = units()
        if state["active"] != UNIT_ACTIVE:
            log("unit %s is %s; watchdog ends" % (unit, state["active"]))
            # A rank that died while its head does not answer died with it (its
            # peers went away): looked at once more, as it may have died first.
            if on_stopped is not None and served and (failed or not look()["ready"]):
                on_stopped()
            return None
        answer = look()
        if answer["ready"]:
            if not served or failed:
                log("the engine serves: %s" % answer["detail"])
            served, failed = True, 0
        elif served:
            failed += 1
            log("look %d of %d failed: %s" % (failed, failures, answer["detail"]))
            if failed >= failures:
                return act(answer["detail"])
        elif serve_within is not None and clock() - began >= serve_within:
            return act(None)
        next_look = look_began + (interval if served else min(interval, STARTING_INTERVAL))
        sleep(max(0.0, next_look - clock()))


def _systemctl(verb, unit):
    """Ask systemd to stop, restart or start O(unit), without waiting for the job: a
    watchdog bound to the unit is itself stopped by it."""
    subprocess.run(["systemctl", verb, "--no-block", unit], check=False)


def _why(detail, serve_within):
    """What the watchdog saw: the failed look's detail, or the bound that passed."""
    if detail is None:
        return "the cluster did not serve within %g s of this rank's start" % serve_within
    return "the cluster stopped serving (%s)" % detail


def stopper(unit, stop, log, serve_within=None, before_stop=None):
    """The act of a watchdog that stops its rank (when O(stop)); O(before_stop)
    runs first (the follower's rejoin). Returns the reason it logged."""
    def act(detail):
        reason = "%s; stopping rank unit %s so that no rank is left half-alive" % (_why(detail, serve_within), unit)
        log(reason)
        if stop:
            if before_stop is not None and detail is not None:
                before_stop()
            _systemctl("stop", unit)
        return reason
    return act


def restarts_in_window(text, now, window):
    """The epochs, one a line of O(text), that are less than O(window) seconds
    before O(now) (or after it: the clock went back, or the file rounded one
    up); lines that are not a number are left out."""
    epochs = []
    for line in text.splitlines():
        try:
            epoch = float(line.split()[0])
        except (IndexError, ValueError):
            continue
        if now - window < epoch:
            epochs.append(epoch)
    return epochs


class RestartBudget:
    """At most O(restarts) automatic restarts within O(window) seconds, each
    recorded as its epoch, one a line, in the file at O(path) (which keeps
    only the restarts still within the window)."""

    def __init__(self, path, restarts, window, clock=time.time):
        self.path, self.restarts, self.window, self.clock = path, restarts, window, clock

    def spend(self):
        """(True, restarts counted with this one) when one more restart is
        within the budget, and records it; (False, restarts counted) when not."""
        now = self.clock()
        try:
            with open(self.path, encoding="utf-8") as handle:
                recent = restarts_in_window(handle.read(), now, self.window)
        except FileNotFoundError:
            recent = []
        if len(recent) >= self.restarts:
            return False, len(recent)
        recent.append(now)
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".restarts-")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write("".join("%.3f\n" % epoch for epoch in recent))
        os.replace(temporary, self.path)
        return True, len(recent)


def restarter(unit, budget, stop, log, serve_within=None):
    """The act of the head's watchdog: restart the rank (the wedged engine) while
    O(budget) allows it, else stop it; a cluster that did not serve within
    O(serve_within) is stopped, never restarted. Returns the reason it logged."""
    def act(detail):
        if detail is None or budget is None or budget.restarts <= 0:
            return stopper(unit, stop, log, serve_within)(detail)
        allowed, used = budget.spend() if stop else (True, 0)
        if not allowed:
            reason = ("%s and the watchdog's restart budget is spent (%d automatic restarts in the last %g s); stopping "
                      "rank unit %s so that no rank is left half-alive: it stays stopped until site.yml or restart.yml "
                      "starts it" % (_why(detail, None), used, budget.window, unit))
            log(reason)
            _systemctl("stop", unit)
            return reason
        reason = "%s; restarting rank unit %s, automatic restart %d of %d within %g s" % (
            _why(detail, None), unit, used, budget.restarts, budget.window)
        log(reason)
        if stop:
            _systemctl("restart", unit)
        return reason
    return act


def watch(unit, api, interval, failures, stop, clock=time.monotonic, sleep=time.sleep, look=None, units=None, log=None,
          budget=None, serve_within=None):
    """The head's watchdog: a checked completion every O(interval) seconds;
    once the API has answered, O(failures) failed completions in a row restart
    the rank while O(budget) (a RestartBudget, or None) allows it and stop it
    otherwise (only when O(stop)), returning the reason. Returns None when the
    unit stops by itself."""
    log = log or _log
    log("watchdog of %s: a checked completion every %g s; once the engine has served, %d failed looks in a row %s"
        % (unit, interval, failures, "restart the unit, at most %d times within %g s, then stop it"
           % (budget.restarts, budget.window) if budget is not None and budget.restarts > 0 else "stop the unit"))
    return _guard(unit, look or (lambda: api_answers(**api)), interval, failures,
                  restarter(unit, budget, stop, log, serve_within), clock, sleep,
                  units or (lambda: unit_state(unit)), log, serve_within)


def follow(unit, address, interval, failures, stop, timeout=30.0, clock=time.monotonic, sleep=time.sleep,
           connect=None, units=None, log=None, rejoin_argv=None, serve_within=None):
    """The watchdog of a rank that is not the head: every O(interval) seconds,
    whether the head's API port at O(address) (host, port) accepts a TCP
    connection; once it has, O(failures) refused or timed-out looks in a row
    stop the rank (when O(stop)) and return the reason, after starting
    O(rejoin_argv) (the transient unit that starts the rank again when its
    head comes back), when given; so does a rank that stops by itself after a
    failed look. Returns None when the unit stops by itself."""
    host, port = address
    # A head that takes longer than an interval to accept has failed the look;
    # waiting longer would only slow the count of failures.
    connect_timeout = min(timeout, interval)
    log = log or _log
    log("watchdog of %s: looks at port %d of the head %s every %g s; once it has accepted, %d failed looks in a row"
        " stop the unit" % (unit, port, host, interval, failures))

    def arm_rejoin():
        started = subprocess.run(rejoin_argv, check=False)
        if started.returncode != 0:
            log("could not start the rejoin (%s exited %d); the rank stays stopped" % (rejoin_argv[0], started.returncode))

    # A rank that its watchdog stops, or that dies by itself while the head does
    # not answer (its gloo peer went away), starts again when the head comes back.
    rejoin_after = arm_rejoin if rejoin_argv and stop else None
    act = stopper(unit, stop, log, serve_within, rejoin_after)
    return _guard(unit, connect or (lambda: port_accepts(host, port, connect_timeout)), interval, failures, act,
                  clock, sleep, units or (lambda: unit_state(unit)), log, serve_within, on_stopped=rejoin_after)


def rejoin(unit, master, api, wait, interval=2.0, clock=time.monotonic, sleep=time.sleep, connect=None, units=None,
           log=None):
    """After a follower stopped its rank because the head stopped serving: start
    the rank again once the head's rendezvous port O(master) (host, port)
    accepts while its API port O(api) does not yet (the head restarted by its
    watchdog waits for its ranks), within O(wait) seconds. Returns "started",
    "running" (the unit was started by someone else meanwhile) or None (the
    head did not come back: the rank stays stopped)."""
    log = log or _log
    connect = connect or (lambda address: port_accepts(address[0], address[1], interval))
    units = units or (lambda: unit_state(unit))
    log("rank unit %s stops with its head: it starts again if port %d of the head %s accepts within %g s"
        % (unit, master[1], master[0], wait))
    deadline = clock() + wait
    # The follower starts this just before it stops the rank: a unit still
    # running, or stopping, is the one it stops, not one started since.
    stopped = False
    while clock() < deadline:
        look_began = clock()
        state = units()["active"]
        if state in (UNIT_ACTIVE, "activating", "deactivating"):
            if stopped:
                log("unit %s was started meanwhile; the rejoin ends" % unit)
                return "running"
        else:
            stopped = True
        if stopped and connect(master)["ready"] and not connect(api)["ready"]:
            log("port %d of the head %s accepts again: starting rank unit %s to rejoin the head's start"
                % (master[1], master[0], unit))
            _systemctl("start", unit)
            return "started"
        sleep(max(0.0, look_began + interval - clock()))
    log("the head did not come back within %g s; rank unit %s stays stopped until site.yml or restart.yml starts it"
        % (wait, unit))
    return None


def cluster_verdict(probes, head):
    """One verdict from each rank's probe: {"state": ready|failed|starting,
    "problems": [...], "ready_text": str|None}. O(probes) maps host to its
    probe; O(head) is the host whose probe carries the API answer."""
    if not isinstance(probes, dict) or head not in probes:
        raise EngineHealthError("the probes must map every engine host, the head %s included" % head)
    problems = []
    for host in sorted(probes):
        report = probes[host]
        if not isinstance(report, dict) or "unit" not in report:
            problems.append("%s: no probe result (%s)" % (host, report))
        elif report["unit"].get("active") != UNIT_ACTIVE:
            problems.append("%s: %s" % (host, report.get("detail")))
    if problems:
        return {"state": "failed", "problems": problems, "ready_text": None}
    if probes[head].get("ready"):
        return {"state": "ready", "problems": [], "ready_text": probes[head].get("text")}
    return {"state": "starting", "problems": [probes[head].get("detail") or "no answer yet"], "ready_text": None}


def _read_secret(path):
    if not path:
        return None
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            name, _sep, value = line.rstrip("\n").partition("=")
            if name == "VLLM_API_KEY":
                return value
    return None


def _argument_parser():
    parser = argparse.ArgumentParser(prog="engine_health", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--unit", required=True, help="the rank's systemd unit")
    parser.add_argument("--api-url", help="the head's API, e.g. http://10.0.0.11:8000; omit to report the unit only")
    parser.add_argument("--model", help="served model name; needed to probe or watch the API")
    parser.add_argument("--prompt", default="1 + 1 =")
    parser.add_argument("--expect", default=".", help="regular expression the completion must match")
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=30.0,
                        help="seconds per HTTP request; follow: per TCP connect, at most --interval")
    parser.add_argument("--secrets-file", help="environment file holding VLLM_API_KEY (read, never printed)")
    parser.add_argument("--wait", type=float, default=0.0, help="probe: seconds to keep looking for an answer")
    parser.add_argument("--poll", type=float, default=2.0, help="probe: seconds between looks while waiting")
    parser.add_argument("--journal-since", type=float,
                        help="probe: also report the part of the start the rank is in, from its journal since this epoch")
    watchdog = parser.add_mutually_exclusive_group()
    watchdog.add_argument("--watch", action="store_true",
                          help="the head's watchdog: a checked completion per interval until the unit stops")
    watchdog.add_argument("--follow", action="store_true",
                          help="another rank's watchdog: whether the head's API port accepts, per interval")
    parser.add_argument("--interval", type=float, default=15.0, help="watch and follow: seconds between looks")
    parser.add_argument("--failures", type=int, default=3,
                        help="watch and follow: failed looks in a row that stop the rank once the head has served")
    parser.add_argument("--no-stop", action="store_true", help="watch and follow: report, do not stop the rank")
    parser.add_argument("--serve-within", type=float,
                        help="watch and follow: stop the rank when the cluster has not served within these seconds")
    parser.add_argument("--restarts", type=int, default=0,
                        help="watch: automatic restarts of the rank within --restart-window; 0 stops it instead")
    parser.add_argument("--restart-window", type=float, default=3600.0, help="watch: seconds the restart budget spans")
    parser.add_argument("--restart-log", help="watch: file recording the automatic restarts (needed with --restarts)")
    parser.add_argument("--rejoin-wait", type=float,
                        help="follow: seconds a stopped rank waits for its head to come back (a transient unit)")
    parser.add_argument("--master", help="follow and rejoin: the head's rendezvous address, HOST:PORT")
    watchdog.add_argument("--rejoin", action="store_true",
                          help="start the rank once the head's rendezvous port (--master) accepts and its API does not"
                               " (the transient unit --follow starts)")
    return parser


def _host_port(value):
    host, _sep, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise EngineHealthError("%r is not HOST:PORT" % (value,))
    return host.strip("[]"), int(port)


REJOIN_UNIT_SUFFIX = "-rejoin"


def rejoin_argv(args, script):
    """The command that starts the rejoin of O(args)' rank as a transient unit."""
    return ["systemd-run", "--unit", args.unit.rsplit(".service", 1)[0] + REJOIN_UNIT_SUFFIX, "--collect", "--quiet",
            "--description", "Start %s again when its head comes back" % args.unit,
            "--property", "RuntimeMaxSec=%d" % (int(args.rejoin_wait) + 60),
            sys.executable, script, "--unit", args.unit, "--rejoin", "--master", args.master,
            "--api-url", args.api_url, "--rejoin-wait", "%g" % args.rejoin_wait]


def main(argv=None):
    parser = _argument_parser()
    args = parser.parse_args(argv)
    mode = "watch" if args.watch else "follow" if args.follow else "rejoin" if args.rejoin else None
    if mode and not args.api_url:
        parser.error("--%s needs --api-url" % mode)
    if (args.rejoin or args.rejoin_wait is not None) and not args.master:
        parser.error("--%s needs --master" % ("rejoin" if args.rejoin else "rejoin-wait"))
    if args.restarts > 0 and not args.restart_log:
        parser.error("--restarts needs --restart-log")
    try:
        address = api_address(args.api_url) if mode else None
        master = _host_port(args.master) if args.master else None
    except ValueError as exc:
        parser.error(str(exc))
    if args.rejoin:
        return 0 if rejoin(args.unit, master, address, args.rejoin_wait or 0.0) else EXIT_FAILURE
    if args.follow:
        reason = follow(args.unit, address, args.interval, args.failures, not args.no_stop, timeout=args.timeout,
                        rejoin_argv=rejoin_argv(args, os.path.abspath(__file__)) if args.rejoin_wait else None,
                        serve_within=args.serve_within)
        return EXIT_FAILURE if reason else 0
    api = None
    if args.api_url:
        if not args.model:
            parser.error("--api-url needs --model")
        api = {
            "base_url": args.api_url, "model": args.model, "prompt": args.prompt, "expect": args.expect,
            "max_tokens": args.max_tokens, "api_key": _read_secret(args.secrets_file), "timeout": args.timeout,
        }
    if args.watch:
        budget = RestartBudget(args.restart_log, args.restarts, args.restart_window) if args.restarts > 0 else None
        reason = watch(args.unit, api, args.interval, args.failures, not args.no_stop, budget=budget,
                       serve_within=args.serve_within)
        return EXIT_FAILURE if reason else 0
    report = probe(args.unit, api, wait=args.wait, interval=args.poll)
    if args.journal_since is not None:
        report["phase"] = start_phase(args.unit, args.journal_since)
    # The probe's report on the command line; no module runs main().
    # pylint: disable-next=ansible-bad-function
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
