# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""site.yml refuses unsuitable nodes with a message naming the host, what was
found and the variable to change. Runs on the controller against the
simulated cluster."""

from __future__ import annotations

import re

import pytest

from helpers import assert_nothing_changed, run_playbook

testinfra_hosts = ["local://"]

REFUSALS = [
    (
        {"preflight_min_memory_mb": 10**9},
        r"spark\d has \d+ MiB of memory; at least 1000000000 MiB is required \(preflight_min_memory_mb\)",
    ),
    (
        {"preflight_supported_architectures": ["aarch64"]},
        r"spark\d is x86_64; expected one of aarch64 \(preflight_supported_architectures\)",
    ),
    (
        {"preflight_disk_requirements": [{"path": "/srv/models", "min_free_gb": 10**6}]},
        r"spark\d: [\d.]+ GB free on the filesystem holding /srv/models \(measured at /[\w/]*\); 1000000 GB is required \(preflight_disk_requirements\)",
    ),
    (
        {"preflight_supported_systems": [{"distribution": "Ubuntu", "version": "24.04"}]},
        r"spark\d runs Debian 12[.\d]*; supported: Ubuntu 24.04\.",
    ),
    (
        {"preflight_expected_gpu_names": ["NVIDIA H100"]},
        r"spark\d GPU 0 is 'NVIDIA GB10'; expected one of NVIDIA H100 \(preflight_expected_gpu_names\)",
    ),
    (
        {"preflight_cluster_group": "sparks"},
        r"Inventory group 'sparks' is missing or empty",
    ),
    # Inputs of roles whose plays come later, judged against their specs in the preflight play.
    (
        {"engine_image_strategy": "rsync"},
        r"spark\d: value of engine_image_strategy must be one of: spread, pull, registry, got: rsync \(role engine_image; "
        r"the types and choices are in roles/engine_image/meta/argument_specs.yml\)\. Fix the variable in the inventory\.",
    ),
    (
        {"fabric_report_ping_count": "many"},
        r"spark\d: argument 'fabric_report_ping_count' is of type str and we were unable to convert to int.* \(role fabric_report;",
    ),
]


@pytest.mark.parametrize("extra_vars, message", REFUSALS, ids=[next(iter(r[0])) for r in REFUSALS])
def test_site_refuses_unsuitable_nodes(extra_vars, message):
    result = run_playbook("site.yml", extra_vars=extra_vars)
    assert result.returncode != 0, result.stdout
    output = " ".join(result.stdout.split())
    assert re.search(message, output), output[-3000:]
    assert_nothing_changed(result)
