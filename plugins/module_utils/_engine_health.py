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
  every ``--interval`` seconds and, once the cluster has served, stops the
  head after ``--failures`` failed completions in a row, so a cluster that
  lost a rank is stopped rather than left half-alive (``watch``);
* the engine watchdog beside every other rank's unit: it only looks whether
  the head's API port accepts a TCP connection and, once it has, stops its
  rank after ``--failures`` refused or timed-out looks in a row (``follow``);
* the status playbook (``probe`` with ``--wait 0``).

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
import re
import socket
import subprocess
import sys
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


def _guard(unit, look, interval, failures, stop, clock, sleep, units, log):
    """The loop of a watchdog: O(look) every O(interval) seconds while O(unit)
    runs (every STARTING_INTERVAL seconds at most until a look has been
    ready). Once a look has been ready, O(failures) looks in a row that are
    not stop the rank (when O(stop)) and return the reason; returns None when
    the unit stops by itself. Logs state changes only, never a healthy look."""
    served = False
    failed = 0
    while True:
        # Looks start every interval, however long a look itself takes.
        look_began = clock()
        state = units()
        if state["active"] != UNIT_ACTIVE:
            log("unit %s is %s; watchdog ends" % (unit, state["active"]))
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
                reason = ("the cluster stopped serving (%s); stopping rank unit %s so that no rank is left half-alive"
                          % (answer["detail"], unit))
                log(reason)
                if stop:
                    subprocess.run(["systemctl", "stop", "--no-block", unit], check=False)
                return reason
        next_look = look_began + (interval if served else min(interval, STARTING_INTERVAL))
        sleep(max(0.0, next_look - clock()))


def watch(unit, api, interval, failures, stop, clock=time.monotonic, sleep=time.sleep, look=None, units=None, log=None):
    """The head's watchdog: a checked completion every O(interval) seconds;
    once the API has answered, O(failures) failed completions in a row stop
    the rank (when O(stop)) and return the reason. Returns None when the unit
    stops by itself."""
    log = log or _log
    log("watchdog of %s: a checked completion every %g s; once the engine has served, %d failed looks in a row"
        " stop the unit" % (unit, interval, failures))
    return _guard(unit, look or (lambda: api_answers(**api)), interval, failures, stop, clock, sleep,
                  units or (lambda: unit_state(unit)), log)


def follow(unit, address, interval, failures, stop, timeout=30.0, clock=time.monotonic, sleep=time.sleep,
           connect=None, units=None, log=None):
    """The watchdog of a rank that is not the head: every O(interval) seconds,
    whether the head's API port at O(address) (host, port) accepts a TCP
    connection; once it has, O(failures) refused or timed-out looks in a row
    stop the rank (when O(stop)) and return the reason. Returns None when the
    unit stops by itself."""
    host, port = address
    # A head that takes longer than an interval to accept has failed the look;
    # waiting longer would only slow the count of failures.
    connect_timeout = min(timeout, interval)
    log = log or _log
    log("watchdog of %s: looks at port %d of the head %s every %g s; once it has accepted, %d failed looks in a row"
        " stop the unit" % (unit, port, host, interval, failures))
    return _guard(unit, connect or (lambda: port_accepts(host, port, connect_timeout)), interval, failures, stop,
                  clock, sleep, units or (lambda: unit_state(unit)), log)


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
    return parser


def main(argv=None):
    parser = _argument_parser()
    args = parser.parse_args(argv)
    if (args.watch or args.follow) and not args.api_url:
        parser.error("--%s needs --api-url" % ("watch" if args.watch else "follow"))
    if args.follow:
        try:
            address = api_address(args.api_url)
        except ValueError as exc:
            parser.error("--api-url: %s" % exc)
        reason = follow(args.unit, address, args.interval, args.failures, not args.no_stop, timeout=args.timeout)
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
        reason = watch(args.unit, api, args.interval, args.failures, not args.no_stop)
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
