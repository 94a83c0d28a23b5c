# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_driver and container_runtime write their apt source and pin with the same two
filters (apt_source_file, apt_pin_file); the text is what their templates wrote before, so a
converged node's files stay as they are."""

from __future__ import annotations

from unit_support import template_role_vars


def test_the_driver_source_and_pin():
    (result,) = template_role_vars("nvidia_driver", [({"nvidia_driver_packages": ["a", "b"]}, {
        "files": "{{ nvidia_driver_file_set['files'] | map(attribute='content') }}",
    })])
    assert result["files"] == [
        "# Ansible managed\nTypes: deb\nURIs: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/\n"
        "Suites: /\nSigned-By: /etc/apt/keyrings/nvidia-cuda.asc\n",
        "# Ansible managed\n# Holds the NVIDIA driver at the version the cluster is tested with.\nPackage: a b\n"
        "Pin: version 580.95.05-0ubuntu1\nPin-Priority: 1001\n",
    ]


def test_the_toolkit_source_and_pin_with_components_and_a_header():
    (result,) = template_role_vars("container_runtime", [(
        {"container_runtime_apt_components": ["main", "contrib"], "ansible_managed": "Managed by X"},
        {"source": "{{ container_runtime_source_content }}", "pin": "{{ container_runtime_pin_content }}"},
    )])
    assert result["source"] == (
        "# Managed by X\nTypes: deb\nURIs: https://nvidia.github.io/libnvidia-container/stable/deb/arm64\nSuites: /\n"
        "Components: main contrib\nSigned-By: /etc/apt/keyrings/nvidia-container-toolkit.asc\n"
    )
    assert result["pin"] == (
        "# Managed by X\n# Holds the NVIDIA Container Toolkit at the version the cluster is tested with.\n"
        "Package: nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1\n"
        "Pin: version 1.17.8-1\nPin-Priority: 1001\n"
    )
