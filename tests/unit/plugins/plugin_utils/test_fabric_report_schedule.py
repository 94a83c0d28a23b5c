# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""When site.yml measures the fabric report again, and the plan digest it compares."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_schedule import (
    FORCE_HINT,
    FabricScheduleError,
    plan_digest,
    schedule,
)

PATH = "/srv/cluster/reports/fabric/fabric-report.json"


def node(address, mtu=9000, prefix=24, netdev="enP2p1s0f1np1", hca="roceP2p1s0f1"):
    return {"mtu": mtu, "links": [{"netdev": netdev, "hca": hca, "address": address, "prefix": prefix}]}


PLANS = {"spark%d" % i: node("192.168.100.1%d" % i) for i in range(1, 5)}
THRESHOLDS = {"max_ping_loss_pct": 0, "max_counter_increase": 0}
DIGEST = plan_digest(PLANS, THRESHOLDS)


def report(digest=DIGEST, passed=True, measured_at="2026-05-09T07:35:25Z", **extra):
    return dict({"hosts": sorted(PLANS), "passed": passed, "plan_digest": digest, "measured_at": measured_at}, **extra)


# --- plan_digest ------------------------------------------------------------


def test_digest_is_sha256_and_stable():
    assert DIGEST.startswith("sha256:") and len(DIGEST) == len("sha256:") + 64
    assert plan_digest(copy.deepcopy(PLANS), dict(THRESHOLDS)) == DIGEST


def test_digest_ignores_host_order_and_text_numbers():
    reordered = dict(reversed(list(PLANS.items())))
    as_text = {host: node(plan["links"][0]["address"], mtu="9000", prefix="24") for host, plan in PLANS.items()}
    assert plan_digest(reordered, THRESHOLDS) == DIGEST
    assert plan_digest(as_text, THRESHOLDS) == DIGEST


def test_digest_compares_thresholds_with_their_defaults_applied():
    assert plan_digest(PLANS, {}) == DIGEST
    assert plan_digest(PLANS, None) == DIGEST
    assert plan_digest(PLANS, {"min_tcp_gbps": 100}) != DIGEST
    assert plan_digest(PLANS, {"max_lat_p99_us": 5}) == plan_digest(
        PLANS, {"max_lat_p99_us": {"ib_write_lat": 5, "ib_read_lat": 5, "ib_send_lat": 5}}
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["spark2"]["links"][0].update(address="192.168.100.99"),
        lambda p: p["spark2"]["links"][0].update(netdev="enp1s0f1np1"),
        lambda p: p["spark2"]["links"][0].update(hca="rocep1s0f1"),
        lambda p: p["spark2"]["links"][0].update(prefix=16),
        lambda p: p["spark3"].update(mtu=4200),
        lambda p: p.pop("spark4"),
        lambda p: p.update(spark5=node("192.168.100.15")),
        lambda p: p["spark1"]["links"].append(
            {"netdev": "enp1s0f1np1", "hca": "rocep1s0f1", "address": "192.168.101.11", "prefix": 24}
        ),
    ],
    ids=["address", "netdev", "hca", "prefix", "mtu", "host removed", "host added", "link added"],
)
def test_every_part_of_the_plan_changes_the_digest(change):
    plans = copy.deepcopy(PLANS)
    change(plans)
    assert plan_digest(plans, THRESHOLDS) != DIGEST


def test_link_order_changes_the_digest():
    two = {"a": {"mtu": 9000, "links": [{"netdev": "x", "address": "10.0.0.1"}, {"netdev": "y", "address": "10.0.1.1"}]}}
    swapped = {"a": {"mtu": 9000, "links": list(reversed(two["a"]["links"]))}}
    assert plan_digest(two) != plan_digest(swapped)


@pytest.mark.parametrize(
    "plans, thresholds, message",
    [
        ({}, None, "must map each host to its roce_fabric_node_plan"),
        ("spark1", None, "must map each host to its roce_fabric_node_plan"),
        ({"spark1": None}, None, "spark1: roce_fabric_node_plan must be a mapping"),
        ({"spark1": {"mtu": 9000, "links": "enP2p1s0f1np1"}}, None,
         "spark1: roce_fabric_links is a string ('enP2p1s0f1np1'); expected a list of links"),
        ({"spark1": {"mtu": 9000, "links": ["enP2p1s0f1np1"]}}, None,
         "spark1: roce_fabric_links[0] is a string ('enP2p1s0f1np1'); expected a mapping with netdev, hca"),
        (PLANS, {"max_ping_rtt": 1}, "unknown threshold(s) max_ping_rtt"),
        (PLANS, {"min_tcp_gbps": "fast"}, "threshold min_tcp_gbps must be a number"),
    ],
)
def test_unusable_plans_and_thresholds_are_named(plans, thresholds, message):
    with pytest.raises(FabricScheduleError) as raised:
        plan_digest(plans, thresholds)
    assert message in str(raised.value)


