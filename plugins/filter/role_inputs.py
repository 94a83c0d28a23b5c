# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.filter.node_software import plain
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._role_inputs import RoleInputsError, role_input_problems


def _role_input_problems(specs, values, host):
    # The validator deep-copies what it judges (see plain()).
    return role_input_problems(plain(specs), plain(values), host)


class FilterModule:
    def filters(self):
        return {"role_input_problems": as_filter(_role_input_problems, RoleInputsError)}
