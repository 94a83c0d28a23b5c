# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks of the fabric plan in the inventory, run before any node is changed:
the plan across nodes (:func:`fabric_plan_problems`), each node's links
against what the node has (:func:`node_problems`), and the shape of
C(roce_fabric_links) that every fabric filter relies on (:func:`links_shape_problems`).

Standard library only, unit-tested without Ansible.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

MIN_MTU = 1280
MAX_MTU = 9216
LINK_KEYS = ("netdev", "hca", "address", "prefix")
# How a mistyped roce_fabric_links is fixed, whatever it was given as.
LINKS_EXAMPLE = (
    "Write it as a YAML list of mappings, e.g. roce_fabric_links: [{netdev: enP2p1s0f1np1, hca: roceP2p1s0f1, "
    "address: 192.168.200.11, prefix: 24}], or leave it unset and set roce_fabric_netdev, roce_fabric_hca "
    "and roce_fabric_address."
)
NAME_EXPECTED = {
    "netdev": "one network interface name, e.g. enP2p1s0f1np1. Set roce_fabric_netdev (or the netdev of that "
              "link) to the name 'ip link' shows.",
    "hca": "one RDMA device name, e.g. roceP2p1s0f1. Set roce_fabric_hca (or the hca of that link) to the "
           "name under /sys/class/infiniband.",
}
FABRIC_PORT_FIX = "Set roce_fabric_netdev to the ConnectX-7 port of the fabric (e.g. enP2p1s0f1np1)."
MANAGEMENT_WHY = "two interfaces on one subnet would let management traffic leave over the fabric"


class FabricPlanError(ValueError):
    """Raised for input the checks cannot work with (not for an unsound plan: that is a problem)."""


def _kind(value):
    """What a value is, in the words of a message."""
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (str, bytes)):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, Sequence):
        return "a list"
    return "a %s" % type(value).__name__


def _shown(value, limit=60):
    """A short, stable rendering of a value for a message."""
    if isinstance(value, Mapping):
        return "keys: %s" % (", ".join(sorted(str(key) for key in value)) or "none")
    if isinstance(value, (str, bytes)):
        text = repr(value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))
    elif isinstance(value, Sequence):
        return "%d item%s" % (len(value), "" if len(value) == 1 else "s")
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_list(value):
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, Mapping))


def links_shape_problems(host, links):
    """Problems with the shape of a node's C(roce_fabric_links): a list of mappings whose
    netdev and hca, where given, are names. Empty when every filter can read the links;
    a missing or empty field is left to :func:`fabric_plan_problems`."""
    if links is None or links == "":
        return []
    if not _is_list(links):
        return ["%s: roce_fabric_links is %s (%s); expected a list of links, each a mapping with netdev, hca, "
                "address and prefix. %s" % (host, _kind(links), _shown(links), LINKS_EXAMPLE)]
    problems = []
    for position, link in enumerate(links):
        where = "%s: roce_fabric_links[%d]" % (host, position)
        if not isinstance(link, Mapping):
            problems.append(
                "%s is %s (%s); expected a mapping with netdev, hca, address and prefix. %s"
                % (where, _kind(link), _shown(link), LINKS_EXAMPLE)
            )
            continue
        for key in ("netdev", "hca"):
            value = link.get(key)
            if value not in (None, "") and not isinstance(value, str):
                problems.append("%s %s is %s (%s); expected %s" % (where, key, _kind(value), _shown(value),
                                                                   NAME_EXPECTED[key]))
    return problems


def plans_shape_problems(plans):
    """:func:`links_shape_problems` of every host of O(plans) (host -> C({mtu, links}))."""
    if not isinstance(plans, Mapping):
        return ["the fabric plan is %s; expected a mapping of each host to its roce_fabric_node_plan ({mtu, links})"
                % _kind(plans)]
    problems = []
    for host, plan in plans.items():
        if plan is not None and not isinstance(plan, Mapping):
            problems.append("%s: roce_fabric_node_plan is %s (%s); expected a mapping with mtu and links, as "
                            "roce_fabric's validate.yml publishes it" % (host, _kind(plan), _shown(plan)))
        else:
            problems.extend(links_shape_problems(host, (plan or {}).get("links")))
    return problems


