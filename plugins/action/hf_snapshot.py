# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._progress_action import ProgressActionBase


class ActionModule(ProgressActionBase):
    """Runs hf_snapshot, showing the download's bytes, rate and time left every
    progress_interval seconds while it runs (plugin_utils/_progress_action.py).
    A plan (state=planned) only lists and compares, so it runs as before."""

    PROGRESS_VARIABLE = "model_weights_progress_interval"

    def wants_progress(self, args):
        return args.get("state", "present") == "present" and args.get("listing") is None

    def progress_label(self, args, record):
        return "weights download"

    def moved(self, result):
        return result.get("bytes_received") or 0, result.get("seconds") or 0
