# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._progress_action import ProgressActionBase


class ActionModule(ProgressActionBase):
    """Runs weights_rsync, showing every progress_interval seconds while a peer
    pulls the weights: the bytes transferred, rate and time left
    (plugin_utils/_progress_action.py)."""

    PROGRESS_VARIABLE = "model_weights_progress_interval"
    # The module has no check mode: Ansible skips it there, as it skips a command.
    _supports_check_mode = False

    def progress_label(self, args, record):
        return "weights sync"

    def moved(self, result):
        return result.get("transferred_bytes") or 0, result.get("seconds") or 0
