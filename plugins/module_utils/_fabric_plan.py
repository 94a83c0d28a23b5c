# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Cross-node checks of the fabric plan in the inventory, run before any
node is changed."""

from __future__ import annotations

import ipaddress

MIN_MTU = 1280
MAX_MTU = 9216


def _link_problems(host, position, link):
    where = "%s: roce_fabric_links[%d]" % (host, position)
    problems = []
    for key in ("netdev", "hca", "address", "prefix"):
        if link.get(key) in (None, ""):
            problems.append("%s has no %s; set it in the inventory" % (where, key))
    if problems:
        return problems, None
    try:
        prefix = int(link["prefix"])
        if not 1 <= prefix <= 32:
            raise ValueError
    except (TypeError, ValueError):
        return ["%s prefix %r is not an IPv4 prefix length (1-32)" % (where, link["prefix"])], None
    try:
        interface = ipaddress.IPv4Interface("%s/%d" % (link["address"], prefix))
    except ValueError:
        return ["%s address %r is not an IPv4 address" % (where, link["address"])], None
    if interface.ip == interface.network.network_address or interface.ip == interface.network.broadcast_address:
        return ["%s address %s is the network or broadcast address of %s" % (where, interface.ip, interface.network)], None
    return [], interface


def fabric_plan_problems(nodes):
    """Return readable problems with the fabric plan, empty when it is sound.

    O(nodes) maps host name to C({"mtu": int, "links": [{netdev, hca, address, prefix}, ...]}).
    Link N of every node is one half of the fabric: NCCL pairs HCAs by list
    position, so every node needs the same number of links, link N of all
    nodes shares one subnet and the halves of one node sit on different subnets.
    """
    problems = []
    interfaces = {}
    mtus = {}
    for host in sorted(nodes):
        plan = nodes[host]
        try:
            mtu = int(plan.get("mtu"))
        except (TypeError, ValueError):
            problems.append("%s: roce_fabric_mtu %r is not a number" % (host, plan.get("mtu")))
        else:
            if not MIN_MTU <= mtu <= MAX_MTU:
                problems.append("%s: roce_fabric_mtu %d is outside %d-%d" % (host, mtu, MIN_MTU, MAX_MTU))
            mtus[host] = mtu
        links = plan.get("links") or []
        if not links:
            problems.append("%s: roce_fabric_links is empty; give the node at least one fabric link" % host)
        interfaces[host] = []
        for position, link in enumerate(links):
            link_problems, interface = _link_problems(host, position, link)
            problems.extend(link_problems)
            interfaces[host].append(interface)

    if len(set(mtus.values())) > 1:
        listing = ", ".join("%s=%d" % (h, m) for h, m in sorted(mtus.items()))
        problems.append("roce_fabric_mtu differs between nodes (%s); every node of the fabric needs the same MTU" % listing)

    counts = {host: len(nodes[host].get("links") or []) for host in nodes}
    if len(set(counts.values())) > 1:
        listing = ", ".join("%s=%d" % (h, c) for h, c in sorted(counts.items()))
        problems.append("nodes have different numbers of fabric links (%s); NCCL pairs HCAs by position, so give every node the same links" % listing)

    owners = {}
    for host, host_interfaces in sorted(interfaces.items()):
        for position, interface in enumerate(host_interfaces):
            if interface is not None:
                owners.setdefault(interface.ip, []).append("%s roce_fabric_links[%d]" % (host, position))
    for address, users in sorted(owners.items()):
        if len(users) > 1:
            problems.append("address %s is used by %s; fabric addresses must be unique" % (address, " and ".join(users)))

    positions = max(counts.values()) if counts else 0
    for position in range(positions):
        networks = {}
        for host, host_interfaces in sorted(interfaces.items()):
            if position < len(host_interfaces) and host_interfaces[position] is not None:
                networks.setdefault(host_interfaces[position].network, []).append(host)
        if len(networks) > 1:
            listing = "; ".join("%s: %s" % (net, ", ".join(hosts)) for net, hosts in sorted(networks.items()))
            problems.append("roce_fabric_links[%d] is not on one subnet across nodes (%s); put this half of every node in one subnet" % (position, listing))

    for host, host_interfaces in sorted(interfaces.items()):
        seen = {}
        for position, interface in enumerate(host_interfaces):
            if interface is None:
                continue
            if interface.network in seen:
                problems.append(
                    "%s: roce_fabric_links[%d] and [%d] share subnet %s; each half of the port needs its own subnet"
                    % (host, seen[interface.network], position, interface.network)
                )
            seen.setdefault(interface.network, position)
    return problems


def counters_by_hca(results):
    """Merge the C(counters) of C(roce_gid) loop results into C(hca/name) -> value."""
    merged = {}
    for result in results:
        hca = (result.get("item") or {}).get("hca", "?")
        for name, value in (result.get("counters") or {}).items():
            merged["%s/%s" % (hca, name)] = value
    return merged
