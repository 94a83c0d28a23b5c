# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight compares each node's GPU with its peers' (roles/preflight/tasks/gpu_peers.yml),
and status.yml says each node's GPU clocks, power and clock-event reasons. spark2's nvidia-smi
stand-in is made to print a lower max SM clock and an active sw_power_cap through its override
file (/etc/dgxspark-standin/gpu.json, molecule/resources/standins/nvidia-smi), then restored.
Only the preflight runs (--tags preflight): seconds, not minutes."""

from __future__ import annotations

import json
import re

import pytest

from helpers import assert_nothing_changed, docker_exec, flat, run_playbook

testinfra_hosts = ["local://"]

OVERRIDE = "/etc/dgxspark-standin/gpu.json"
SLOW_SPARK2 = {"gpu": {"clocks.max.sm": "2400", "clocks.sm": "1100", "clocks_event_reasons.active": "0x0000000000000004"}}


@pytest.fixture
def slow_spark2():
    """spark2's GPU set to a 2400 MHz max SM clock and held by sw_power_cap; removed after."""
    known = docker_exec("spark2", "nvidia-smi --query-gpu=clocks.max.sm --format=csv,noheader,nounits || true").stdout
    assert known.strip() == "3003", (
        "spark2's nvidia-smi stand-in predates the clock fields (it printed %r): rebuild the simulated cluster "
        "from this checkout (its stand-in driver package carries molecule/resources/standins/nvidia-smi)" % known
    )
    docker_exec("spark2", "mkdir -p /etc/dgxspark-standin && printf '%%s' '%s' > %s" % (json.dumps(SLOW_SPARK2), OVERRIDE))
    try:
        yield
    finally:
        docker_exec("spark2", "rm -f %s" % OVERRIDE)


def test_preflight_refuses_a_node_slower_than_its_peers_then_warns_when_told(slow_spark2):
    refused = run_playbook("site.yml", "--tags", "preflight")
    out = flat(refused.stdout)
    assert refused.returncode != 0
    assert re.search(
        r"spark2: GPU max SM clock 2400 MHz, 20\.1 % below its peers' median 3003 MHz "
        r"\(spark1 3003, spark3 3003, spark4 3003\); more than preflight_gpu_peer_threshold_pct=10 % below", out
    ), out[-3000:]
    assert "nvidia-smi -rgc" in out and "set preflight_gpu_peer_mismatch=warn to go on" in out
    assert not re.search(r"spark[134]: GPU max SM clock", out)
    assert_nothing_changed(refused)

    warned = run_playbook("site.yml", "--tags", "preflight", extra_vars={"preflight_gpu_peer_mismatch": "warn"})
    out = flat(warned.stdout)
    assert warned.returncode == 0, out[-3000:]
    assert "WARNING: spark2: GPU max SM clock 2400 MHz" in out
    assert "WARNING: spark2: GPU 0 is throttled now (sw_power_cap; SM clock 1100 of 2400 MHz)" in out
    # Already a warning: the message does not offer the setting that makes it one.
    assert "warn to go on" not in out


def test_status_says_each_nodes_gpu_state(slow_spark2):
    result = run_playbook("status.yml")
    out = flat(result.stdout)
    for host in ("spark1", "spark3", "spark4"):
        assert "%s: GPU 0 SM 208/3003 MHz, power 4.05 W of limit n/a, clock events gpu_idle" % host in out, out[-3000:]
    assert "spark2: GPU 0 SM 1100/2400 MHz, power 4.05 W of limit n/a, clock events sw_power_cap" in out
    assert "WARNING: spark2: GPU max SM clock 2400 MHz" in out
