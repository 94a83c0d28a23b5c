# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
version_added: "0.1.0"
type: aggregate
short_description: Load the filter, test, lookup and action plugins once, before the first task
description:
  - Ansible runs each task of each host in a worker process forked from the controller's main
    process. A filter, test or action plugin that the main process has not loaded is imported again
    by every one of those workers; for this collection's filters that is about 50 ms of CPU per
    worker, some 0.12 s of wall time per task on four nodes and two controller cores.
  - This callback loads the collection's filters, its node_read action, its role_template lookup (every role
    renders its units with it) and the builtin filters and tests once, when the playbook starts, so that every
    worker inherits them. It prints nothing and
    changes no result; without it the playbooks do the same, only slower.
  - Enable it with C(callbacks_enabled = dgxspark.cluster.preload) in C(ansible.cfg), as the
    repository's C(ansible.cfg) does.
requirements:
  - Enabled in C(callbacks_enabled).
"""

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader, lookup_loader, test_loader

# One name resolves every filter file of a collection (they are loaded together), and
# one builtin name each loads the builtin filters and tests.
PRELOADED_FILTERS = ("dgxspark.cluster.node_file_set_pending", "ansible.builtin.to_json")
# Every role reads its node with this action.
PRELOADED_ACTIONS = ("dgxspark.cluster.node_read",)
PRELOADED_TESTS = ("ansible.builtin.changed",)
# The roles render their units, drop-ins and link files with this lookup.
PRELOADED_LOOKUPS = ("dgxspark.cluster.role_template",)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dgxspark.cluster.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        for name in PRELOADED_FILTERS:
            if filter_loader.get(name) is None:
                self._display.warning("preload: filter %s was not found; tasks load it themselves" % name)
        for name in PRELOADED_ACTIONS:
            if action_loader.get(name, class_only=True) is None:
                self._display.warning("preload: action %s was not found; tasks load it themselves" % name)
        for name in PRELOADED_LOOKUPS:
            if lookup_loader.get(name, class_only=True) is None:
                self._display.warning("preload: lookup %s was not found; tasks load it themselves" % name)
        for name in PRELOADED_TESTS:
            if test_loader.get(name) is None:
                self._display.warning("preload: test %s was not found; tasks load it themselves" % name)