# --- schedule -----------------------------------------------------------------


def test_auto_skips_a_passing_report_of_this_plan_and_says_where_and_when():
    decision = schedule(json.dumps(report()), DIGEST, "auto", {h: False for h in PLANS}, False, PATH)
    assert decision["measure"] is False
    assert decision["message"] == (
        "Fabric report not measured again: %s (measured 2026-05-09T07:35:25Z) matches this fabric plan and "
        "no fabric link changed in this run; %s." % (PATH, FORCE_HINT)
    )
    assert "-e fabric_report_run=always" in decision["message"] and "--tags fabric_report" in decision["message"]
    assert decision["last"] == {"measured_at": "2026-05-09T07:35:25Z", "plan_digest": DIGEST, "passed": True}


def test_auto_accepts_the_report_decoded_too():
    assert schedule(report(), DIGEST)["measure"] is False


@pytest.mark.parametrize(
    "changed",
    [{"spark1": False, "spark3": True}, ["spark3"], {"spark3": "True"}],
    ids=["mapping", "list", "text bool"],
)
def test_auto_measures_when_a_node_fabric_changed_and_names_it(changed):
    decision = schedule(report(), DIGEST, "auto", changed, False, PATH)
    assert decision["measure"] is True
    assert decision["reason"] == "the fabric configuration of spark3 changed in this run"
    assert decision["message"] == "Fabric report: measuring the full mesh, because %s." % decision["reason"]


def test_a_changed_bool_counts_too():
    assert schedule(report(), DIGEST, changed=True)["measure"] is True
    assert schedule(report(), DIGEST, changed=False)["measure"] is False


@pytest.mark.parametrize(
    "previous, reason",
    [
        (None, "there is no report at %s yet" % PATH),
        ("", "there is no report at %s yet" % PATH),
        ("{not json", "the report at %s is unreadable JSON" % PATH),
        ("[1, 2]", "the report at %s is not a report (a JSON list)" % PATH),
        (json.dumps(report(digest=None)), "the report at %s records no fabric plan" % PATH),
        (json.dumps({"hosts": ["spark1"], "passed": True}), "the report at %s records no fabric plan" % PATH),
        (json.dumps(report(digest="sha256:" + "0" * 64)), "the report at %s was measured for another fabric plan" % PATH),
        (json.dumps(report(passed=False)), "the last report at %s did not pass its thresholds" % PATH),
    ],
    ids=["missing", "empty", "garbage", "not a mapping", "no digest", "older report", "other plan", "failed"],
)
def test_auto_measures_without_a_passing_report_of_this_plan(previous, reason):
    decision = schedule(previous, DIGEST, "auto", {}, False, PATH)
    assert decision["measure"] is True
    assert decision["reason"].startswith(reason), decision["reason"]


def test_always_and_the_tag_measure_and_never_does_not():
    assert schedule(report(), DIGEST, "always")["reason"] == "fabric_report_run is always"
    assert schedule(report(), DIGEST, "auto", requested=True)["reason"] == "asked for with --tags fabric_report"
    never = schedule(None, DIGEST, "never", changed=True, requested=True)
    assert never["measure"] is False and never["message"] == "Fabric report: not measured (fabric_report_run=never)"


def test_mode_is_read_case_insensitively_and_defaults_to_auto():
    assert schedule(report(), DIGEST, " Always ")["measure"] is True
    assert schedule(report(), DIGEST, None)["measure"] is False


def test_a_report_without_a_date_is_still_named():
    decision = schedule(report(measured_at=None), DIGEST, path=PATH)
    assert decision["measure"] is False and "(measured an unknown date)" in decision["message"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "sometimes"}, "fabric_report_run must be one of auto, always, never, got 'sometimes'"),
        ({"digest": "abc"}, "the plan digest must be a plan_digest() result"),
        ({"changed": 3}, "changed must be a mapping host -> bool, a list of changed hosts or a bool"),
        ({"changed": "spark1"}, "changed must be a mapping host -> bool"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    arguments = dict({"report": None, "digest": DIGEST}, **kwargs)
    with pytest.raises(FabricScheduleError) as raised:
        schedule(**arguments)
    assert message in str(raised.value)
