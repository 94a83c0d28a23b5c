# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.errors import AnsibleError

from ansible_collections.dgxspark.cluster.plugins.filter.node_software import plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_inputs import (
    InventoryInputsError,
    input_rules,
    inventory_input_problems,
)


def _read(host_vars, name):
    # A value built from a variable the host lacks: the name is still judged.
    try:
        return plain(host_vars.get(name))
    except AnsibleError:
        return None


def _role_specs(roles_dir):
    # Every role's spec, so a new role's prefix and inputs count without a list to extend.
    paths = sorted(Path(roles_dir).glob("*/meta/argument_specs.yml"))
    if not paths:
        raise InventoryInputsError("no roles/*/meta/argument_specs.yml under %s" % roles_dir)
    return {path.parts[-3]: yaml.safe_load(path.read_text(encoding="utf-8")) for path in paths}


def _inventory_input_problems(roles_dir, hostvars, hosts, groups):
    rules = input_rules(_role_specs(roles_dir))
    values = {}
    for host in hosts:
        host_vars = hostvars[host]
        # Only the values a rule reads are templated: a declared string built from a
        # variable the controller lacks (sim_checkout_dir) is not this check's business.
        values[host] = {name: _read(host_vars, name) if name in rules.ranges or name not in rules.declared else None
                        for name in host_vars if name.startswith(rules.prefixes)}
    return inventory_input_problems(rules, values, list(groups))


class FilterModule:
    def filters(self):
        return {"inventory_input_problems": as_filter(_inventory_input_problems, InventoryInputsError)}
