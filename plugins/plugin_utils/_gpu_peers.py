# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU clocks, power limits and clock-event (throttle) reasons of the nodes, against their peers.

The nodes of one tensor-parallel group run in lock step: the slowest GPU sets the pace of all.
A node whose top SM clock or power limit is set lower than the others' is a configuration
difference that stays until fixed (preflight refuses it); a node throttled now (power cap,
thermal or hardware slowdown) may recover by itself (a warning).

Input: {host: the facts of dgxspark.cluster.gpu_facts (a dict with dgxspark_gpus) or the
list of GPU dicts itself}. Standard library only, so the logic is unit-tested without Ansible.
"""

from __future__ import annotations

import statistics

# Reasons that slow a GPU under load. gpu_idle (nothing runs), applications_clocks_setting,
# sync_boost and display_clock_setting are not throttling.
THROTTLE_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)

# gpu dict key -> (what it is, unit, how to look and fix)
COMPARED = (
    ("clocks_max_sm_mhz", "max SM clock", "MHz",
     "compare `nvidia-smi -q -d CLOCK` on the nodes; a clock lock set with `nvidia-smi -lgc` is undone "
     "by `nvidia-smi -rgc`, and a different firmware or driver shows in `nvidia-smi -q`"),
    ("power_limit_w", "power limit", "W",
     "compare `nvidia-smi -q -d POWER` on the nodes; `nvidia-smi -pl <watts>` sets the limit back "
     "(the default is power.default_limit)"),
)

MISMATCH_MODES = ("refuse", "warn")


class GpuPeersError(ValueError):
    """The input is not what the comparison needs."""


def _gpus(host, facts):
    if isinstance(facts, dict):
        facts = facts.get("dgxspark_gpus", [])
    if not isinstance(facts, list) or not all(isinstance(gpu, dict) for gpu in facts):
        raise GpuPeersError(
            "%s: expected the facts of dgxspark.cluster.gpu_facts (dgxspark_gpus, a list of dicts), found %r"
            % (host, facts)
        )
    return facts


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fmt(value):
    return "%g" % value


def node_value(gpus, key):
    """The lowest reading of KEY over a node's GPUS (the slowest GPU paces the node); None when none reads."""
    values = [_number(gpu.get(key)) for gpu in gpus]
    values = [v for v in values if v is not None]
    return min(values) if values else None


def throttle_reasons(gpu):
    """The reasons of THROTTLE_REASONS active on GPU now, in bit order."""
    return [reason for reason in gpu.get("clock_event_reasons") or [] if reason in THROTTLE_REASONS]


def gpu_peer_check(nodes, threshold_pct=10, mismatch="refuse", variables=None):
    """Compare each node's GPUs with its peers'.

    Returns a dict:

    - ``refusals``: messages for nodes whose max SM clock or power limit is more than
      THRESHOLD_PCT below the median of the other nodes (empty with MISMATCH=warn);
    - ``warnings``: the same messages with MISMATCH=warn, and one per node with a throttle
      reason active (THROTTLE_REASONS);
    - ``medians``: key -> the median over all nodes that read it (None when none does);
    - ``hosts``: host -> the refusal and warning messages naming it.

    A value that reads None (the GB10 prints [N/A] for its power limit) is left out of the
    comparison; a node needs at least one peer that reads the value to be compared.
    VARIABLES names the threshold and mismatch variables in messages.
    """
    variables = dict({"threshold": "threshold_pct", "mismatch": "mismatch"}, **(variables or {}))
    if not isinstance(nodes, dict):
        raise GpuPeersError("expected {host: gpu facts}, found %r" % (nodes,))
    if mismatch not in MISMATCH_MODES:
        raise GpuPeersError(
            "%s=%r; expected one of %s" % (variables["mismatch"], mismatch, ", ".join(MISMATCH_MODES))
        )
    if isinstance(threshold_pct, bool) or not isinstance(threshold_pct, (int, float)) or not 0 <= threshold_pct < 100:
        raise GpuPeersError(
            "%s=%r; expected a number of percent from 0 to below 100" % (variables["threshold"], threshold_pct)
        )
    gpus = {host: _gpus(host, facts) for host, facts in sorted(nodes.items())}
    refusals, warnings, medians = [], [], {}
    per_host = {host: [] for host in gpus}
    for key, what, unit, fix in COMPARED:
        values = {host: node_value(host_gpus, key) for host, host_gpus in gpus.items()}
        read = {host: value for host, value in values.items() if value is not None}
        medians[key] = statistics.median(read.values()) if read else None
        for host, value in read.items():
            peers = {peer: v for peer, v in read.items() if peer != host}
            if not peers:
                continue
            median = statistics.median(peers.values())
            if median <= 0 or value >= median * (1 - threshold_pct / 100.0):
                continue
            message = (
                "%s: GPU %s %s %s, %.1f %% below its peers' median %s %s (%s); more than %s=%s %% below, "
                "so this node would slow every tensor-parallel group it is in. Fix: %s%s."
                % (
                    host, what, _fmt(value), unit, 100.0 * (median - value) / median, _fmt(median), unit,
                    ", ".join("%s %s" % (peer, _fmt(v)) for peer, v in sorted(peers.items())),
                    variables["threshold"], _fmt(threshold_pct), fix,
                    # Already a warning: going on needs no setting.
                    "; or set %s=warn to go on" % variables["mismatch"] if mismatch == "refuse" else "",
                )
            )
            (refusals if mismatch == "refuse" else warnings).append(message)
            per_host[host].append(message)
    for host, host_gpus in gpus.items():
        for gpu in host_gpus:
            reasons = throttle_reasons(gpu)
            if reasons:
                message = (
                    "%s: GPU %s is throttled now (%s; SM clock %s of %s MHz); it slows its tensor-parallel group "
                    "while it lasts. Check cooling and power supply, and `nvidia-smi -q -d PERFORMANCE` on the node."
                    % (host, gpu.get("index", "?"), ", ".join(reasons),
                       gpu.get("clocks_sm_mhz", "?"), gpu.get("clocks_max_sm_mhz", "?"))
                )
                warnings.append(message)
                per_host[host].append(message)
    return {"refusals": refusals, "warnings": warnings, "medians": medians, "hosts": per_host}


def _or_na(value, unit):
    return "n/a" if value is None else "%s %s" % (_fmt(value), unit)


def gpu_state_line(facts, host="node"):
    """One short line of a node's GPU state: 'spark1: GPU 0 SM 208/3003 MHz, power 4.05 W of
    limit n/a, clock events gpu_idle'."""
    gpus = _gpus(host, facts)
    if not gpus:
        return "%s: no GPU answered" % host
    parts = []
    for gpu in gpus:
        events = gpu.get("clock_event_reasons")
        parts.append(
            "GPU %s SM %s/%s MHz, power %s of limit %s, clock events %s"
            % (
                gpu.get("index", "?"),
                "n/a" if gpu.get("clocks_sm_mhz") is None else gpu["clocks_sm_mhz"],
                "n/a" if gpu.get("clocks_max_sm_mhz") is None else gpu["clocks_max_sm_mhz"],
                _or_na(_number(gpu.get("power_draw_w")), "W"),
                _or_na(_number(gpu.get("power_limit_w")), "W"),
                "n/a" if events is None else (", ".join(events) or "none"),
            )
        )
    return "%s: %s" % (host, "; ".join(parts))
