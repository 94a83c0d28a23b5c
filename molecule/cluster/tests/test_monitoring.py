# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Monitoring on the serving cluster: every target up, vLLM metrics from the head and
GPU/NIC metrics from every node (the stand-ins), and the alerts the field needs firing
when their failure happens: NIC errors rising in the stand-in tree, a stalled engine. (The
rank-down alert fires in test_engine_restart.py, on the rank of the node rebooted there, so
the suite pays for one outage, not two.) The simulated inventory uses 2 s intervals and
short 'for' times (inventory/simulated/group_vars/dgxspark_cluster/monitoring.yml); each
alert's time to fire is printed and written to reports/monitoring/alert-times.json."""

from __future__ import annotations

import re
import threading
import time

from helpers import (
    completion,
    docker_exec,
    firing,
    flat,
    group_vars,
    head_pid,
    inventory_hosts,
    query,
    record_alert_time,
    run_playbook,
    wait_for_alert,
)

testinfra_hosts = ["local://"]

HOSTS = inventory_hosts()
GV = group_vars()


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
    record_alert_time("DgxsparkFabricErrorsIncreasing", seconds)


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
        record_alert_time("DgxsparkEngineWedged", seconds)
    finally:
        worker.join(150)
    assert results and results[0][0] == 200, results
    status, text = completion()
    assert status == 200 and text, (status, text)
