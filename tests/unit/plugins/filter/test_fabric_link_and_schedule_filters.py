# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The link-check and report-schedule filters: registered, documented, and
their errors reach the play as filter errors with the same message."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from unit_support import assert_filter_error_matches

from ansible_collections.dgxspark.cluster.plugins.filter import fabric_links, fabric_schedule
from ansible_collections.dgxspark.cluster.plugins.module_utils._fabric_links import FabricLinkError, ping_plan, verdict
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_schedule import (
    FabricScheduleError,
    plan_digest,
    schedule,
)

FILTER_DIR = Path(fabric_links.__file__).parent
LINK_FILTERS = fabric_links.FilterModule().filters()
SCHEDULE_FILTERS = fabric_schedule.FilterModule().filters()
PLANS = {"spark1": {"mtu": 9000, "links": [{"netdev": "f0", "hca": "h0", "address": "10.0.0.1", "prefix": 24}]},
         "spark2": {"mtu": 9000, "links": [{"netdev": "f0", "hca": "h0", "address": "10.0.0.2", "prefix": 24}]}}


def test_the_filters_are_registered_and_documented():
    assert sorted(LINK_FILTERS) == ["fabric_link_verdict", "fabric_ping_plan"]
    assert sorted(SCHEDULE_FILTERS) == ["fabric_plan_digest", "fabric_report_schedule"]
    for name in list(LINK_FILTERS) + list(SCHEDULE_FILTERS):
        doc = yaml.safe_load((FILTER_DIR / (name + ".yml")).read_text())
        assert doc["DOCUMENTATION"]["name"] == name


def test_the_filters_are_the_module_utils_functions():
    assert LINK_FILTERS["fabric_ping_plan"](PLANS, "spark1") == ping_plan(PLANS, "spark1")
    check = {"links": [], "pings": [], "waited": 0}
    assert LINK_FILTERS["fabric_link_verdict"](check, "spark1") == verdict(check, "spark1")
    digest = SCHEDULE_FILTERS["fabric_plan_digest"](PLANS, {})
    assert digest == plan_digest(PLANS, {})
    assert SCHEDULE_FILTERS["fabric_report_schedule"](None, digest, "auto") == schedule(None, digest, "auto")


@pytest.mark.parametrize(
    "name, filters, error, args",
    [
        ("fabric_ping_plan", LINK_FILTERS, FabricLinkError, (PLANS, "spark9")),
        ("fabric_link_verdict", LINK_FILTERS, FabricLinkError, ({}, "spark1")),
        ("fabric_plan_digest", SCHEDULE_FILTERS, FabricScheduleError, ({},)),
        ("fabric_report_schedule", SCHEDULE_FILTERS, FabricScheduleError, (None, "sha256:x", "sometimes")),
    ],
)
def test_errors_become_filter_errors_with_the_same_message(name, filters, error, args):
    function = {"fabric_ping_plan": ping_plan, "fabric_link_verdict": verdict,
                "fabric_plan_digest": plan_digest, "fabric_report_schedule": schedule}[name]
    assert_filter_error_matches(error, lambda: function(*args), lambda: filters[name](*args))
