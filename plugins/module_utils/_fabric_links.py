# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fabric link check in one remote call per node, judged on the controller.

Node side (the ``fabric_link_check`` module): read every fabric link with
``ip -j addr show dev X`` (carrier, operstate, MTU, addresses), wait locally
until the links carry their address and MTU, read the RoCE GID of each link's
address, and ping every peer with a don't-fragment frame of MTU-28 bytes, the
pings in parallel.

Controller side (the ``fabric_ping_plan`` and ``fabric_link_verdict`` filters):
which peers a node pings, and what the results mean, with messages that name
the host, the link, what was found, what was expected and the remedy.

Standard library only (the node side runs on the node's Python).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.dgxspark.cluster.plugins.module_utils._roce_gid import (
    RoceGidError,
    read_gid_table,
    read_port_counters,
    read_port_info,
    select_gid,
)

# IPv4 header (20) and ICMP header (8): a ping of MTU-28 bytes fills the MTU.
ICMP_IPV4_OVERHEAD = 28
POLL_SECONDS = 0.5
# The kernel publishes a new address's GID a moment after the address.
GID_WAIT_SECONDS = 10

COLD_BOOT_REMEDY = (
    "A Spark port half that stays down after a warm reboot comes back after a full power-off "
    "(shut down, remove power for 30 s, boot); check the cable and the switch port otherwise."
)
NETWORKD_HINT = "see 'journalctl -u systemd-networkd' on the node."
_PING_WHY_MARKERS = ("loss", "too long", "Frag")


class FabricLinkError(ValueError):
    """Raised for input the check cannot work with."""


def ping_size(mtu):
    return int(mtu) - ICMP_IPV4_OVERHEAD


# --- Node side --------------------------------------------------------------


def parse_ip_addr(stdout):
    """Carrier, operstate, MTU and IPv4 addresses from C(ip -j addr show dev X).

    Returns C(present) (the netdev was shown), C(carrier) (the kernel's
    LOWER_UP flag), C(operstate), C(mtu) and C(addresses).
    """
    try:
        shown = json.loads(stdout or "[]")
    except ValueError:
        shown = []
    if not isinstance(shown, list) or not shown or not isinstance(shown[0], Mapping):
        return {"present": False, "carrier": False, "operstate": None, "mtu": None, "addresses": []}
    entry = shown[0]
    return {
        "present": True,
        "carrier": "LOWER_UP" in (entry.get("flags") or []),
        "operstate": entry.get("operstate"),
        "mtu": entry.get("mtu"),
        "addresses": [a.get("local") for a in entry.get("addr_info") or [] if a.get("family") == "inet"],
    }


def link_state(link, rc, stdout, stderr, mtu):
    """One link's state in the shape of the C(roce_fabric_link_state) fact.

    C(ifname), C(hca), C(address) come from the plan; C(present), C(carrier),
    C(operstate), C(mtu), C(addresses) from the node; C(configured) is True when
    the link has its address and O(mtu); C(error) is what C(ip) said when it failed.
    """
    shown = parse_ip_addr(stdout if rc == 0 else "")
    state = {
        "ifname": link.get("netdev"),
        "hca": link.get("hca"),
        "address": link.get("address"),
        "present": shown["present"],
        "carrier": shown["carrier"],
        "operstate": shown["operstate"],
        "mtu": shown["mtu"],
        "addresses": shown["addresses"],
        "configured": shown["present"] and shown["mtu"] == int(mtu) and link.get("address") in shown["addresses"],
        "error": None if rc == 0 else ((stderr or stdout or "").strip() or "ip exited with rc %s" % rc),
    }
    return state


def ping_argv(netdev, address, mtu, count=3, interval=0.2, timeout=2, ping="ping"):
    """A don't-fragment ping of MTU-28 bytes from O(netdev) to O(address)."""
    return [
        ping, "-c", str(count), "-i", str(interval), "-W", str(timeout),
        "-M", "do", "-s", str(ping_size(mtu)), "-I", str(netdev), str(address),
    ]


def _run(argv, timeout=None):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        return 127, "", "%s: command not found" % argv[0]
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out, "%s did not finish within %s s" % (argv[0], timeout)
    return done.returncode, done.stdout, done.stderr


def resolve_gid(sysfs_root, hca, port, address, netdev, roce_version=2):
    """What the roce_gid module returns for one link: the entry, C(table), C(port) and
    C(counters); on failure C(failed), C(msg) and C(table)."""
    table = []
    try:
        table = read_gid_table(sysfs_root, hca, port)
        entry = select_gid(table, address=address, netdev=netdev, roce_version=roce_version)
        info = read_port_info(sysfs_root, hca, port, netdev=entry["netdev"])
        counters = read_port_counters(sysfs_root, hca, port, netdev=entry["netdev"])
    except RoceGidError as exc:
        return {"failed": True, "msg": str(exc), "table": exc.table or table}
    except ValueError as exc:
        return {"failed": True, "msg": str(exc), "table": table}
    return dict(entry, table=table, port=info, counters=counters)


