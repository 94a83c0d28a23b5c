# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: engine_settings
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
version_added: "0.1.0"
short_description: The engine settings of a host, as the engine configuration filters take them
description:
  - Returns one mapping of every engine setting the collection declares (the rows of
    C(plugins/plugin_utils/_engine_settings.py)), each read from its variable C(engine_service_<name>) and
    templated, without the prefix.
  - A setting is never left out because a line naming it is missing; a setting whose variable is not defined
    fails the lookup, naming the variable. The engine_service role's C(defaults/main.yml) defines every one.
  - A value that templates to C(omit) leaves its setting out, which the engine checks report as not set.
  - With O(host_vars), another role reads the engine's settings of a host (C(hostvars[host])), where the engine
    role's defaults are not defined; a setting the host does not set takes its row's default.
options:
  host_vars:
    description:
      - The variables of an engine host, C(hostvars[host]), to read instead of the play's; V({}) for none, which gives
        every row's default.
      - Only settings whose default is a plain value (not a template) can be read this way.
    type: raw
  names:
    description: The settings to return, without the C(engine_service_) prefix; every setting when not given.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Render the arguments of this rank
  ansible.builtin.set_fact:
    engine_argv: "{{ lookup('dgxspark.cluster.engine_settings') | dgxspark.cluster.engine_rank_argv(0, '192.168.200.11') }}"

- name: Read the layout of the first engine host from another role
  ansible.builtin.set_fact:
    engine_layout: >-
      {{ lookup('dgxspark.cluster.engine_settings', host_vars=hostvars[groups['dgxspark_cluster'][0]],
                names=['tensor_parallel_size', 'replicas', 'api_port']) }}
"""

RETURN = r"""
_raw:
  description: One mapping of setting name (the variable without C(engine_service_)) to its templated value.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import EngineConfigError, read_settings


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if terms:
            raise AnsibleLookupError("engine_settings takes no terms; it reads every engine setting itself")
        self.set_options(var_options=variables, direct=kwargs)
        try:
            return [read_settings(variables or {}, self._templar.template, host_vars=self.get_option("host_vars"),
                                  names=self.get_option("names"))]
        except EngineConfigError as exc:
            raise AnsibleLookupError("engine_settings: %s" % exc) from exc
