# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""When the fabric report is measured again.

The report is a measurement, not convergence: site.yml measures the full mesh
only when the fabric changed in this run, when the controller holds no report
for the current fabric plan (or the last one failed), or when asked to.
validate.yml always measures. Standard library only, unit-tested without Ansible.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_plan import links_shape_problems, truthy
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report import _normalise_thresholds
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_parsers import FabricReportError

MODES = ("auto", "always", "never")
DIGEST_PREFIX = "sha256:"
FORCE_HINT = "-e fabric_report_run=always or --tags fabric_report measures again"


class FabricScheduleError(ValueError):
    """Raised for a plan or a mode that cannot be scheduled."""


def _int_or_text(value):
    """9000 and "9000" are the same MTU; text that is no number stays text."""
    if isinstance(value, bool):
        return str(value)
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return "" if value is None else str(value)


def _canonical_plan(plans):
    if not isinstance(plans, Mapping) or not plans:
        raise FabricScheduleError(
            "the fabric plan must map each host to its roce_fabric_node_plan ({mtu, links}), got %r" % (plans,)
        )
    canonical = {}
    for host in sorted(plans):
        plan = plans[host]
        if not isinstance(plan, Mapping):
            raise FabricScheduleError(
                "%s: roce_fabric_node_plan must be a mapping with mtu and links, got %r" % (host, plan)
            )
        links = plan.get("links") or []
        problems = links_shape_problems(host, links)
        if problems:
            raise FabricScheduleError("; ".join(problems))
        canonical[str(host)] = {
            "mtu": _int_or_text(plan.get("mtu")),
            # Link order matters: NCCL pairs the HCAs of the nodes by position.
            "links": [
                {
                    "netdev": str(link.get("netdev") or ""),
                    "hca": str(link.get("hca") or ""),
                    "address": str(link.get("address") or ""),
                    "prefix": _int_or_text(link.get("prefix")),
                }
                for link in links
            ],
        }
    return canonical


def plan_digest(plans, thresholds=None):
    """Digest of what a fabric report measured against.

    O(plans) maps host -> C({mtu, links: [{netdev, hca, address, prefix}]}) (each
    host's C(roce_fabric_node_plan)); O(thresholds) are C(fabric_report_thresholds),
    compared after their defaults are applied, so V({}) and the defaults written
    out digest alike. Returns C(sha256:<hex>).
    """
    try:
        limits = _normalise_thresholds(thresholds)
    except FabricReportError as exc:
        raise FabricScheduleError(str(exc)) from exc
    text = json.dumps(
        {"hosts": _canonical_plan(plans), "thresholds": limits}, sort_keys=True, separators=(",", ":")
    )
    return DIGEST_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _changed_hosts(changed):
    if changed is None or changed is False:
        return []
    if changed is True:
        return ["a node"]
    if isinstance(changed, Mapping):
        return sorted(str(host) for host, value in changed.items() if truthy(value))
    if isinstance(changed, (str, bytes)) or not isinstance(changed, Sequence):
        raise FabricScheduleError(
            "changed must be a mapping host -> bool, a list of changed hosts or a bool, got %r" % (changed,)
        )
    return sorted(str(host) for host in changed)


def _previous(report):
    """(mapping, why not usable) of the report read from the controller."""
    if report is None or report == "" or report == {}:
        return None, "missing"
    if isinstance(report, (str, bytes)):
        try:
            report = json.loads(report)
        except ValueError as exc:
            return None, "unreadable JSON (%s)" % exc
    if not isinstance(report, Mapping):
        return None, "not a report (a JSON %s)" % type(report).__name__
    return report, None


def schedule(report, digest, mode="auto", changed=None, requested=False, path="the last fabric report"):
    """Decide whether the fabric report is measured in this run.

    O(report) is the last report as read from the controller (its JSON text, the
    decoded mapping, or None/empty when there is none), O(digest) the
    plan_digest() of the current plan, O(mode) C(fabric_report_run), O(changed)
    which hosts' fabric configuration changed in this run (host -> bool, a list of
    hosts or a bool), O(requested) whether the run asked for the report
    (C(--tags fabric_report)) and O(path) where the report lives, for the message.

    C(never) never measures; C(always) and O(requested) always do; C(auto)
    measures when a fabric link changed, or when no passing report of this plan
    exists. Returns C(measure), C(reason) (why, in words), C(message) (the line
    to print) and C(last) (C(measured_at), C(plan_digest) and C(passed) of the
    last report, or None).
    """
    mode = str(mode).strip().lower() if mode is not None else "auto"
    if mode not in MODES:
        raise FabricScheduleError("fabric_report_run must be one of %s, got %r" % (", ".join(MODES), mode))
    if not isinstance(digest, str) or not digest.startswith(DIGEST_PREFIX):
        raise FabricScheduleError("the plan digest must be a plan_digest() result (sha256:...), got %r" % (digest,))
    hosts = _changed_hosts(changed)
    previous, unusable = _previous(report)
    last = None
    if previous is not None:
        last = {
            "measured_at": previous.get("measured_at"),
            "plan_digest": previous.get("plan_digest"),
            "passed": previous.get("passed"),
        }

    if mode == "never":
        return _verdict(False, "fabric_report_run is never", "Fabric report: not measured (fabric_report_run=never)", last)
    if mode == "always":
        return _measure("fabric_report_run is always", last)
    if truthy(requested):
        return _measure("asked for with --tags fabric_report", last)
    if hosts:
        return _measure("the fabric configuration of %s changed in this run" % ", ".join(hosts), last)
    if previous is None:
        if unusable == "missing":
            return _measure("there is no report at %s yet" % path, last)
        return _measure("the report at %s is %s" % (path, unusable), last)
    if not last["plan_digest"]:
        return _measure("the report at %s records no fabric plan" % path, last)
    if last["plan_digest"] != digest:
        return _measure(
            "the report at %s was measured for another fabric plan (hosts, links, MTU or thresholds)" % path, last
        )
    if last["passed"] is not True:
        return _measure("the last report at %s did not pass its thresholds" % path, last)
    when = last["measured_at"] or "an unknown date"
    message = (
        "Fabric report not measured again: %s (measured %s) matches this fabric plan and no fabric link "
        "changed in this run; %s." % (path, when, FORCE_HINT)
    )
    return _verdict(False, "the report matches this plan and no fabric link changed", message, last)


def _measure(reason, last):
    return _verdict(True, reason, "Fabric report: measuring the full mesh, because %s." % reason, last)


def _verdict(measure, reason, message, last):
    return {"measure": measure, "reason": reason, "message": message, "last": last}
