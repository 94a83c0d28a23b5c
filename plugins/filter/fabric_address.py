# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible.errors import AnsibleError
from jinja2 import Undefined

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_address import (
    ADDRESS_FACT,
    RANK_VARIABLE,
    engine_hosts,
    node_link,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import plain


def _read(host_vars, name):
    # A value built from a variable the host lacks counts as unset, as
    # default(none) would have it: the checks that read the result name what is
    # missing (the engine check, the balancer's upstreams).
    try:
        value = host_vars.get(name)
    except AnsibleError:
        return None
    return None if isinstance(value, Undefined) else value


def _fabric_node_link(links, link_state=None):
    return node_link(plain(links), plain(link_state))


def _engine_hosts(hosts, hostvars, address_variable=ADDRESS_FACT):
    # Only the variables the rule reads are templated, each host's once.
    names = (ADDRESS_FACT, "roce_fabric_links", "roce_fabric_address", RANK_VARIABLE, address_variable)
    read = {}
    for host in hosts:
        host_vars = hostvars[host]
        read[host] = {name: plain(_read(host_vars, name)) for name in names if name in host_vars}
    return engine_hosts(hosts, read, address_variable)


class FilterModule:
    def filters(self):
        return {
            "fabric_node_link": _fabric_node_link,
            "engine_hosts": _engine_hosts,
        }
