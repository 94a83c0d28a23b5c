# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Placeholders left in an inventory, found on the controller before any host is contacted.

A copied sample inventory carries values that look real but name nothing: reserved documentation
names and addresses, an image digest of one repeated hex digit, a Hub revision that is a run of
hex digits, an empty secret. Every entry playbook refuses them in one message, grouped by finding
so that four hosts with the same placeholder read as one line. The rules are general (RFC 2606 and
6761 names, RFC 5737 and 3849 documentation ranges), not the sample's literal strings.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from urllib import parse as urlparse

from ansible_collections.dgxspark.cluster.plugins.module_utils._image import parse_ref

# RFC 5737 (IPv4) and RFC 3849 (IPv6) ranges reserved for documentation.
DOCUMENTATION_NETWORKS = tuple(
    ipaddress.ip_network(net) for net in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)
# RFC 2606 and RFC 6761: names that can never resolve to a real host.
RESERVED_DOMAINS = ("example", "example.com", "example.net", "example.org", "invalid")

DIGEST_FIX = (
    "the digest of the image you tested: docker image inspect --format '{{index .RepoDigests 0}}' IMAGE "
    "prints repository@sha256:<64 hex>"
)
REVISION_FIX = (
    "the commit hash of the revision you tested: the 40 hex digits under the Hub's \"Files and versions\" "
    "tab, or git ls-remote {endpoint}/{repo_id} main"
)
API_KEY_FIX = (
    "a vaulted key: ansible-vault encrypt_string --stdin-name engine_service_api_key (type the key, then "
    "Ctrl-D) and paste the !vault block into the inventory; on a private network where the engine may "
    "answer anyone, set preflight_require_api_key: false instead"
)

HEX = "0123456789abcdef"
_HEX_REVISION = re.compile(r"\A[0-9a-f]{7,64}\Z")


class InventoryCheckError(Exception):
    """Raised when the check itself is given something it cannot judge."""


def reserved_name(name):
    """The reserved domain that O(name) is or lies under, or None."""
    labels = str(name).strip().rstrip(".").lower()
    for domain in RESERVED_DOMAINS:
        if labels == domain or labels.endswith("." + domain):
            return domain
    return None


def documentation_network(address):
    """The documentation range O(address) lies in, or None (also for a name that is no address)."""
    try:
        ip = ipaddress.ip_address(str(address).strip().strip("[]"))
    except ValueError:
        return None
    for net in DOCUMENTATION_NETWORKS:
        if ip.version == net.version and ip in net:
            return net
    return None


def host_placeholder(host):
    """Why O(host) (a name or an address, maybe with a port) names no real machine, or None."""
    text = str(host).strip()
    if not text:
        return None
    net = documentation_network(text)
    if net is None and text.count(":") == 1:
        net = documentation_network(text.partition(":")[0])
        text = text.partition(":")[0]
    if net is not None:
        return "an address of the documentation range %s (RFC 5737/3849)" % net
    domain = reserved_name(text)
    if domain is not None:
        return "a name under the reserved domain %s (RFC 2606/6761)" % domain
    return None


def is_hex_run(text):
    """True when every digit of O(text) is the one after (or every one before) the last, cycling
    through the 16 hex digits (0123...ef01..., fedc...10fe...)."""
    steps = {(HEX.index(b) - HEX.index(a)) % 16 for a, b in itertools.pairwise(text)}
    return steps in ({1}, {15})


def digest_placeholder(digest):
    """Why the sha256 O(digest) (sha256:<64 hex>) is made up, or None."""
    hexpart = str(digest).partition(":")[2]
    if len(set(hexpart)) == 1:
        return "a digest of one repeated hex digit"
    if hexpart and is_hex_run(hexpart):
        return "a digest that is a run of consecutive hex digits"
    return None


def revision_placeholder(revision):
    """Why the Hub revision O(revision) is made up, or None (a branch or tag name is judged elsewhere)."""
    text = str(revision).strip().lower()
    if not _HEX_REVISION.match(text):
        return None
    if len(set(text)) == 1:
        return "a revision of one repeated hex digit"
    if is_hex_run(text):
        return "a revision that is a run of consecutive hex digits"
    return None


def url_host(url):
    try:
        return urlparse.urlsplit(str(url)).hostname or ""
    except ValueError:
        return ""


def _finding(variable, found, why, fix):
    return {"variable": variable, "found": found, "why": why, "fix": fix}


