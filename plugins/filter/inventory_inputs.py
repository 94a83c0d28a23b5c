# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml
from ansible.errors import AnsibleError
from jinja2 import Undefined
from jinja2.exceptions import UndefinedError

from ansible_collections.dgxspark.cluster.plugins.filter.node_software import plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_inputs import (
    GROUP_INPUTS,
    InventoryInputsError,
    input_rules,
    inventory_input_problems,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_values import (
    VALUE_RULES,
    agreement_problems,
    cluster_wide_inputs,
    value_problems,
)


def _read(host_vars, name):
    # A value built from a variable the host lacks: the name is still judged, the value is
    # not (None). Inside a list or mapping (a patch's src of sim_checkout_dir), the lack
    # shows as jinja2's UndefinedError when plain() reads the item; at the top (an -e
    # engine_image_ref of a group variable that sim-upstream, outside the group, lacks),
    # ansible-core 2.19 hands over an undefined marker instead of raising, which would
    # fail the task's message if a problem carried it.
    try:
        value = plain(host_vars.get(name))
    except (AnsibleError, UndefinedError):
        return None
    return None if _holds_undefined(value) else value


def _holds_undefined(value):
    if isinstance(value, Undefined):
        return True
    if isinstance(value, dict):
        return any(_holds_undefined(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_undefined(item) for item in value)
    return False


def _role_specs(roles_dir):
    # Every role's spec, so a new role's prefix and inputs count without a list to extend.
    paths = sorted(Path(roles_dir).glob("*/meta/argument_specs.yml"))
    if not paths:
        raise InventoryInputsError("no roles/*/meta/argument_specs.yml under %s" % roles_dir)
    return {path.parts[-3]: yaml.safe_load(path.read_text(encoding="utf-8")) for path in paths}


def _plain_defaults(declared, names):
    # A default written as a template is the role's to resolve: the hosts that leave the
    # variable out are then compared as not setting it.
    defaults = {}
    for name in names:
        option = declared.get(name) or {}
        if "default" in option and not (isinstance(option["default"], str) and "{{" in option["default"]):
            defaults[name] = option["default"]
    return defaults


def _inventory_input_problems(roles_dir, hostvars, hosts, groups, cluster_hosts=None, cluster_group="dgxspark_cluster"):
    rules = input_rules(_role_specs(roles_dir))
    shared = cluster_wide_inputs()
    values = {}
    for host in hosts:
        host_vars = hostvars[host]
        # Only the values a rule reads are templated: a declared string built from a
        # variable the controller lacks (sim_checkout_dir) is not this check's business.
        values[host] = {name: _read(host_vars, name)
                        if name in rules.ranges or name not in rules.declared or name in VALUE_RULES or name in shared
                        or name in GROUP_INPUTS else None
                        for name in host_vars if name.startswith(rules.prefixes)}
    # Each group to its hosts (the play's groups, all of them, empty ones too).
    members = {name: list(hosts_of or ()) for name, hosts_of in groups.items()} if isinstance(groups, Mapping) else groups
    problems = inventory_input_problems(rules, values, members)
    for host in hosts:
        problems.extend(value_problems(host, values[host]))
    # The cluster's hosts must agree on the inputs that are one thing for the whole cluster.
    cluster_values = {host: {name: values[host][name] for name in shared if name in values.get(host, {})}
                      for host in cluster_hosts or ()
                      if host in values}
    problems.extend(agreement_problems(cluster_values, shared, _plain_defaults(rules.declared, shared), cluster_group))
    return problems


def _input_value_problems(values, host):
    return value_problems(host, {name: plain(value) for name, value in values.items()})


class FilterModule:
    def filters(self):
        return {
            "inventory_input_problems": as_filter(_inventory_input_problems, InventoryInputsError),
            "input_value_problems": as_filter(_input_value_problems, InventoryInputsError),
        }
