# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Monitoring on the serving cluster: every target up, vLLM metrics from the head and
GPU/NIC metrics from every node (the stand-ins), and the alerts the field needs firing
when their failure happens: NIC errors rising in the stand-in tree, a stalled engine, a
killed rank. The simulated inventory uses 2 s intervals and short 'for' times
(inventory/simulated/group_vars/dgxspark_cluster/monitoring.yml); each alert's time to
fire is printed and written to reports/monitoring/alert-times.json.

The killed rank is last: it brings the cluster down, and site.yml brings it back (that
run's monitoring play must change nothing)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

from helpers import ROOT, completion, flat, group_vars, inventory_hosts, run_playbook

testinfra_hosts = ["local://"]

HOSTS = inventory_hosts()
GV = group_vars()
# The first node is the monitoring host of the simulated inventory (no monitoring group).
PROMETHEUS = "http://%s:%s" % (next(iter(HOSTS.values()))["ansible_host"], "9090")
TIMES = {}


def query(expr):
    url = PROMETHEUS + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def firing(alertname):
    with urllib.request.urlopen(PROMETHEUS + "/api/v1/alerts", timeout=5) as response:
        alerts = json.loads(response.read())["data"]["alerts"]
    return [a["labels"] for a in alerts if a["labels"]["alertname"] == alertname and a["state"] == "firing"]


def wait_for_alert(alertname, match, timeout):
    """Seconds until O(alertname) fires with labels including O(match)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if any(all(labels.get(k) == v for k, v in match.items()) for labels in firing(alertname)):
            return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    pytest.fail("%s %r did not fire within %d s; firing: %r" % (alertname, match, timeout, firing(alertname)))


def record(name, seconds):
    TIMES[name] = seconds
    print("%s fired after %.1f s" % (name, seconds))
    out = ROOT / "reports" / "monitoring"
    out.mkdir(parents=True, exist_ok=True)
    (out / "alert-times.json").write_text(json.dumps(TIMES, indent=2, sort_keys=True) + "\n")


def docker_exec(host, command):
    return subprocess.run(["docker", "exec", host, "sh", "-c", command], capture_output=True, text=True, check=True)


def head_pid(host, comm):
    """PID (in the node's namespace) of the engine process named O(comm)."""
    out = docker_exec(host, "ps -eo pid=,comm=").stdout
    pids = [line.split()[0] for line in out.splitlines() if line.split()[1:] == [comm]]
    assert len(pids) == 1, "processes named %s on %s: %r" % (comm, host, pids)
    return pids[0]


def test_every_target_is_up_and_reports_its_metrics():
    up = {(r["metric"]["job"], r["metric"]["host"]): r["value"][1] for r in query("up")}
    expected = {("node", host): "1" for host in HOSTS}
    heads = [host for host, hv in HOSTS.items() if hv["engine_service_rank"] == 0]
    expected.update({("vllm", host): "1" for host in heads})
    assert up == expected
    # The head's vLLM metrics, under their real names.
    for metric in ("vllm:generation_tokens_total", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                   "vllm:prefix_cache_queries_total"):
        assert sorted(r["metric"]["host"] for r in query(metric)) == heads, metric
    # Every node's GPU (nvidia-smi stand-in: [N/A] memory left out) and RoCE port (sysfs stand-in).
    for metric in ("dgxspark_gpu_power_draw_watts", "dgxspark_gpu_temperature_celsius",
                   'dgxspark_roce_port_counter{counter="symbol_error"}', "dgxspark_roce_port_rate_gbps",
                   'dgxspark_unit_active{unit="dgxspark-engine.service"}'):
        found = {r["metric"]["host"]: float(r["value"][1]) for r in query(metric)}
        assert sorted(found) == sorted(HOSTS), metric
    assert set({r["metric"]["host"]: r["value"][1] for r in query("dgxspark_roce_port_rate_gbps")}.values()) == {"200"}
    assert query("dgxspark_gpu_memory_total_bytes") == []  # [N/A] on a GB10: never a number
    assert firing("DgxsparkFabricLinkDegraded") == []
    # status.yml reports each rank's last scrape and the firing alerts, from Prometheus.
    result = run_playbook("status.yml")
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    for host in HOSTS:
        assert re.search(r"%s rank \d \(node, http://[0-9.]+:9100/metrics\): up, last scrape 20" % host, result.stdout)
    for host in heads:
        assert re.search(r"%s rank 0 \(vllm, http://[0-9.]+:8000/metrics\): up, last scrape 20" % host, result.stdout)
    assert "no alert is firing" in result.stdout


def test_rising_nic_error_counters_fire_the_fabric_alert():
    host = sorted(HOSTS)[2]
    counter = "%s/class/infiniband/%s/ports/1/counters/symbol_error" % (GV["roce_fabric_sysfs_root"], GV["roce_fabric_hca"])
    docker_exec(host, "echo $(( $(cat %s) + 5 )) > %s.new && mv %s.new %s" % (counter, counter, counter, counter))
    seconds = wait_for_alert("DgxsparkFabricErrorsIncreasing", {"host": host, "counter": "symbol_error"}, 40)
    record("DgxsparkFabricErrorsIncreasing", seconds)


def test_a_stalled_engine_fires_the_wedge_alert_and_serves_again():
    head = next(host for host, hv in HOSTS.items() if hv["engine_service_rank"] == 0)
    results = []
    worker = threading.Thread(target=lambda: results.append(completion("Once upon a time", max_tokens=200, timeout=120)))
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while not any(float(r["value"][1]) > 0 for r in query("vllm:num_requests_running")):
            assert time.monotonic() < deadline, "no request ran"
            time.sleep(0.3)
        pid = head_pid(head, "VLLM::EngineCor")
        docker_exec(head, "kill -STOP %s" % pid)
        try:
            seconds = wait_for_alert("DgxsparkEngineWedged", {"host": head}, 60)
        finally:
            docker_exec(head, "kill -CONT %s" % pid)
        record("DgxsparkEngineWedged", seconds)
    finally:
        worker.join(150)
    assert results and results[0][0] == 200, results
    status, text = completion()
    assert status == 200 and text, (status, text)


def test_a_killed_rank_fires_the_rank_down_alert_and_site_yml_brings_it_back():
    victim = max(HOSTS)
    docker_exec(victim, "docker kill dgxspark-engine")
    seconds = wait_for_alert("DgxsparkEngineRankDown", {"host": victim}, 60)
    record("DgxsparkEngineRankDown", seconds)

    result = run_playbook("site.yml")
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    # The monitoring play of that run changed nothing: its stack was in place.
    monitoring_play = result.stdout.split("PLAY [Monitoring")[1].split("PLAY RECAP")[0]
    assert not re.search(r"^changed: ", monitoring_play, re.MULTILINE), monitoring_play
    status, text = completion()
    assert status == 200 and text, (status, text)
    deadline = time.monotonic() + 30
    while firing("DgxsparkEngineRankDown") or any(r["value"][1] != "1" for r in query("up")):
        assert time.monotonic() < deadline, (firing("DgxsparkEngineRankDown"), query("up"))
        time.sleep(1)