def _ready(state, gid, wait_for_carrier, configured_since, now, gid_wait):
    if not state["present"]:
        return True
    if not state["carrier"]:
        return not wait_for_carrier
    if not state["configured"]:
        return False
    if gid is None or "index" in gid:
        return True
    return now - configured_since >= gid_wait


def check_links(links, mtu, pings=(), timeout=0, wait_for_carrier=True, ping_count=3, ping_interval=0.2,
                ping_timeout=2, gid=None, gid_wait=GID_WAIT_SECONDS, ip="ip", ping="ping", run=None,
                clock=time.monotonic, sleep=time.sleep):
    """Read, wait for and ping the fabric links of this node.

    O(links) are the node's fabric links (C(netdev), C(address), C(hca)). Waits
    up to O(timeout) seconds until every link has its address and O(mtu) (and,
    with O(gid), the GID of its address, given at most O(gid_wait) seconds
    after the address appeared). A link without carrier is waited for only with
    O(wait_for_carrier) (right after a change a link can take a moment to come
    up). Then sends every ping of O(pings) (C(peer), C(netdev), C(address)) at
    once; a ping over a local link without carrier is skipped. O(gid) is
    C({sysfs_root, port, roce_version}) to resolve each carrier link's GID.

    O(ip) and O(ping) are the commands to run (a path where PATH lacks them).

    Returns C(links) (link_state() each, plus C(gid) with O(gid)), C(pings)
    (the ping with C(rc), C(stdout), C(stderr), or C(skipped) and C(skip_reason))
    and C(waited) (seconds).
    """
    if isinstance(links, (str, bytes)) or not isinstance(links, Sequence) or not links:
        raise FabricLinkError("links must be a non-empty list of fabric links, got %r" % (links,))
    mtu = int(mtu)
    run = run or _run
    start = clock()
    configured_since = {}
    while True:
        now = clock()
        states = []
        gids = []
        for position, link in enumerate(links):
            rc, out, err = run([ip, "-j", "addr", "show", "dev", str(link["netdev"])])
            state = link_state(link, rc, out, err, mtu)
            found = None
            if gid is not None and state["carrier"] and state["present"]:
                found = resolve_gid(gid["sysfs_root"], link.get("hca"), gid.get("port", 1), link["address"],
                                    link["netdev"], gid.get("roce_version", 2))
            if state["configured"]:
                configured_since.setdefault(position, now)
            states.append(state)
            gids.append(found)
        ready = all(
            _ready(state, found, wait_for_carrier, configured_since.get(position, now), now, gid_wait)
            for position, (state, found) in enumerate(zip(states, gids))
        )
        if ready or now - start >= timeout:
            break
        sleep(POLL_SECONDS)
    waited = round(clock() - start, 1)
    if gid is not None:
        for state, found in zip(states, gids):
            state["gid"] = found

    carrier = {state["ifname"]: state["carrier"] for state in states}
    results = [None] * len(pings)
    todo = []
    for number, wanted in enumerate(pings):
        entry = {key: wanted.get(key) for key in ("peer", "position", "netdev", "address")}
        if not carrier.get(entry["netdev"]):
            results[number] = dict(entry, skipped=True, skip_reason="%s has no carrier" % entry["netdev"])
        else:
            todo.append((number, entry))
    if todo:
        limit = ping_count * float(ping_interval) + float(ping_timeout) + 10

        def send(job):
            number, entry = job
            argv = ping_argv(entry["netdev"], entry["address"], mtu, ping_count, ping_interval, ping_timeout, ping)
            rc, out, err = run(argv, limit)
            return number, dict(entry, rc=rc, stdout=out, stderr=err, skipped=False)

        with ThreadPoolExecutor(max_workers=min(32, len(todo))) as pool:
            for number, result in pool.map(send, todo):
                results[number] = result
    return {"links": states, "pings": results, "waited": waited}


# --- Controller side --------------------------------------------------------


def ping_plan(plans, me):
    """The pings O(me) sends: link N of O(me) to link N of every other host.

    O(plans) maps host -> C(roce_fabric_node_plan) (C({mtu, links})), in play
    order. Carrier is not known yet: the node skips links without carrier, and
    the verdict ignores pings to peers whose link has none.
    """
    if not isinstance(plans, Mapping) or me not in plans:
        raise FabricLinkError("the plans must map every play host, %s included, to its fabric plan" % me)
    mine = (plans[me] or {}).get("links") or []
    pings = []
    for peer, plan in plans.items():
        if peer == me:
            continue
        theirs = (plan or {}).get("links") or []
        for position, link in enumerate(mine):
            if position < len(theirs):
                pings.append({"peer": peer, "position": position, "netdev": link.get("netdev"),
                              "address": theirs[position].get("address")})
    return pings


