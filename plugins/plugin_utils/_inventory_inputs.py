# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Inventory inputs no role declares, numbers outside their range, groups a layout needs.

Judged by playbooks/inventory_check.yml, on the controller, before any play has run on a
node: a node's hostvars then hold only what the inventory (or -e) sets and cached facts
(named ansible_*), never a registered result or a set_fact of the roles. That is the rule
that keeps the collection's internal variables (engine_service_started, preflight_node...)
out of the unknown-variable check.

Standard library only (and the engine settings' rows), so it is unit-tested without Ansible.
"""

from __future__ import annotations

import difflib
import numbers
from collections import namedtuple

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import SETTINGS, _variable

# The range of every timeout, count, size, interval and port input that is not an engine
# setting (those carry theirs in _engine_settings.py's rows): (minimum, maximum), inclusive,
# None for no bound. tests/unit checks that every int/float option of every argument_specs
# file has a range here, in an engine setting's row, or choices.
PORT = (1, 65535)
INPUT_RANGES = {
    "balancer_port": PORT,
    "balancer_max_fails": (0, 100),
    "balancer_drain_timeout": (0, 86400),
    "bench_max_tokens": (1, 1048576),
    # A client-side bound: a short one fails the requests it cuts and the run goes on
    # (molecule's bench test cuts every request with 0.05 s).
    "bench_request_timeout": (0.01, 86400),
    "bench_field_context_repeats": (1, 1000),
    "bench_field_wave_tokens": (1, 10485760),
    "bench_sample_interval": (0.1, 3600),
    "bench_sample_max_seconds": (1, 604800),
    "bench_quality_max_tokens": (1, 1048576),
    "bench_quality_timeout": (1, 86400),
    "bench_community_runs": (1, 1000),
    "bench_community_timeout": (1, 604800),
    "container_runtime_apt_pin_priority": (1, 32767),
    "engine_image_port": PORT,
    "engine_image_transfer_timeout": (60, 604800),
    "engine_image_idle_timeout": (10, 86400),
    "engine_image_progress_interval": (0.1, 3600),
    "engine_image_pull_min_free_gb": (0, 100000),
    "engine_image_load_space_factor": (1, 100),
    "engine_image_headroom_gb": (0, 100000),
    # The upper bound, N-1 of the layout, is the engine validation's (_engine_validation.py).
    "engine_service_rank": (0, None),
    "engine_service_keep_versions": (1, 100),
    "engine_service_smoke_max_tokens": (1, 1048576),
    "engine_service_watchdog_interval": (1, 3600),
    "engine_service_watchdog_follow_interval": (1, 3600),
    "engine_service_watchdog_failures": (1, 1000),
    "engine_service_watchdog_restarts": (0, 100),
    "engine_service_watchdog_restart_window": (60, 604800),
    "engine_service_gid_port": (1, 255),
    "fabric_report_ping_count": (1, 100000),
    "fabric_report_ping_interval": (0.002, 60),
    "fabric_report_iperf3_seconds": (1, 3600),
    "fabric_report_iperf3_streams": (1, 128),
    "fabric_report_iperf3_port": PORT,
    "fabric_report_perftest_size": (2, 1073741824),
    "fabric_report_perftest_iterations": (1, 100000000),
    "fabric_report_perftest_port": PORT,
    "host_hardening_earlyoom_mem_percent": (0, 100),
    "host_hardening_earlyoom_swap_percent": (0, 100),
    "host_hardening_earlyoom_report_interval": (0, 86400),
    "host_hardening_sshd_oom_score_adjust": (-1000, 1000),
    "model_weights_space_margin_gb": (0, 100000),
    "model_weights_rsync_port": PORT,
    "model_weights_rsync_bwlimit": (0, 100000000),
    "model_weights_rsync_io_timeout": (10, 86400),
    "model_weights_sync_timeout": (60, 604800),
    "model_weights_progress_interval": (0.1, 3600),
    "monitoring_node_exporter_port": PORT,
    "monitoring_collector_interval": (1, 3600),
    "monitoring_fabric_rate_gbps": (0.001, 10000),
    "monitoring_kv_cache_threshold": (0, 1),
    "monitoring_memory_available_ratio": (0, 1),
    "nvidia_driver_apt_pin_priority": (1, 32767),
    "nvidia_driver_reboot_timeout": (60, 7200),
    "preflight_min_memory_mb": (1, 100000000),
    "preflight_gpu_peer_threshold_pct": (0, 99),
    "roce_fabric_prefix": (1, 32),
    "roce_fabric_mtu": (1280, 9216),
    "roce_fabric_link_timeout": (1, 3600),
    "roce_fabric_ping_count": (1, 1000),
    "roce_fabric_ping_interval": (0.002, 60),
    "roce_fabric_ping_timeout": (1, 600),
    "roce_fabric_ib_port": (1, 255),
}

# An input that names an inventory group, and what the layout needs of that group: the
# fields of its row, judged on each host's own value (else its role's default, read from
# the role's argument_specs).
#   group: the group the collection's playbooks target for the role. A play's hosts: is
#     templated before any host's variables exist (extra vars and the play's own vars only,
#     no group_vars or host_vars), so the playbook names the group itself, and a host named
#     in another group would be left out of the play: the input must name this one.
#   plays: the playbooks whose hosts: name the group (tests/unit checks they do).
#   role_hosts: the groups the play runs the role on; their hosts are judged on the
#     default when they leave the input out.
#   holds: what the group holds, for the messages.
#   absent: what the layout is when the group is missing and the input is left at its
#     default; None: a missing group is refused. A group the inventory names itself must
#     exist.
#   empty: None when an empty group is refused (else what it means).
#   needed_by: (variable, above, what, fix): a host whose number in variable is above
#     `above` needs the group even where absent allows it to be missing; or None.
GroupInput = namedtuple("GroupInput", "group plays role_hosts holds absent empty needed_by")

_BALANCER_HOSTS = ("dgxspark_balancer", "dgxspark_cluster")
_MONITORING_HOSTS = ("dgxspark_cluster", "monitoring")
GROUP_INPUTS = {
    "balancer_group": GroupInput(
        "dgxspark_balancer", ("playbooks/balancer.yml",), _BALANCER_HOSTS, "the host nginx runs on",
        absent="the balancer runs on the engine's rank 0", empty="the balancer runs on the engine's rank 0",
        needed_by=("engine_service_replicas", 1, "a fleet that needs the balancer",
                   "Add the group (empty, the balancer runs on rank 0) or set engine_service_replicas to 1.")),
    "balancer_engine_group": GroupInput(
        "dgxspark_cluster", ("playbooks/balancer.yml",), _BALANCER_HOSTS, "the engine hosts",
        absent=None, empty=None, needed_by=None),
    "monitoring_server_group": GroupInput(
        "monitoring", ("playbooks/site.yml", "playbooks/status.yml"), _MONITORING_HOSTS,
        "the host Prometheus runs on", absent="Prometheus runs on the first host of monitoring_node_group",
        empty=None, needed_by=None),
    "monitoring_node_group": GroupInput(
        "dgxspark_cluster", ("playbooks/site.yml", "playbooks/status.yml"), _MONITORING_HOSTS, "the engine hosts",
        absent=None, empty=None, needed_by=None),
}


class InventoryInputsError(Exception):
    """The specs handed in are unusable."""


def declared_inputs(specs_by_role):
    """Every option of every entry point of O(specs_by_role) (role name to its parsed
    C(meta/argument_specs.yml)): option name to its spec (the first entry point's)."""
    if not isinstance(specs_by_role, dict) or not specs_by_role:
        raise InventoryInputsError("expected a mapping of role name to its argument specs, got %r" % (specs_by_role,))
    declared = {}
    for role, spec in specs_by_role.items():
        entry_points = (spec or {}).get("argument_specs") if isinstance(spec, dict) else None
        if not isinstance(entry_points, dict):
            raise InventoryInputsError("roles/%s/meta/argument_specs.yml has no argument_specs mapping" % role)
        for entry_point in entry_points.values():
            for name, option in ((entry_point or {}).get("options") or {}).items():
                declared.setdefault(name, option)
    return declared


def role_prefixes(specs_by_role):
    """The variable prefix of each role: its name and an underscore."""
    return tuple(sorted(role + "_" for role in specs_by_role))


def _shown(value):
    # A misspelt name can hold a secret (a vaulted value arrives decrypted): only numbers,
    # switches and null are repeated in the message.
    if value is None or isinstance(value, (bool, numbers.Number)):
        return "to %r" % (value,)
    return "its value not shown: it may be a secret"


def unknown_input_problems(declared, prefixes, host, host_vars):
    """One message per variable of O(host_vars) named with a role's prefix that no role declares."""
    problems = []
    for name in sorted(host_vars):
        if not name.startswith(prefixes) or name in declared:
            continue
        closest = difflib.get_close_matches(name, list(declared), n=1, cutoff=0.6)
        hint = "did you mean %s? " % closest[0] if closest else ""
        problems.append(
            "%s: %s is set (%s) but no role declares it, so it would be ignored and the default used; %sRename "
            "or remove it in the inventory (the inputs are in roles/*/meta/argument_specs.yml)."
            % (host, name, _shown(host_vars[name]), hint))
    return problems


def input_ranges():
    """Variable name to (minimum, maximum) for every bounded number: INPUT_RANGES and the engine settings' rows."""
    ranges = dict(INPUT_RANGES)
    for setting in SETTINGS:
        if setting.kind in ("int", "float") and (setting.minimum is not None or setting.maximum is not None):
            ranges[_variable(setting.name)] = (setting.minimum, setting.maximum)
    return ranges


def _number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Number):
        return value
    try:
        return float(str(value).strip())
    except ValueError:
        return None


def range_problems(ranges, host, host_vars):
    """One message per value of O(host_vars) outside its range (a value that is no number is
    left to the role's spec, which names its type)."""
    problems = []
    for name in sorted(set(ranges) & set(host_vars)):
        value = _number(host_vars[name])
        minimum, maximum = ranges[name]
        if value is None or ((minimum is None or value >= minimum) and (maximum is None or value <= maximum)):
            continue
        expected = ("from %s to %s" % (minimum, maximum) if minimum is not None and maximum is not None
                    else "%s or more" % minimum if minimum is not None else "at most %s" % maximum)
        problems.append("%s: %s is %s; expected a number %s. Set it in that range in the inventory."
                        % (host, name, host_vars[name], expected))
    return problems


def _group_body(name, row, value, set_here, groups, needed):
    """Why a host's O(value) of the group input O(name) (its row O(row)) does not fit the
    inventory's O(groups) (name to hosts), without the host; None when it fits."""
    shown = value if set_here else "%s (the default)" % value
    # The default is the group the playbooks name (tests/unit checks it).
    if set_here and value != row.group:
        return ("%s is %s; expected %s, the group %s run%s the role on (a play's hosts: is read before any host's "
                "variables, so the playbook names the group itself and the hosts of %s would be left out). Put %s in "
                "the group %s and remove %s from the inventory."
                % (name, value, row.group, " and ".join(row.plays), "" if len(row.plays) > 1 else "s", value,
                   row.holds, row.group, name))
    if value not in groups:
        if set_here:
            return ("%s is %s, but the inventory has no group %s; expected a group that holds %s. Add the group, or "
                    "remove %s from the inventory%s."
                    % (name, value, value, row.holds, name,
                       " (without the group, %s)" % row.absent if row.absent else ""))
        if needed:
            variable, _above, what, fix = row.needed_by
            return "%s is %s, %s, but the inventory has no group %s. %s" % (variable, needed, what, value, fix)
        if row.absent is None:
            return ("%s is %s, but the inventory has no group %s; expected a group that holds %s. Add the group to "
                    "the inventory." % (name, shown, value, row.holds))
        return None
    if not groups[value] and row.empty is None:
        return ("%s is %s, but the group %s holds no host; expected %s in it. Put %s in the group%s."
                % (name, shown, value, row.holds, row.holds,
                   ", or remove the empty group (without it, %s)" % row.absent if row.absent and not set_here else ""))
    return None


def group_problems(declared, hosts_values, groups, rows=None):
    """One message per problem of an input of O(rows) (GROUP_INPUTS by default) that names
    a group, naming the hosts that have it: a group other than the one the playbooks
    target, a group the inventory names that it lacks, a group a layout needs that is
    missing (a fleet without the balancer's), an empty group a layout refuses.

    O(hosts_values) maps host name to the variables its inventory sets; O(groups) maps
    each group of the inventory to its hosts; O(declared) gives each input's default.
    """
    bodies = {}
    for host, values in hosts_values.items():
        for name, row in (rows or GROUP_INPUTS).items():
            set_here = name in values
            value = values[name] if set_here else (declared.get(name) or {}).get("default", row.group)
            needed = None
            if row.needed_by is not None:
                variable, above = row.needed_by[:2]
                number = _number(values.get(variable))
                if number is not None and number > above:
                    needed = values[variable]
            # A value that is no string is left to the role's spec; a host outside the
            # role's plays that leaves the input out is not the role's.
            if not isinstance(value, str) or not (
                    set_here or needed is not None or any(host in groups.get(group, ()) for group in row.role_hosts)):
                continue
            body = _group_body(name, row, value, set_here, groups, needed)
            if body is not None:
                bodies.setdefault(body, []).append(host)
    return ["%s: %s" % (", ".join(hosts), body) for body, hosts in bodies.items()]


# What the checks read from the roles' specs, built once per run: declared inputs, role
# prefixes and ranges (the filter also uses them to choose which values to template).
InputRules = namedtuple("InputRules", "declared prefixes ranges")


def input_rules(specs_by_role):
    """The InputRules of O(specs_by_role) (role name to its parsed C(meta/argument_specs.yml))."""
    return InputRules(declared_inputs(specs_by_role), role_prefixes(specs_by_role), input_ranges())


def inventory_input_problems(rules, hosts_values, groups):
    """Every problem of every host under O(rules) (input_rules): O(hosts_values) maps host name
    to the variables its inventory sets, O(groups) each group of the inventory to its hosts."""
    if not isinstance(groups, dict):
        raise InventoryInputsError("expected a mapping of each inventory group to its hosts, got %r" % (groups,))
    problems = []
    for host, host_vars in hosts_values.items():
        problems.extend(unknown_input_problems(rules.declared, rules.prefixes, host, host_vars))
        problems.extend(range_problems(rules.ranges, host, host_vars))
    problems.extend(group_problems(rules.declared, hosts_values, groups))
    return problems
