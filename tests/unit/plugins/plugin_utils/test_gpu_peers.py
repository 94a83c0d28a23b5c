# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._gpu import parse_query_gpu
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._gpu_peers import (
    GpuPeersError,
    gpu_peer_check,
    gpu_state_line,
    node_value,
)

FIELDS = ("index", "power.draw", "power.limit", "clocks.sm", "clocks.max.sm", "clocks_event_reasons.active")


def gpu(max_sm="3003", limit="[N/A]", events="0x0000000000000001", sm="208", index="0"):
    (parsed,) = parse_query_gpu("%s, 4.05, %s, %s, %s, %s\n" % (index, limit, sm, max_sm, events), FIELDS)
    return parsed


def cluster(**overrides):
    nodes = {"spark%d" % n: {"dgxspark_gpus": [gpu()]} for n in range(1, 5)}
    nodes.update(overrides)
    return nodes


def test_equal_gb10_nodes_pass_with_no_power_limit_at_all():
    result = gpu_peer_check(cluster())
    assert (result["refusals"], result["warnings"]) == ([], [])
    assert result["medians"] == {"clocks_max_sm_mhz": 3003, "power_limit_w": None}


def test_a_lower_max_clock_is_refused_naming_host_values_median_and_fix():
    result = gpu_peer_check(cluster(spark2=[gpu(max_sm="2400")]), variables={"mismatch": "preflight_gpu_peer_mismatch"})
    (message,) = result["refusals"]
    assert message.startswith("spark2: GPU max SM clock 2400 MHz, 20.1 % below its peers' median 3003 MHz")
    assert "spark1 3003, spark3 3003, spark4 3003" in message
    assert "nvidia-smi -rgc" in message and "preflight_gpu_peer_mismatch=warn" in message
    assert result["warnings"] == []
    assert result["hosts"]["spark2"] == [message] and result["hosts"]["spark1"] == []


def test_warn_mode_turns_the_refusal_into_a_warning():
    result = gpu_peer_check(cluster(spark2=[gpu(max_sm="2400")]), mismatch="warn")
    assert result["refusals"] == []
    assert [m.split(":")[0] for m in result["warnings"]] == ["spark2"]
    assert "nvidia-smi -rgc" in result["warnings"][0] and "to go on" not in result["warnings"][0]


@pytest.mark.parametrize("max_sm, refused", [("2703", False), ("2702", True)])
def test_threshold_is_a_strict_percentage_of_the_peers_median(max_sm, refused):
    # 10 % below 3003 is 2702.7: 2703 is within, 2702 is not.
    result = gpu_peer_check(cluster(spark3=[gpu(max_sm=max_sm)]), threshold_pct=10)
    assert bool(result["refusals"]) is refused


def test_power_limit_compared_where_nodes_read_one_and_none_is_left_out():
    nodes = {
        "a": [gpu(limit="700.00")],
        "b": [gpu(limit="700.00")],
        "c": [gpu(limit="500.00")],
        "d": [gpu(limit="[N/A]")],
    }
    (message,) = gpu_peer_check(nodes)["refusals"]
    assert message.startswith("c: GPU power limit 500 W, 28.6 % below its peers' median 700 W (a 700, b 700)")
    assert "nvidia-smi -pl" in message


def test_a_node_alone_has_no_peers_and_a_higher_node_is_not_refused():
    assert gpu_peer_check({"a": [gpu(max_sm="1000")]})["refusals"] == []
    result = gpu_peer_check({"a": [gpu(max_sm="3003")], "b": [gpu(max_sm="2000")]})
    assert [m.split(":")[0] for m in result["refusals"]] == ["b"]


def test_the_slowest_gpu_of_a_node_stands_for_it():
    assert node_value([gpu(max_sm="3003"), gpu(max_sm="2000", index="1"), gpu(max_sm="[N/A]")], "clocks_max_sm_mhz") == 2000
    assert node_value([gpu(limit="[N/A]")], "power_limit_w") is None


@pytest.mark.parametrize(
    "events, warned",
    [
        ("0x0000000000000000", False),
        ("0x0000000000000001", False),  # gpu_idle
        ("0x0000000000000010", False),  # sync_boost
        ("0x0000000000000004", True),  # sw_power_cap
        ("0x0000000000000008", True),  # hw_slowdown
        ("0x0000000000000020", True),  # sw_thermal_slowdown
        ("0x0000000000000040", True),  # hw_thermal_slowdown
        ("0x0000000000000080", True),  # hw_power_brake_slowdown
    ],
)
def test_throttling_now_is_a_warning_never_a_refusal(events, warned):
    result = gpu_peer_check(cluster(spark4=[gpu(events=events, sm="1200")]))
    assert result["refusals"] == []
    assert bool(result["warnings"]) is warned
    if warned:
        assert result["warnings"][0].startswith("spark4: GPU 0 is throttled now (")
        assert "SM clock 1200 of 3003 MHz" in result["warnings"][0]


def test_throttle_warning_names_every_active_reason():
    (message,) = gpu_peer_check(cluster(spark1=[gpu(events="0x0000000000000065")]))["warnings"]
    assert "(sw_power_cap, sw_thermal_slowdown, hw_thermal_slowdown;" in message


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"mismatch": "fail"}, "mismatch='fail'; expected one of refuse, warn"),
        ({"threshold_pct": 100}, "threshold_pct=100; expected"),
        ({"threshold_pct": "10"}, "threshold_pct='10'; expected"),
        ({"threshold_pct": True}, "threshold_pct=True; expected"),
    ],
)
def test_bad_settings_are_refused(kwargs, needle):
    with pytest.raises(GpuPeersError, match="^" + needle.replace("(", r"\(").replace(")", r"\)")):
        gpu_peer_check(cluster(), **kwargs)


def test_bad_facts_are_refused_naming_the_host():
    with pytest.raises(GpuPeersError, match="^spark9: expected the facts"):
        gpu_peer_check({"spark9": "nope"})


def test_state_line():
    assert gpu_state_line({"dgxspark_gpus": [gpu()]}, "spark1") == (
        "spark1: GPU 0 SM 208/3003 MHz, power 4.05 W of limit n/a, clock events gpu_idle"
    )
    assert gpu_state_line([gpu(limit="700.00", events="0x0000000000000000")], "h") == (
        "h: GPU 0 SM 208/3003 MHz, power 4.05 W of limit 700 W, clock events none"
    )
    assert gpu_state_line([], "x") == "x: no GPU answered"
    assert gpu_state_line([{"index": 0}], "old") == "old: GPU 0 SM n/a/n/a MHz, power n/a of limit n/a, clock events n/a"