def _link_problems(host, position, link):
    where = "%s: roce_fabric_links[%d]" % (host, position)
    problems = []
    for key in LINK_KEYS:
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
    if not isinstance(nodes, Mapping):
        raise FabricPlanError(
            "the fabric plan must map each host to its roce_fabric_node_plan ({mtu, links}), got %s" % _kind(nodes)
        )
    problems = []
    interfaces = {}
    mtus = {}
    counts = {}
    for host in sorted(nodes):
        plan = nodes[host]
        if not isinstance(plan, Mapping):
            problems.append("%s: roce_fabric_node_plan is %s (%s); expected a mapping with mtu and links, as "
                            "roce_fabric's validate.yml publishes it" % (host, _kind(plan), _shown(plan)))
            continue
        try:
            mtu = int(plan.get("mtu"))
        except (TypeError, ValueError):
            problems.append("%s: roce_fabric_mtu %r is not a number" % (host, plan.get("mtu")))
        else:
            if not MIN_MTU <= mtu <= MAX_MTU:
                problems.append("%s: roce_fabric_mtu %d is outside %d-%d" % (host, mtu, MIN_MTU, MAX_MTU))
            mtus[host] = mtu
        links = plan.get("links") or []
        problems.extend(links_shape_problems(host, links))
        if not _is_list(links):
            continue
        if not links:
            problems.append("%s: roce_fabric_links is empty; give the node at least one fabric link" % host)
        counts[host] = len(links)
        interfaces[host] = []
        for position, link in enumerate(links):
            if not isinstance(link, Mapping):
                interfaces[host].append(None)
                continue
            if any(link.get(key) not in (None, "") and not isinstance(link.get(key), str) for key in ("netdev", "hca")):
                interfaces[host].append(None)  # named by links_shape_problems
                continue
            link_problems, interface = _link_problems(host, position, link)
            problems.extend(link_problems)
            interfaces[host].append(interface)

    if len(set(mtus.values())) > 1:
        listing = ", ".join("%s=%d" % (h, m) for h, m in sorted(mtus.items()))
        problems.append("roce_fabric_mtu differs between nodes (%s); every node of the fabric needs the same MTU" % listing)

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


# --- One node's links against what the node has ------------------------------


def _sorted_names(names):
    """Sorted as Jinja's sort filter sorts: case-insensitively, stable."""
    return sorted(names, key=lambda name: name.lower())


def _listing(value, what):
    """The lines of a read's listing: O(value) is a list of names, or a command
    result (C(rc), C(stdout)) whose failure (a missing directory) lists nothing."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        if value.get("rc") not in (0, "0"):
            return []
        return [line.strip() for line in str(value.get("stdout") or "").splitlines() if line.strip()]
    if _is_list(value):
        return [str(item) for item in value]
    raise FabricPlanError("found %s is %s; expected a list of names or a command result {rc, stdout}"
                          % (what, _kind(value)))


def parse_hca_netdevs(value):
    """RDMA device -> its netdevs (the names under C(<hca>/device/net/)).

    O(value) is that mapping already, or a list of lines (or the result C(rc),
    C(stdout) of the command printing them) of the form C(hca [netdev ...]).
    A device whose netdevs could not be listed maps to an empty list."""
    if isinstance(value, Mapping) and "rc" not in value and "stdout" not in value:
        return {str(hca): [str(n) for n in netdevs] if _is_list(netdevs) else ([str(netdevs)] if netdevs else [])
                for hca, netdevs in value.items()}
    found = {}
    for line in _listing(value, "hcas"):
        words = line.split()
        found[words[0]] = words[1:]
    return found


def truthy(value):
    """A node's or a file's yes/no as YAML, a keyfile or a shell gives it (True, "yes",
    "true", "on", "1"), the one reading of the fabric's modules."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _ip(text):
    try:
        return ipaddress.ip_address(str(text).strip().strip("[]").split("%", maxsplit=1)[0])
    except ValueError:
        return None


