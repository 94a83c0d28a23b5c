# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_drift import (
    NodeDriftError,
    driver_version_drift,
    kernel_module_verdict,
    kernel_sort_key,
    package_holds,
    parse_kernel_listing,
    pin_drift,
)

PREFIX = "linux-modules-nvidia-580-open-"
RUNNING = "6.8.0-1010-nvidia"


def listing(*lines):
    return "\n".join(lines) + "\n"


BOTH_WITH_MODULES = listing(
    "boot 6.8.0-1009-nvidia",
    "boot 6.8.0-1010-nvidia",
    "modules 6.8.0-1009-nvidia",
    "nvidia 6.8.0-1009-nvidia /lib/modules/6.8.0-1009-nvidia/updates/dkms/nvidia.ko",
    "modules 6.8.0-1010-nvidia",
    "nvidia 6.8.0-1010-nvidia /lib/modules/6.8.0-1010-nvidia/kernel/nvidia-580-open/nvidia.ko",
)


def test_kernel_order_is_version_order_not_text_order():
    releases = ["6.11.0-1002-nvidia-64k", "6.8.0-1009-nvidia", "6.8.0-1010-nvidia", "6.8.0-999-nvidia"]
    assert sorted(releases, key=kernel_sort_key) == [
        "6.8.0-999-nvidia", "6.8.0-1009-nvidia", "6.8.0-1010-nvidia", "6.11.0-1002-nvidia-64k",
    ]
    # As text, 6.11 sorts before 6.8 and 1009 before 999.
    assert sorted(releases) != sorted(releases, key=kernel_sort_key)


def test_listing_keeps_module_names_only_and_skips_old_images():
    parsed = parse_kernel_listing(listing(
        "boot 6.8.0-1010-nvidia",
        "boot 6.8.0-1010-nvidia.old",
        "nvidia 6.8.0-1010-nvidia /lib/modules/6.8.0-1010-nvidia/updates/dkms/nvidia-uvm.ko",
        "nvidia 6.8.0-1010-nvidia /lib/modules/6.8.0-1010-nvidia/updates/dkms/nvidia.ko.zst",
        "garbage",
    ))
    assert list(parsed) == ["6.8.0-1010-nvidia"]
    assert parsed["6.8.0-1010-nvidia"]["nvidia"] == ["/lib/modules/6.8.0-1010-nvidia/updates/dkms/nvidia.ko.zst"]


def test_every_kernel_with_a_module_is_ok():
    verdict = kernel_module_verdict(BOTH_WITH_MODULES, RUNNING, "spark2", package_prefix=PREFIX)
    assert verdict["state"] == "ok"
    assert verdict["next_boot"] == RUNNING
    assert verdict["blocking"] == [] and verdict["without_module"] == []


@pytest.mark.parametrize("name", ["nvidia.ko.zst", "nvidia.ko.xz", "nvidia.ko"])
def test_a_newer_kernel_with_a_compressed_module_is_ok(name):
    text = BOTH_WITH_MODULES + listing(
        "boot 6.11.0-1002-nvidia-64k",
        "modules 6.11.0-1002-nvidia-64k",
        "nvidia 6.11.0-1002-nvidia-64k /lib/modules/6.11.0-1002-nvidia-64k/updates/dkms/%s" % name,
    )
    verdict = kernel_module_verdict(text, RUNNING, "spark2", package_prefix=PREFIX)
    assert verdict["state"] == "ok"
    assert verdict["next_boot"] == "6.11.0-1002-nvidia-64k"


def test_a_newer_kernel_without_a_module_is_refused_naming_host_kernel_and_fix():
    text = BOTH_WITH_MODULES + listing("boot 6.11.0-1002-nvidia-64k", "modules 6.11.0-1002-nvidia-64k")
    verdict = kernel_module_verdict(text, RUNNING, "spark2", package_prefix=PREFIX)
    assert verdict["state"] == "refuse"
    assert verdict["blocking"] == ["6.11.0-1002-nvidia-64k"]
    message = verdict["message"]
    assert message.startswith("spark2: kernel 6.11.0-1002-nvidia-64k")
    assert "no nvidia.ko" in message and "running 6.8.0-1010-nvidia" in message
    assert "install linux-modules-nvidia-580-open-6.11.0-1002-nvidia-64k" in message
    assert "dkms autoinstall -k 6.11.0-1002-nvidia-64k" in message
    assert "nvidia_driver_kernel_repair=true" in message
    assert verdict["packages"] == [] and verdict["commands"] == []


def test_a_kernel_image_without_a_module_tree_says_so():
    verdict = kernel_module_verdict(BOTH_WITH_MODULES + "boot 6.8.0-1011-nvidia\n", RUNNING, package_prefix=PREFIX)
    assert verdict["state"] == "refuse"
    assert "no /lib/modules/6.8.0-1011-nvidia at all" in verdict["message"]


