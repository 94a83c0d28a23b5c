# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.dgxspark.cluster.plugins.module_utils import _image
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter


def read_spec(ref, local_repository=_image.DEFAULT_LOCAL_REPOSITORY, registry_mirror=None):
    return _image.read_spec(_image.refs(ref, local_repository, registry_mirror))


def inspect(state, ref, local_repository=_image.DEFAULT_LOCAL_REPOSITORY, registry_mirror=None):
    return _image.inspect_from_read(state, _image.refs(ref, local_repository, registry_mirror))


class FilterModule:
    def filters(self):
        return {
            "engine_image_read_spec": as_filter(read_spec, (ValueError, RuntimeError)),
            "engine_image_inspect": as_filter(inspect, (ValueError, RuntimeError)),
        }