def _ipv4_interface(entry):
    """IPv4Interface of a fact's C({address, netmask | prefix | network}), or None."""
    if not isinstance(entry, Mapping) or not entry.get("address"):
        return None
    for mask in (entry.get("netmask"), entry.get("prefix")):
        if mask not in (None, ""):
            try:
                return ipaddress.IPv4Interface("%s/%s" % (entry["address"], mask))
            except ValueError:
                continue
    try:
        return ipaddress.IPv4Interface(str(entry["address"]))
    except ValueError:
        return None


def _fact_interfaces(facts):
    """[(device, [IPv4Interface ...], [ip_address ...])] of the interfaces in O(facts)."""
    if not isinstance(facts, Mapping):
        return []
    names = facts.get("interfaces") or []
    if not _is_list(names):
        return []
    found = []
    for name in names:
        entry = facts.get(str(name).replace("-", "_"))
        if not isinstance(entry, Mapping):
            continue
        ipv4 = entry.get("ipv4")
        entries = list(ipv4) if _is_list(ipv4) else [ipv4]
        secondaries = entry.get("ipv4_secondaries")
        entries += list(secondaries) if _is_list(secondaries) else []
        networks = [iface for iface in (_ipv4_interface(e) for e in entries) if iface is not None]
        addresses = [iface.ip for iface in networks]
        ipv6 = entry.get("ipv6")
        for item in ipv6 if _is_list(ipv6) else []:
            address = _ip(item.get("address")) if isinstance(item, Mapping) else None
            if address is not None:
                addresses.append(address)
        found.append((str(entry.get("device") or name), networks, addresses))
    return found


def _management(facts, management):
    """How Ansible reaches the node, from the facts: C(address) and C(variable)
    (what names it), C(carriers) (interfaces holding that address), C(default)
    (interface of the default route) and C(gateway), and C(networks): each
    management subnet -> the interfaces it is on."""
    management = management if isinstance(management, Mapping) else {}
    interfaces = _fact_interfaces(facts)
    address = _ip(management.get("address") or "")
    carriers = [device for device, _networks, addresses in interfaces if address is not None and address in addresses]
    default = facts.get("default_ipv4") if isinstance(facts, Mapping) else None
    default = default if isinstance(default, Mapping) else {}
    default_device = str(default.get("interface") or "") or None
    networks = {}
    for device, device_networks, _addresses in interfaces:
        if device in carriers or device == default_device:
            for iface in device_networks:
                networks.setdefault(iface.network, [])
                if device not in networks[iface.network]:
                    networks[iface.network].append(device)
    default_iface = _ipv4_interface(default)
    if default_device and default_iface is not None and default_iface.network not in networks:
        networks[default_iface.network] = [default_device]
    return {
        "address": str(management.get("address") or ""),
        "variable": str(management.get("variable") or "ansible_host"),
        "carriers": carriers,
        "default": default_device,
        "gateway": str(default.get("gateway") or ""),
        "networks": networks,
    }


def _management_roles(device, mgmt):
    roles = []
    if device in mgmt["carriers"]:
        roles.append("%s %s" % (mgmt["variable"], mgmt["address"]))
    if device == mgmt["default"]:
        roles.append("default route")
    return "%s: %s" % (device, ", ".join(roles))