def test_an_older_kernel_without_a_module_is_reported_not_refused():
    text = listing("boot 6.8.0-1009-nvidia", "boot 6.8.0-1010-nvidia",
                   "nvidia 6.8.0-1010-nvidia /lib/modules/6.8.0-1010-nvidia/updates/dkms/nvidia.ko")
    verdict = kernel_module_verdict(text, RUNNING, package_prefix=PREFIX)
    assert verdict["state"] == "ok"
    assert verdict["without_module"] == ["6.8.0-1009-nvidia"]
    assert "older ones without: 6.8.0-1009-nvidia" in verdict["message"]


def test_a_module_tree_without_a_kernel_image_is_no_kernel():
    # A /lib/modules directory a removed kernel left behind is never booted.
    verdict = kernel_module_verdict(BOTH_WITH_MODULES + "modules 6.11.0-1002-nvidia\n", RUNNING, package_prefix=PREFIX)
    assert verdict["state"] == "ok"


def test_repair_by_package_or_dkms():
    text = BOTH_WITH_MODULES + listing("boot 6.8.0-1011-nvidia", "modules 6.8.0-1011-nvidia")
    by_package = kernel_module_verdict(text, RUNNING, "spark2", True, PREFIX, "package")
    assert by_package["state"] == "repair"
    assert by_package["packages"] == ["linux-modules-nvidia-580-open-6.8.0-1011-nvidia"]
    assert by_package["commands"] == []
    by_dkms = kernel_module_verdict(text, RUNNING, "spark2", True, PREFIX, "dkms")
    assert by_dkms["commands"] == [["dkms", "autoinstall", "-k", "6.8.0-1011-nvidia"]]
    assert "runs dkms autoinstall -k 6.8.0-1011-nvidia" in by_dkms["message"]


def test_bad_repair_settings_are_refused_naming_the_variable():
    with pytest.raises(NodeDriftError, match="nvidia_driver_kernel_repair_method"):
        kernel_module_verdict("", RUNNING, method="apt")
    with pytest.raises(NodeDriftError, match="nvidia_driver_kernel_module_package_prefix"):
        kernel_module_verdict("", RUNNING, package_prefix=" ")


DPKG = listing(
    "hold installed nvidia-container-toolkit 1.17.8-1",
    "install installed nvidia-container-toolkit-base 1.17.8-1",
    "install installed libnvidia-container1 1.17.9-1",
    "install config-files linux-image-6.8.0-1009-nvidia 6.8.0-1009.9",
    "install installed linux-image-6.8.0-1010-nvidia 6.8.0-1010.10",
    "unknown not-installed cuda-toolkit-13-0 <none>",
    "install installed bash 5.2.21-2ubuntu4",
)


def test_holds_only_installed_matching_packages_not_yet_held():
    holds = package_holds(DPKG, ["nvidia-container-toolkit*", "libnvidia-container*", "linux-image-*", "cuda-*"])
    assert sorted(holds["matched"]) == [
        "libnvidia-container1", "linux-image-6.8.0-1010-nvidia", "nvidia-container-toolkit", "nvidia-container-toolkit-base",
    ]
    assert holds["held"] == ["nvidia-container-toolkit"]
    assert holds["to_hold"] == ["libnvidia-container1", "linux-image-6.8.0-1010-nvidia", "nvidia-container-toolkit-base"]


def test_everything_held_leaves_nothing_to_hold():
    assert package_holds("hold installed libnccl2 2.27.7-1+cuda13.0\n", ["libnccl2"])["to_hold"] == []


def test_hold_patterns_must_be_a_list_of_names():
    with pytest.raises(NodeDriftError, match="container_runtime_hold_packages"):
        package_holds(DPKG, "cuda-*", "container_runtime_hold_packages")
    with pytest.raises(NodeDriftError, match="nvidia_driver_hold_packages"):
        package_holds(DPKG, ["cuda-*", ""])


def test_pin_drift_names_the_package_that_moved():
    packages = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1", "libnvidia-container-tools"]
    assert pin_drift(DPKG, packages, "1.17.8-1") == ["libnvidia-container1 is at 1.17.9-1, pinned 1.17.8-1"]
    assert pin_drift(DPKG, packages, "") == []


def test_driver_version_drift_names_the_odd_node():
    assert driver_version_drift({"spark1": "580.95.05", "spark2": "580.95.05", "spark3": "580.95.05"}) == []
    assert driver_version_drift({"spark1": "580.95.05", "spark2": "580.82.07", "spark3": "580.95.05"}) == [
        "spark2: the driver answers 580.82.07, the other nodes 580.95.05 (2 of 3)"
    ]
    assert driver_version_drift({"spark1": "580.95.05", "spark2": ""}) == ["spark2: no NVIDIA driver answers"]
    # A tie goes to the newest, so the node left behind is the odd one.
    assert driver_version_drift({"spark1": "580.95.05", "spark2": "580.105.08"}) == [
        "spark1: the driver answers 580.95.05, the other nodes 580.105.08 (1 of 2)"
    ]
