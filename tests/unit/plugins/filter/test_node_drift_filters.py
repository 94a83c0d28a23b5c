# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.node_drift import FilterModule

FILTERS = FilterModule().filters()


def test_every_filter_has_a_doc_sidecar():
    from unit_support import REPO_ROOT

    for name in FILTERS:
        assert (REPO_ROOT / "plugins" / "filter" / ("%s.yml" % name)).is_file(), name


def test_filters_answer():
    verdict = FILTERS["nvidia_driver_kernel_verdict"]("boot 6.8.0-1011-nvidia\n", "6.8.0-1010-nvidia", "spark2", False, "p-")
    assert verdict["state"] == "refuse"
    assert FILTERS["node_package_holds"]("install installed libnccl2 2.27\n", ["libnccl*"])["to_hold"] == ["libnccl2"]
    assert FILTERS["node_pin_drift"]("install installed a 2\n", ["a"], "1") == ["a is at 2, pinned 1"]
    assert FILTERS["nvidia_driver_version_drift"]({"a": "1", "b": "1"}) == []


def test_errors_reach_the_play_as_filter_errors():
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_kernel_repair_method"):
        FILTERS["nvidia_driver_kernel_verdict"]("", "6.8.0", method="rpm")