def _management_problems(where, link, mgmt, host):
    netdev = link["netdev"]
    if netdev in mgmt["carriers"]:
        return ["%s netdev %s carries %s, the address Ansible reaches %s through (%s); a fabric netdev gets a "
                "static address and would cut the node off. %s"
                % (where, netdev, mgmt["address"], host, mgmt["variable"], FABRIC_PORT_FIX)]
    problems = []
    if netdev == mgmt["default"]:
        via = (", via %s" % mgmt["gateway"]) if mgmt["gateway"] else ""
        problems.append("%s netdev %s is the interface of the node's default route (ansible_facts default_ipv4%s); "
                        "a fabric netdev gets a static address without a gateway and would take the default route "
                        "away. %s" % (where, netdev, via, FABRIC_PORT_FIX))
    try:
        fabric = ipaddress.IPv4Interface("%s/%s" % (link.get("address"), int(link.get("prefix"))))
    except (TypeError, ValueError):
        return problems
    for network, devices in sorted(mgmt["networks"].items()):
        others = [device for device in devices if device != netdev]
        if not others:
            continue
        subnet = "the management subnet %s (%s)" % (network, "; ".join(_management_roles(d, mgmt) for d in others))
        if fabric.ip in network:
            problems.append("%s address %s is inside %s; %s. Set roce_fabric_address (or the address of that link) "
                            "in a subnet of the fabric's own, outside %s."
                            % (where, fabric.ip, subnet, MANAGEMENT_WHY, network))
        elif fabric.network.overlaps(network):
            problems.append("%s subnet %s (address %s, prefix %d) overlaps %s; %s. Set roce_fabric_prefix (or the "
                            "prefix of that link) so that the fabric subnet leaves out %s, or move the fabric to "
                            "another subnet." % (where, fabric.network, fabric.ip, fabric.network.prefixlen, subnet,
                                                 MANAGEMENT_WHY, network))
    return problems


def _pair_problem(where, link, hcas, sysfs_root):
    """The link's hca exists but sysfs says it belongs to another netdev."""
    netdev, hca = link["netdev"], link["hca"]
    owners = hcas.get(hca) or []
    if not owners or netdev in owners:
        return []
    devices = _sorted_names(h for h, netdevs in hcas.items() if netdev in netdevs)
    if devices:
        fix = "Set the hca of that link to the device of %s: %s." % (netdev, ", ".join(devices))
    else:
        listing = ", ".join("%s (%s)" % (h, ", ".join(hcas[h]) or "no netdev") for h in _sorted_names(hcas))
        fix = ("Set the hca of that link to the device of %s: no RDMA device under %s/class/infiniband lists it "
               "(found: %s); check the netdev too." % (netdev, sysfs_root, listing))
    return ["%s pairs hca %s with netdev %s, but %s is the RDMA device of %s (sysfs %s/class/infiniband/%s/device/net/). "
            "%s" % (where, hca, netdev, hca, ", ".join(owners), sysfs_root, hca, fix)]


