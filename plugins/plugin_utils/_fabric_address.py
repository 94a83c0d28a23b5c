# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""A node's fabric address, by one rule for every role that needs it.

The roce_fabric role resolves it and exports it as C(roce_fabric_node_address)
(:data:`ADDRESS_FACT`): validation reads it for the engine ranks, the engine
for C(VLLM_HOST_IP) and the head's address, the balancer for its upstreams,
the image and weights spread and the fabric report for where to connect.

The rule (:func:`node_link`): a node's links are C(roce_fabric_links), whose
default is the one link of C(roce_fabric_netdev), C(roce_fabric_hca) and
C(roce_fabric_address). Once the links are read (C(roce_fabric_link_state),
one state per planned link, in plan order), the address is that of the first
link with carrier: NCCL leaves a link without carrier out, so the rank must
not be reached there. Before they are read, or when none has carrier, it is
the first planned link's.

:func:`engine_hosts` is the one place the engine hosts' ranks and addresses
are gathered (the engine check, the engine's head, the balancer). A host
whose fact is not there (playbooks/balancer.yml on its own runs no fabric
task) gets the address the fabric role would export before reading its links,
from the same inventory variables by the same rule.

Standard library only, unit-tested without Ansible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

ADDRESS_FACT = "roce_fabric_node_address"
RANK_VARIABLE = "engine_service_rank"


def _is_list(value):
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, Mapping))


def node_link(links, link_state=None):
    """The planned link (a copy of its mapping) that carries the node's fabric address.

    O(links) is the node's C(roce_fabric_links); O(link_state), when the links were
    read, its C(roce_fabric_link_state) (one state per planned link, in plan order).
    The first link whose state has carrier, else the first planned link; C({}) when
    the links are not a list of mappings (the fabric plan check names that)."""
    if not _is_list(links) or not links:
        return {}
    for position, state in enumerate(link_state if _is_list(link_state) else []):
        if position < len(links) and isinstance(state, Mapping) and state.get("carrier") \
                and isinstance(links[position], Mapping):
            return dict(links[position])
    return dict(links[0]) if isinstance(links[0], Mapping) else {}


def node_address(links, link_state=None):
    """The address of :func:`node_link`, or None where it has none."""
    address = node_link(links, link_state).get("address")
    return None if address in (None, "") else str(address)


def planned_links(host_vars):
    """The links the roce_fabric role plans from a host's inventory variables alone:
    C(roce_fabric_links) where the host has them, else its default, the one link of
    C(roce_fabric_address) (the other keys of that link do not bear on the address)."""
    if "roce_fabric_links" in host_vars:
        return host_vars.get("roce_fabric_links")
    return [{"address": host_vars.get("roce_fabric_address")}]


def host_address(host_vars):
    """A host's fabric address: its C(roce_fabric_node_address) where the roce_fabric
    role exported it, else the one that role would export before reading the links."""
    if ADDRESS_FACT in host_vars:
        address = host_vars.get(ADDRESS_FACT)
        return None if address in (None, "") else str(address)
    return node_address(planned_links(host_vars))


def engine_hosts(hosts, hostvars, address_variable=ADDRESS_FACT):
    """Each engine host's C(rank) (C(engine_service_rank), None when unset) and
    C(fabric_address) (:func:`host_address`), as the engine check and the balancer
    take them: C({host: {rank, fabric_address}}).

    O(hostvars) maps each host of O(hosts) to its variables. A balancer outside the
    fabric names another host variable to reach the heads on in O(address_variable)
    (e.g. C(ansible_host)), read as the inventory gives it."""
    found = {}
    for host in hosts:
        host_vars = hostvars[host]
        if address_variable == ADDRESS_FACT:
            address = host_address(host_vars)
        else:
            address = host_vars.get(address_variable)
        found[host] = {"rank": host_vars.get(RANK_VARIABLE), "fabric_address": address}
    return found
