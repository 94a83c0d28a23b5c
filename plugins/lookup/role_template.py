# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: role_template
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
version_added: "0.1.0"
short_description: A template of the role rendered with the task's variables, without copying them
description:
  - Renders a file of the role's C(templates/) directory (found as M(ansible.builtin.template) finds it) with the
    variables of the task that uses it, and returns the text. The roles write units, drop-ins and link files
    with it through M(dgxspark.cluster.file_set), which judges the text against the node on every run.
  - C(ansible.builtin.template)'s lookup deep-copies every variable of the host on each call (about 20 to 30 ms
    on the controller); this one layers O(template_vars) over the task's variables without copying them
    (about 1.5 ms), so a no-op run that renders every unit to compare it costs no more than one that holds
    the units in role variables.
  - Unlike C(ansible.builtin.template), it adds no C(template_*) variables and no C(ansible_managed), since a
    file compared with the node on every run must not depend on the controller, the clock or the template's
    modification time. A template writes C({{ ansible_managed | default('Ansible managed') }}) for the header.
  - Rendered like a template file (C(trim_blocks), a backslash inside an expression left as it is, the trailing
    newline kept).
options:
  _terms:
    description: Names of the templates, relative to the role's C(templates/) directory (or the play's).
    required: true
    type: list
    elements: str
  template_vars:
    description: Variables the templates see beside the task's, and over them.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Write the unit
  dgxspark.cluster.file_set:
    files:
      - path: /etc/systemd/system/dgxspark-node-metrics.service
        mode: "0644"
        content: "{{ lookup('dgxspark.cluster.role_template', 'dgxspark-node-metrics.service.j2') }}"

- name: Write the networkd file of one link
  dgxspark.cluster.file_set:
    files:
      - path: /etc/systemd/network/60-dgxspark-{{ fabric_link.netdev }}.network
        mode: "0644"
        content: "{{ lookup('dgxspark.cluster.role_template', 'link.network.j2', template_vars={'link': fabric_link}) }}"
"""

RETURN = r"""
_raw:
  description: The rendered text of each template, in the order named.
  type: list
  elements: str
"""

import collections
import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.template import trust_as_template


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables if variables is not None else {}
        extra = self.get_option("template_vars") or {}
        texts = []
        for term in terms:
            path = self.find_file_in_search_path(variables, "templates", term, ignore_missing=True)
            if not path:
                raise AnsibleLookupError("role_template: no template %s in the role's templates/ directory" % term)
            source = trust_as_template(self._loader.get_text_file_contents(path))
            # A ChainMap layer instead of ansible.builtin.template's deepcopy: templating
            # never writes to the variables, so they need no copy of their own.
            scope = collections.ChainMap(dict(extra), variables) if extra else variables
            templar = self._templar.copy_with_new_env(available_variables=scope, searchpath=[os.path.dirname(path)])
            text = templar.template(source, escape_backslashes=False)
            if not isinstance(text, str):
                raise AnsibleLookupError("role_template: %s rendered %s, not text" % (term, type(text).__name__))
            texts.append(text)
        return texts
