# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._progress_action import ProgressActionBase


class ActionModule(ProgressActionBase):
    """Runs engine_image, showing every progress_interval seconds while a node
    loads the image a peer streams: the bytes received, rate and time left
    (plugin_utils/_progress_action.py). The other states read, pull or tag
    through the docker CLI, which reports nothing along the way, so they run
    as before."""

    PROGRESS_VARIABLE = "engine_image_progress_interval"

    def wants_progress(self, args):
        return args.get("state") == "received"

    def progress_label(self, args, record):
        return "image from %s" % args.get("source_address")

    def moved(self, result):
        return result.get("received_bytes") or 0, result.get("seconds") or 0