def host_placeholders(values):
    """The placeholders among one host's O(values) (variable name to value; a variable the host does
    not set is absent or None), each ``{variable, found, why, fix}``, in a fixed order."""
    if not isinstance(values, dict):
        raise InventoryCheckError("expected a mapping of variable names to values, got %s" % type(values).__name__)
    findings = []

    address = values.get("ansible_host")
    why = host_placeholder(address) if address not in (None, "") else None
    if why:
        findings.append(_finding("ansible_host", address, why, "the management address or DNS name of this node"))

    ref = values.get("engine_image_ref")
    if isinstance(ref, str) and ref:
        try:
            parts = parse_ref(ref)
        except ValueError:
            parts = None  # the engine_image role's validation names what is wrong with it
        if parts is not None:
            why = parts["registry"] and host_placeholder(parts["registry"])
            if why:
                findings.append(_finding("engine_image_ref", ref, "the registry %s is %s" % (parts["registry"], why),
                                         "the registry your image is pushed to, with " + DIGEST_FIX))
            why = digest_placeholder(parts["digest"])
            if why:
                findings.append(_finding("engine_image_ref", parts["digest"], why, DIGEST_FIX))

    mirror = values.get("engine_image_registry_mirror")
    if isinstance(mirror, str) and mirror and values.get("engine_image_strategy") == "registry":
        why = host_placeholder(mirror.partition("/")[0])
        if why:
            findings.append(_finding("engine_image_registry_mirror", mirror, why,
                                     "the host[:port] of the registry mirror the nodes pull through"))

    endpoint = values.get("model_weights_hf_endpoint")
    if isinstance(endpoint, str) and endpoint:
        why = host_placeholder(url_host(endpoint))
        if why:
            findings.append(_finding("model_weights_hf_endpoint", endpoint, why,
                                     "https://huggingface.co or the URL of the Hub mirror the nodes reach"))

    revision = values.get("model_weights_hf_revision")
    if isinstance(revision, str) and revision:
        why = revision_placeholder(revision)
        if why:
            findings.append(_finding("model_weights_hf_revision", revision, why, REVISION_FIX.format(
                endpoint=(endpoint or "https://huggingface.co").rstrip("/"),
                repo_id=values.get("model_weights_hf_repo_id") or "REPO")))

    if values.get("preflight_require_api_key", True) not in (False, "false", "False", "no", 0):
        key_set = values.get("engine_service_api_key_set")
        if not key_set:
            findings.append(_finding("engine_service_api_key", "not set" if key_set is None else "empty",
                                     "the engine would answer every request without a key", API_KEY_FIX))
    return findings


def host_runs(hosts, order):
    """O(hosts) written as runs of the inventory O(order): three or more hosts next to each other
    there read ``first..last``."""
    position = {name: index for index, name in enumerate(order)}
    ordered = sorted(hosts, key=lambda name: (position.get(name, len(order)), name))
    runs = []
    for name in ordered:
        if runs and name in position and runs[-1][-1] in position and position[name] == position[runs[-1][-1]] + 1:
            runs[-1].append(name)
        else:
            runs.append([name])
    return ", ".join(run[0] + ".." + run[-1] if len(run) > 2 else ", ".join(run) for run in runs)


def inventory_placeholders(hosts_values, order=None):
    """Every placeholder of every host (host name to its values, as host_placeholders takes them),
    identical findings grouped: ``[{hosts, variable, found, why, fix}]``, hosts as host_runs writes them."""
    if not isinstance(hosts_values, dict):
        raise InventoryCheckError("expected a mapping of host names to their values, got %s"
                                  % type(hosts_values).__name__)
    order = list(order or hosts_values)
    grouped = {}
    rank = {}
    for host in order:
        if host not in hosts_values:
            continue
        for index, finding in enumerate(host_placeholders(hosts_values[host])):
            key = (finding["variable"], str(finding["found"]), finding["why"], finding["fix"])
            grouped.setdefault(key, []).append(host)
            # One variable's findings stay together, in the order a host's are made.
            rank.setdefault(finding["variable"], (index, len(rank)))
    keys = sorted(grouped, key=lambda key: (rank[key[0]], order.index(grouped[key][0])))
    return [
        {"hosts": host_runs(grouped[key], order), "variable": key[0], "found": key[1], "why": key[2], "fix": key[3]}
        for key in keys
    ]


def placeholder_message(groups):
    """One message naming every grouped placeholder, or an empty string when there is none."""
    if not groups:
        return ""
    lines = ["The inventory still holds %d placeholder value(s); no host was contacted. Replace them:" % len(groups)]
    for number, group in enumerate(groups, 1):
        lines.append("(%d) %s: %s is %s (%s); put %s."
                     % (number, group["hosts"], group["variable"], group["found"], group["why"], group["fix"]))
    return " ".join(lines)
