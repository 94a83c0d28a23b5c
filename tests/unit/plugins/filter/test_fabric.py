# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from itertools import permutations

import pytest

from unit_support import FIXTURES as UNIT_FIXTURES
from unit_support import assert_filter_error_matches

from ansible_collections.dgxspark.cluster.plugins.filter.fabric import FilterModule
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report import (
    build_report,
    directed_pairs,
    pair_rounds,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_markdown import render_markdown
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_parsers import FabricReportError

FILTERS = FilterModule().filters()
fabric_pair_rounds = FILTERS["fabric_pair_rounds"]
fabric_report = FILTERS["fabric_report"]
fabric_report_markdown = FILTERS["fabric_report_markdown"]

FIXTURES = UNIT_FIXTURES / "fabric"
HOSTS = ["spark1", "spark2", "spark3"]


def results(test="ib_write_lat", name="perftest_write_lat_spark.txt"):
    stdout = (FIXTURES / name).read_text()
    return [{"src": src, "dst": dst, "test": test, "rc": 0, "stdout": stdout} for src, dst in permutations(HOSTS, 2)]


def test_filter_module_exposes_the_three_filters():
    assert sorted(FilterModule().filters()) == ["fabric_pair_rounds", "fabric_report", "fabric_report_markdown"]


def test_pair_rounds_filter_returns_rounds_or_directed_pairs():
    assert fabric_pair_rounds(HOSTS) == pair_rounds(HOSTS)
    assert fabric_pair_rounds(HOSTS, directed=True) == directed_pairs(pair_rounds(HOSTS))
    assert len(fabric_pair_rounds(HOSTS, directed=True)) == 6


def test_report_filters_wrap_the_report_logic():
    thresholds = {"max_lat_p99_us": 1.5}
    metadata = {"device": "roceP2p1s0f1", "gid": 11}
    report = fabric_report(results(), hosts=HOSTS, thresholds=thresholds, metadata=metadata)
    assert report == build_report(HOSTS, results(), None, None, thresholds, metadata)
    assert len(report["violations"]) == 6
    assert fabric_report_markdown(report) == render_markdown(report)
    assert "`device=roceP2p1s0f1 gid=11 tests=ib_write_lat`" in fabric_report_markdown(report)


def test_report_filter_passes_counters_through_by_keyword():
    before = {host: {"rx_crc_errors_phy": 0} for host in HOSTS}
    after = dict(before, spark2={"rx_crc_errors_phy": 4})
    report = fabric_report(results(), HOSTS, counters_before=before, counters_after=after)
    assert report["violations"] == ["spark2: error counter rx_crc_errors_phy rose by 4 during the run (limit 0)"]


@pytest.mark.parametrize(
    "wrapper, function, args",
    [
        (fabric_pair_rounds, pair_rounds, (["spark1"],)),
        (fabric_pair_rounds, pair_rounds, (["spark1", "spark1"],)),
    ],
)
def test_pair_rounds_errors_become_filter_errors_with_the_same_message(wrapper, function, args):
    assert_filter_error_matches(FabricReportError, lambda: function(*args), lambda: wrapper(*args))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"thresholds": {"max_ping_rtt": 1}},
        {"hosts": ["spark1"]},
        {"counters_before": "0"},
    ],
)
def test_report_errors_become_filter_errors_with_the_same_message(kwargs):
    arguments = dict({"hosts": HOSTS}, **kwargs)
    assert_filter_error_matches(
        FabricReportError,
        lambda: build_report(
            arguments["hosts"],
            results(),
            arguments.get("counters_before"),
            arguments.get("counters_after"),
            arguments.get("thresholds"),
        ),
        lambda: fabric_report(results(), **arguments),
    )


def test_markdown_errors_become_filter_errors_with_the_same_message():
    message = assert_filter_error_matches(
        FabricReportError, lambda: render_markdown({"hosts": HOSTS}), lambda: fabric_report_markdown({"hosts": HOSTS})
    )
    assert "needs a build_report() result" in message