def _ping_why(result):
    lines = (result.get("stdout") or "").splitlines()
    for line in lines:
        if any(marker in line for marker in _PING_WHY_MARKERS):
            return line.strip()
    return (result.get("stderr") or "").strip() or "rc %s" % result.get("rc")


def _peer_link(checks, peer, address):
    """The peer's link that carries O(address), from its own check, or None."""
    check = checks.get(peer) if isinstance(checks, Mapping) else None
    for state in (check or {}).get("links") or []:
        if state.get("address") == address:
            return state
    return None


def _describe(state, mtu):
    if not state.get("present", True):
        return "%s missing (%s; check roce_fabric_links / roce_fabric_netdev)" % (
            state["ifname"], state.get("error") or "not shown by ip")
    return "%s carrier=%s operstate=%s mtu=%s (want %s) addresses=%s (want %s)" % (
        state["ifname"], state["carrier"], state.get("operstate") or "unknown", state["mtu"], mtu,
        ",".join(state["addresses"]) or "none", state["address"],
    )


def verdict(check, host, checks=None, mtu=9000):
    """Judge one node's fabric_link_check result on the controller.

    O(check) is this node's module result, O(checks) every play host's result
    (host -> result; pings to a peer whose link has no carrier, or is not
    configured, are not judged here: that peer's own verdict names its link),
    O(mtu) C(roce_fabric_mtu).

    Returns C(links) (the C(roce_fabric_link_state) fact), C(warnings) (links
    without carrier, with the cold-boot remedy), C(link_problems) (no link with
    carrier, or a link with carrier that lacks its address or MTU),
    C(ping_problems) (peers that do not answer a don't-fragment ping of MTU-28
    bytes) and C(gids) (for each link with carrier, the GID lookup with C(item)
    the link, shaped like the loop results of the roce_gid module).
    """
    if not isinstance(check, Mapping) or not isinstance(check.get("links"), list):
        raise FabricLinkError("%s: expected a fabric_link_check result with links, got %r" % (host, check))
    mtu = int(mtu)
    checks = checks if isinstance(checks, Mapping) else {}
    states = [{key: value for key, value in state.items() if key != "gid"} for state in check["links"]]
    waited = check.get("waited", 0)

    warnings = [
        "WARNING %s: %s has no carrier and is left out of NCCL_IB_HCA. %s" % (host, state["ifname"], COLD_BOOT_REMEDY)
        for state in states if state["present"] and not state["carrier"]
    ]

    link_problems = []
    with_carrier = [state for state in states if state["carrier"]]
    unready = [state for state in with_carrier if not state["configured"]] + [s for s in states if not s["present"]]
    if not with_carrier or unready:
        listing = "; ".join(_describe(state, mtu) for state in states)
        remedy = NETWORKD_HINT
        if not with_carrier:
            remedy = "no fabric link has carrier. %s Otherwise %s" % (COLD_BOOT_REMEDY, NETWORKD_HINT)
        after = " after %s s" % _seconds(waited) if _number(waited) >= 1 else ""
        link_problems.append("%s: fabric links not ready%s: %s; %s" % (host, after, listing, remedy))

    ping_problems = []
    silent = []
    for result in check.get("pings") or []:
        if not result or result.get("skipped") or result.get("rc") == 0:
            continue
        peer_link = _peer_link(checks, result.get("peer"), result.get("address"))
        if peer_link is not None and not (peer_link.get("carrier") and peer_link.get("configured")):
            continue
        silent.append("%s (%s) does not answer a %d-byte don't-fragment ping over %s (%s)" % (
            result.get("peer"), result.get("address"), ping_size(mtu), result.get("netdev"), _ping_why(result)))
    if silent:
        ping_problems.append("%s: %s; every node and switch port on the path needs MTU %d (roce_fabric_mtu)." % (
            host, "; ".join(silent), mtu))

    gids = []
    for state in check["links"]:
        if state.get("carrier") and "gid" in state:
            found = dict(state["gid"] or {"failed": True, "msg": "the GID was not read", "table": []})
            found["item"] = {key: value for key, value in state.items() if key != "gid"}
            gids.append(found)

    return {"links": states, "warnings": warnings, "link_problems": link_problems,
            "ping_problems": ping_problems, "gids": gids}


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _seconds(value):
    number = _number(value)
    return str(int(number)) if number == int(number) else "%.1f" % number
