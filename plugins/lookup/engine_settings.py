# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: engine_settings
author: Contributors to the dgxspark.cluster collection
version_added: "0.1.0"
short_description: The engine settings of a host, as the engine configuration filters take them
description:
  - Returns one mapping of every engine setting the collection declares (the rows of
    C(plugins/plugin_utils/_engine_settings.py)), each read from its variable C(engine_service_<name>) and
    templated, without the prefix.
  - A setting is never left out because a line naming it is missing; a setting whose variable is not defined
    fails the lookup, naming the variable. The engine_service role's C(defaults/main.yml) defines every one.
  - A value that templates to C(omit) leaves its setting out, which the engine checks report as not set.
options: {}
"""

EXAMPLES = r"""
- name: Render the arguments of this rank
  ansible.builtin.set_fact:
    engine_argv: "{{ lookup('dgxspark.cluster.engine_settings') | dgxspark.cluster.engine_rank_argv(0, '192.168.200.11') }}"
"""

RETURN = r"""
_raw:
  description: One mapping of setting name (the variable without C(engine_service_)) to its templated value.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import SETTINGS, VARIABLE_PREFIX


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("engine_settings takes no terms; it reads every engine setting itself")
        variables = variables or {}
        missing = [VARIABLE_PREFIX + setting.name for setting in SETTINGS if VARIABLE_PREFIX + setting.name not in variables]
        if missing:
            raise AnsibleLookupError(
                "%s %s not defined; every engine setting needs its variable (roles/engine_service/defaults/main.yml "
                "defines them all, written by tools/engine-settings)"
                % (" and ".join(missing), "is" if len(missing) == 1 else "are")
            )
        raw = {setting.name: variables[VARIABLE_PREFIX + setting.name] for setting in SETTINGS}
        return [self._templar.template(raw)]
