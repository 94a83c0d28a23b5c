# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fabric address filters: registered and documented, and engine_hosts reads a
host variable that cannot be templated as unset (as default(none) did), never as an
error, so that the engine check and the balancer name what is missing."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.errors import AnsibleUndefinedVariable
from jinja2 import StrictUndefined

from ansible_collections.dgxspark.cluster.plugins.filter import fabric_address

FILTERS = fabric_address.FilterModule().filters()
FILTER_DIR = Path(fabric_address.__file__).parent


def test_each_filter_is_registered_and_documented():
    assert set(FILTERS) == {"fabric_node_link", "engine_hosts"}
    for name in FILTERS:
        doc = yaml.safe_load((FILTER_DIR / ("%s.yml" % name)).read_text())
        assert doc["DOCUMENTATION"]["name"] == name


class HostVars(dict):
    """A host's variables as hostvars hands them: some fail or come back undefined when read."""

    def get(self, name, default=None):
        value = super().get(name, default)
        if value == "raise":
            raise AnsibleUndefinedVariable("'nothing' is undefined")
        return StrictUndefined(name=name) if value == "undefined" else value


def test_engine_hosts_read_what_cannot_be_templated_as_unset():
    hostvars = {
        "spark1": HostVars(engine_service_rank=0, roce_fabric_address="raise"),
        "spark2": HostVars(engine_service_rank="undefined", roce_fabric_links="undefined"),
        "spark3": HostVars(engine_service_rank=2, roce_fabric_links=[{"address": "192.168.201.13"}]),
    }
    assert FILTERS["engine_hosts"](["spark1", "spark2", "spark3"], hostvars) == {
        "spark1": {"rank": 0, "fabric_address": None},
        "spark2": {"rank": None, "fabric_address": None},
        "spark3": {"rank": 2, "fabric_address": "192.168.201.13"},
    }


def test_fabric_node_link_returns_a_plain_copy_of_the_link():
    links = ({"netdev": "a", "address": "192.168.201.11"}, {"netdev": "b", "address": "192.168.200.11"})
    link = FILTERS["fabric_node_link"](links, [{"carrier": False}, {"carrier": True}])
    assert link == {"netdev": "b", "address": "192.168.200.11"}
    assert link is not links[1]