def node_problems(host, links, found, facts=None, management=None):
    """Return readable problems with one node's fabric links, empty when none.

    O(links) is C(roce_fabric_links); links whose shape is wrong are left to
    :func:`fabric_plan_problems`. O(found) is what the role's read found:
    C(netdevs) (names in C(/sys/class/net), or the result C(rc), C(stdout) of
    listing them), C(hcas) (RDMA device -> its netdevs, or the lines
    C(hca [netdev ...]) the read printed), C(sysfs_root), C(netplan_missing)
    (the netplan backend is chosen but C(/usr/sbin/netplan) is missing) and,
    optionally, C(renderer) (the links' renderer, networkd or NetworkManager),
    C(renderer_setting) (roce_fabric_renderer), C(nm_running) and
    C(use_netplan): NetworkManager is refused where it does not run or
    without the netplan backend.
    O(facts) are the node's C(ansible_facts) with the network subset
    (C(interfaces), one entry per interface, C(default_ipv4)); without them the
    checks that need them are left out. O(management) is how Ansible reaches
    the node: C(address) (C(ansible_host), or the inventory hostname) and
    C(variable) (the name of that variable). A hostname is not resolved: only
    addresses in the facts are compared.

    Refused: a netdev or RDMA device the node lacks, an RDMA device that sysfs
    shows belongs to another netdev, a netdev that carries the management
    address or the default route, a fabric address inside (or a fabric subnet
    overlapping) the management subnet, a fabric address already on another
    interface, the netplan backend without netplan, and NetworkManager as the
    renderer where it does not run or without netplan.
    """
    if not isinstance(found, Mapping):
        raise FabricPlanError("found is %s; expected a mapping with netdevs, hcas, sysfs_root and netplan_missing"
                              % _kind(found))
    netdevs = _listing(found.get("netdevs"), "netdevs")
    hcas = parse_hca_netdevs(found.get("hcas"))
    sysfs_root = str(found.get("sysfs_root") or "/sys")
    found_hcas = _sorted_names(hcas)
    mgmt = _management(facts, management)
    interfaces = _fact_interfaces(facts)
    problems = []
    for position, link in enumerate(links if _is_list(links) else []):
        if not isinstance(link, Mapping) or not isinstance(link.get("netdev"), str) \
                or not isinstance(link.get("hca"), str):
            continue
        where = "%s: roce_fabric_links[%d]" % (host, position)
        netdev, hca = link["netdev"], link["hca"]
        if netdev not in netdevs:
            problems.append("%s has no network interface %s (roce_fabric_links / roce_fabric_netdev). "
                            "Interfaces present: %s." % (host, netdev, ", ".join(_sorted_names(netdevs))))
        if hca not in hcas:
            problems.append("%s has no RDMA device %s under %s/class/infiniband (found: %s). Set roce_fabric_hca "
                            "(or the hca of roce_fabric_links) to the device of %s; check that the mlx5 driver "
                            "is loaded." % (host, hca, sysfs_root, ", ".join(found_hcas) or "none", netdev))
        problems.extend(_management_problems(where, link, mgmt, host))
        # The HCA of a management netdev is beside the point: that netdev is refused.
        if hca in hcas and netdev in netdevs and netdev not in mgmt["carriers"] + [mgmt["default"]]:
            problems.extend(_pair_problem(where, link, hcas, sysfs_root))
        address = _ip(link.get("address") or "")
        holders = []
        for device, _networks, addresses in interfaces:
            if device != netdev and address is not None and address in addresses and device not in holders:
                holders.append(device)
        if holders:
            problems.append("%s: fabric address %s for %s is already on %s. Remove it there or choose another "
                            "roce_fabric_address." % (host, link.get("address"), netdev, ", ".join(holders)))
    if truthy(found.get("netplan_missing")):
        problems.append("%s: roce_fabric_backend is netplan but /usr/sbin/netplan is missing; install netplan.io "
                        "or set roce_fabric_backend to auto or networkd." % host)
    problems.extend(_renderer_problems(host, found))
    return problems


def _renderer_problems(host, found):
    """The links' renderer (C(renderer), from C(renderer_setting)) against the node: NetworkManager
    is reached through netplan only, and only where it runs."""
    if str(found.get("renderer") or "networkd") != "NetworkManager":
        return []
    nm_running = truthy(found.get("nm_running"))
    if not nm_running:
        return ["%s: roce_fabric_renderer is NetworkManager but NetworkManager.service does not run; start it "
                "(systemctl enable --now NetworkManager) or set roce_fabric_renderer to auto or networkd." % host]
    if "use_netplan" in found and not truthy(found.get("use_netplan")):
        why = ("roce_fabric_renderer is NetworkManager" if found.get("renderer_setting") == "NetworkManager"
               else "NetworkManager runs on the node (roce_fabric_renderer auto picks it)")
        return ["%s: %s, but roce_fabric_backend writes systemd-networkd files, which NetworkManager does not "
                "read: two managers would own the fabric ports. Set roce_fabric_backend to auto or netplan (netplan "
                "writes the links for NetworkManager), or set roce_fabric_renderer to networkd after marking the "
                "ports unmanaged in NetworkManager (an unmanaged-devices=interface-name:<netdev> entry under "
                "/etc/NetworkManager/conf.d/)." % (host, why)]
    return []


def counters_by_hca(results):
    """Merge the C(counters) of C(roce_gid) loop results into C(hca/name) -> value."""
    merged = {}
    for result in results:
        hca = (result.get("item") or {}).get("hca", "?")
        for name, value in (result.get("counters") or {}).items():
            merged["%s/%s" % (hca, name)] = value
    return merged
