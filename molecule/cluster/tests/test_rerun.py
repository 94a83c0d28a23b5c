# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check mode on a converged cluster predicts no change and passes."""

from __future__ import annotations

from helpers import API_KEY, flat, group_vars, inventory_hosts, run_playbook, run_summary, run_summary_curl

testinfra_hosts = ["local://"]


def test_check_mode_on_a_converged_cluster_reports_no_change():
    result = run_playbook("site.yml", check=True)
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    recap = [line for line in result.stdout.splitlines() if line.startswith("spark")]
    assert len(recap) == 4 and all("changed=0" in line and "failed=0" in line for line in recap), recap
    # The summary works in check mode too: it says so, names the balancer's
    # address and the model, and its curl answers (the cluster serves).
    summary = run_summary(result.stdout)
    assert summary[0] == "site.yml summary (check mode: nothing was changed)", summary
    head = inventory_hosts()["spark1"]["ansible_host"]
    assert "API: http://%s:8080/v1 (the balancer on spark1, in front of spark1)" % head in summary, summary
    assert "Model: %s" % group_vars()["engine_service_served_model_name"] in summary, summary
    assert API_KEY not in result.stdout
    assert run_summary_curl(summary) == "200"
