# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_state import (
    NodeStateError,
    parse_read,
    read_command,
)


class ActionModule(ActionBase):
    """Runs the read script of a spec over the connection, as ansible.builtin.raw runs a
    command (no module, no interpreter start on the node), and returns the parsed state,
    so the result is data when it is registered and no task parses it again."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("spec",))
    _supports_check_mode = True
    _supports_async = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        spec = self._task.args.get("spec")
        try:
            # read_command and parse_read check the spec themselves.
            command = read_command(spec)
        except NodeStateError as exc:
            return dict(result, failed=True, msg="%s: cannot read this spec: %s" % (task_vars.get("inventory_hostname"), exc))
        # Without a terminal, standard error stays apart and lines end without \r
        # (ssh would ask for one for a become command; this one prompts for nothing).
        if self._connection.has_option("use_tty"):
            self._connection.set_option("use_tty", False)
        # stdout and stderr come back as text (the connection's bytes decoded).
        ran = self._low_level_execute_command(command, executable=False)
        try:
            state = parse_read(ran, spec)
        except NodeStateError as exc:
            return dict(
                result, failed=True, rc=ran.get("rc"),
                msg="%s: the node read failed (rc %s): %s" % (task_vars.get("inventory_hostname"), ran.get("rc"), exc),
            )
        result.update(state)
        result["changed"] = False
        return result
