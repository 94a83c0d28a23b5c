# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The balancer in front of both layouts: the TP=4 lane (one upstream) and
the 2xTP=2 fleet (one upstream per replica head), switched with site.yml and
back; sticky sessions, /metrics refused, and a rolling upgrade of the fleet
while a client sends requests through the balancer. One test, so the layout
always goes back to the inventory's TP=4 (finally), serving."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

from helpers import API_KEY, ServingMonitor, completion, flat, group_vars, inventory_hosts, node_state, run_playbook

testinfra_hosts = ["local://"]

FLEET = {"engine_service_replicas": 2, "engine_service_tensor_parallel_size": 2}
BALANCER = "http://%s:8080" % inventory_hosts()["spark1"]["roce_fabric_address"]
CONFIG = "/etc/nginx/conf.d/dgxspark-balancer.conf"


def through_balancer(session=None, path="/v1/completions", timeout=30, api_key=API_KEY):
    """(status or error text, X-Upstream, completion text) of one request through the balancer."""
    body = json.dumps({"model": group_vars()["engine_service_served_model_name"], "prompt": "Hello",
                       "max_tokens": 2, "temperature": 0}).encode() if path.startswith("/v1/") else None
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + api_key}
    if session is not None:
        headers["X-Session-ID"] = session
    request = urllib.request.Request(BALANCER + path, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers.get("X-Upstream"), json.loads(response.read())["choices"][0]["text"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("X-Upstream"), None
    except (urllib.error.URLError, OSError) as exc:
        return str(exc), None, None


def balancer_probe(number, started):
    """One completion through the balancer with a new session key (so both replicas get
    traffic): (started, seconds, status, upstream)."""
    status, upstream, _text = through_balancer(session="roll-%d" % number, timeout=60)
    return (started, time.monotonic() - started, status, upstream)


def engine_marker(host):
    """The ENGINE_FLEET_MARK environment value the host's rank runs with ('' when unset)."""
    return node_state(host, "docker exec dgxspark-engine printenv ENGINE_FLEET_MARK || true").strip()


def converge(extra_vars=None):
    started = time.monotonic()
    result = run_playbook("site.yml", extra_vars=extra_vars)
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    return result, time.monotonic() - started


def test_both_layouts_serve_through_the_balancer_and_the_fleet_rolls_without_a_failed_request():
    timings = {}
    try:
        # TP=4: one upstream, spark1's head; /metrics is refused at the balancer only.
        assert "server 192.168.100.11:8000" in node_state("spark1", "cat " + CONFIG)
        assert node_state("spark1", "grep -c ' server ' %s" % CONFIG).strip() == "1"
        status, upstream, _text = through_balancer(session="a")
        assert (status, upstream) == (200, "spark1")
        assert through_balancer(path="/metrics")[0] == 404
        assert through_balancer(path="/metrics/")[0] == 404
        assert "Bearer" not in node_state("spark1", "cat /var/log/nginx/dgxspark-balancer.access.log")

        # Switch to 2xTP=2: one coordinated restart, then both heads serve.
        _result, timings["switch to 2xTP=2"] = converge(FLEET)
        config = node_state("spark1", "cat " + CONFIG)
        assert "server 192.168.100.11:8000" in config and "server 192.168.100.13:8000" in config
        for host in ("spark1", "spark3"):
            record = json.loads(node_state(host, "cat /etc/dgxspark/engine/current/version.json"))
            assert record["head"] == host and "--tensor-parallel-size" in record["vllm_argv"]
            assert record["vllm_argv"][record["vllm_argv"].index("--tensor-parallel-size") + 1] == "2"
        assert json.loads(node_state("spark4", "cat /etc/dgxspark/engine/current/version.json"))["head"] == "spark3"
        # Sticky: one key, one replica; many keys reach both.
        for key in ("alice", "bob", "carol"):
            answers = {through_balancer(session=key)[:2] for _attempt in range(4)}
            assert len(answers) == 1 and next(iter(answers))[0] == 200, answers
        spread = {through_balancer(session="key-%d" % n)[1] for n in range(16)}
        assert spread == {"spark1", "spark3"}, spread
        assert through_balancer(path="/metrics")[0] == 404
        # A second run in the fleet layout changes nothing.
        again, _seconds = converge(FLEET)
        assert all("changed=0" in line for line in again.stdout.splitlines() if line.startswith("spark")), \
            flat(again.stdout)[-2000:]

        # Rolling upgrade: a new engine environment, one replica at a time.
        upgrade = dict(FLEET, engine_service_env=dict(group_vars()["engine_service_env"], ENGINE_FLEET_MARK="v2"))
        with ServingMonitor(interval=0.2, probe=balancer_probe) as client:
            started = time.monotonic()
            result = run_playbook("restart.yml", extra_vars=upgrade)
            timings["rolling upgrade"] = time.monotonic() - started
            time.sleep(3)
        out = flat(result.stdout)
        assert result.returncode == 0, (re.findall(r"(?:fatal|ERROR).{0,800}", out) or [out[-3000:]])[:3]
        assert "Draining the replica of spark1" in out and "Draining the replica of spark3" in out, out[-3000:]
        failed = [sample for sample in client.samples if sample[2] != 200]
        longest = max(seconds for _started, seconds, _status, _upstream in client.samples)
        print("rolling upgrade: %d requests, %d failed, longest %.2f s, %.1f s"
              % (len(client.samples), len(failed), longest, timings["rolling upgrade"]))
        assert len(client.samples) > 20 and failed == [], failed[:5]
        # Both replicas answered during the roll (the other one served while one was drained).
        assert {upstream for *_rest, upstream in client.samples} == {"spark1", "spark3"}
        assert {host: engine_marker(host) for host in inventory_hosts()} == dict.fromkeys(inventory_hosts(), "v2")
        after = [through_balancer(session="after-%d" % n) for n in range(8)]
        assert all(status == 200 for status, _upstream, _text in after), after
    finally:
        # Back to the inventory's TP=4, serving, whatever happened above.
        started = time.monotonic()
        back = run_playbook("site.yml")
        timings["switch back to TP=4"] = time.monotonic() - started
        print("fleet test timings: %r" % timings)
    assert back.returncode == 0, flat(back.stdout)[-3000:]
    assert completion()[0] == 200
    assert through_balancer(session="a")[:2] == (200, "spark1")
    assert node_state("spark1", "grep -c ' server ' %s" % CONFIG).strip() == "1"
    assert engine_marker("spark1") == ""
