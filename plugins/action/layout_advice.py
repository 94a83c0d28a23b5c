# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._bench_compare import controller_path
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._layout_advice import AdviceError, write_advice

ARGUMENT_SPEC = {
    "history": {"type": "dict", "required": True},
    "report_dir": {"type": "path", "required": True},
    "current_layout": {"type": "str", "required": True},
    "min_history": {"type": "raw", "default": "1d"},
    "min_requests": {"type": "int", "default": 100},
    "dest": {"type": "path", "required": True},
}


class ActionModule(ActionBase):
    """Weighs the traffic the monitoring host's Prometheus recorded against each layout's
    benchmark (plugin_utils/_layout_advice.py) and writes the advice; no node is involved."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _supports_check_mode = True
    _supports_async = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validated.error_messages:
            return dict(result, failed=True, msg="layout_advice: %s" % "; ".join(validated.error_messages))
        args = validated.validated_parameters
        report_dir = controller_path(args["report_dir"])
        names = os.listdir(report_dir) if os.path.isdir(report_dir) else []
        try:
            written = write_advice(args["history"], report_dir, names, args["current_layout"], args["min_history"],
                                   args["min_requests"], controller_path(args["dest"]), check_mode=self._task.check_mode)
        except AdviceError as exc:
            return dict(result, failed=True, msg=str(exc))
        result.update(written)
        return result
