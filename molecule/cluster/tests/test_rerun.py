# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check mode on a converged cluster predicts no change and passes."""

from __future__ import annotations

from helpers import flat, run_playbook

testinfra_hosts = ["local://"]


def test_check_mode_on_a_converged_cluster_reports_no_change():
    result = run_playbook("site.yml", check=True)
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    recap = [line for line in result.stdout.splitlines() if line.startswith("spark")]
    assert len(recap) == 4 and all("changed=0" in line and "failed=0" in line for line in recap), recap
