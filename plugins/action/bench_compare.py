# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._bench_compare import (
    BenchCompareError,
    controller_path,
    pick_reports,
    report_paths,
    write_comparison,
)

ARGUMENT_SPEC = {
    "reports": {"type": "raw"},
    "report_dir": {"type": "path", "required": True},
    "dest": {"type": "path"},
    "force": {"type": "bool", "default": False},
}


class ActionModule(ActionBase):
    """Compares two benchmark reports on the controller (plugin_utils/_bench_compare.py)
    and writes the comparison beside them; no node is involved."""

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
            return dict(result, failed=True, msg="bench_compare: %s" % "; ".join(validated.error_messages))
        args = validated.validated_parameters
        report_dir = controller_path(args["report_dir"])
        try:
            if args["reports"] in (None, "", []):
                names = os.listdir(report_dir) if os.path.isdir(report_dir) else []
                reports = pick_reports(report_dir, names)
            else:
                reports = [controller_path(path) for path in report_paths(args["reports"])]
            written = write_comparison(*reports, dest=controller_path(args["dest"]) if args["dest"] else None,
                                       force=args["force"], check_mode=self._task.check_mode)
        except BenchCompareError as exc:
            return dict(result, failed=True, msg=str(exc))
        result.update(written, reports=reports)
        return result
