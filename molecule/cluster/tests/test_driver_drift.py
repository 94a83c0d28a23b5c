# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kernel and driver drift (issue 28). A kernel newer than the running one without
an NVIDIA module (the next boot would come up without the driver) is refused by
site.yml --tags driver before any change, naming the node and the kernel; with the
module in place the run passes. The driver's and the toolkit's packages are held
(apt-mark), the driver run holds again a package whose hold was taken off, and
status.yml reports each drift. The drift is made real on spark2 with files only:
the simulated nodes have no kernel of their own (/boot is empty)."""

from __future__ import annotations

import re

import pytest

from helpers import assert_nothing_changed, docker_exec, flat, inventory_hosts, node_state, run_playbook

testinfra_hosts = ["local://"]

NODE = "spark2"
# Newer than any kernel a test host runs, by version order.
KERNEL = "99.0.0-1001-nvidia"
MODULES = f"/lib/modules/{KERNEL}"
HELD_BY_DRIVER = "nvidia-driver-580-open"
HELD_BY_RUNTIME = "nvidia-container-toolkit"


def selections(hosts):
    return {host: node_state(host, "dpkg --get-selections") for host in hosts}


@pytest.fixture
def newer_kernel():
    """/boot/vmlinuz-KERNEL and an empty module tree on spark2; removed afterwards
    (/lib/modules too when the node had none), with the hold put back."""
    had_modules = node_state(NODE, "[ -d /lib/modules ] && echo yes || echo no").strip() == "yes"
    docker_exec(NODE, f"mkdir -p /boot {MODULES}/kernel && : > /boot/vmlinuz-{KERNEL}")
    yield
    docker_exec(NODE, f"rm -rf /boot/vmlinuz-{KERNEL} {MODULES}" + ("" if had_modules else " && rm -rf /lib/modules"))
    docker_exec(NODE, f"apt-mark hold {HELD_BY_DRIVER} {HELD_BY_RUNTIME} >/dev/null")


def test_packages_are_held_after_converge():
    for host in inventory_hosts():
        for package in (HELD_BY_DRIVER, HELD_BY_RUNTIME):
            assert node_state(host, f"dpkg --get-selections {package}").split() == [package, "hold"], (host, package)


def test_newer_kernel_without_module_is_refused_then_passes_with_one(newer_kernel):
    hosts = sorted(inventory_hosts())
    before = selections(hosts)
    refused = run_playbook("site.yml", "--tags", "driver")
    assert refused.returncode != 0, refused.stdout[-3000:]
    output = flat(refused.stdout)
    assert re.search(
        rf"{NODE}: kernel {re.escape(KERNEL)} \(/boot/vmlinuz-{re.escape(KERNEL)}\) has no nvidia\.ko, \.ko\.zst or "
        rf"\.ko\.xz under {re.escape(MODULES)}, newer than the running \S+: the next boot picks {re.escape(KERNEL)}",
        output,
    ), output[-3000:]
    assert f"install linux-modules-nvidia-580-open-{KERNEL}" in output
    assert f"dkms autoinstall -k {KERNEL}" in output
    assert_nothing_changed(refused)
    assert selections(hosts) == before

    # status.yml reports the kernel and a hold taken off, and never fails on drift
    # (its rc is the engine probe's).
    docker_exec(NODE, f"apt-mark unhold {HELD_BY_DRIVER} {HELD_BY_RUNTIME} >/dev/null")
    status = flat(run_playbook("status.yml").stdout)
    assert f"DRIFT {NODE}: kernel {KERNEL}" in status, status[-3000:]
    assert re.search(rf"DRIFT {NODE}: installed but not held \(nvidia_driver_hold_packages\): [^\"]*{HELD_BY_DRIVER}",
                     status), status[-3000:]
    assert f"DRIFT {NODE}: installed but not held (container_runtime_hold_packages): {HELD_BY_RUNTIME}" in status
    assert re.search(r"spark1: no drift \(kernels, driver, holds, pins\)", status), status[-3000:]
    assert "every node answers NVIDIA driver 580.95.05" in status, status[-3000:]

    # A compressed DKMS module for the kernel: the run passes and holds the driver again.
    docker_exec(NODE, f"mkdir -p {MODULES}/updates/dkms && : > {MODULES}/updates/dkms/nvidia.ko.zst")
    passed = run_playbook("site.yml", "--tags", "driver")
    assert passed.returncode == 0, flat(passed.stdout)[-3000:]
    recap = dict(re.findall(r"^(spark\d)\s+:.*?changed=(\d+)", passed.stdout, re.MULTILINE))
    assert recap[NODE] == "1", recap
    assert all(recap[host] == "0" for host in recap if host != NODE), recap
    assert node_state(NODE, f"dpkg --get-selections {HELD_BY_DRIVER}").split() == [HELD_BY_DRIVER, "hold"]
