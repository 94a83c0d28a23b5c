# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible.errors import AnsibleError

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_check import (
    InventoryCheckError,
    inventory_placeholders,
    placeholder_message,
)

# What the placeholder rules read of each host; the API key only as set or not.
CHECKED_VARIABLES = (
    "ansible_host",
    "engine_image_ref",
    "engine_image_strategy",
    "engine_image_registry_mirror",
    "model_weights_hf_endpoint",
    "model_weights_hf_repo_id",
    "model_weights_hf_revision",
    "preflight_require_api_key",
)


def _read(host_vars, name):
    # A value built from a variable the host lacks counts as unset: the role that
    # uses it names what is missing.
    try:
        return host_vars.get(name)
    except AnsibleError:
        return None


def _inventory_placeholders(hostvars, hosts):
    values = {}
    for host in hosts:
        host_vars = hostvars[host]
        found = {name: _read(host_vars, name) for name in CHECKED_VARIABLES}
        key = _read(host_vars, "engine_service_api_key")
        found["engine_service_api_key_set"] = None if key is None else len(str(key)) > 0
        values[host] = found
    return inventory_placeholders(values, list(hosts))


class FilterModule:
    def filters(self):
        return {
            "inventory_placeholders": as_filter(_inventory_placeholders, InventoryCheckError),
            "placeholder_message": as_filter(placeholder_message, InventoryCheckError),
        }
