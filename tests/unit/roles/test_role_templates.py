# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The units, drop-ins and link files come from the roles' templates through
dgxspark.cluster.role_template, and file_set is told to check each unit and drop-in
with systemd-analyze verify (filter systemd_verify_command)."""

from __future__ import annotations

import pytest

from unit_support import template_role_vars

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_systemd import systemd_verify_command

LINK = {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "192.168.100.11", "prefix": 24}


def test_a_template_sees_its_template_vars_over_the_tasks_and_a_missing_one_is_named():
    other = dict(LINK, netdev="enP2p1s0f0np0", address="192.168.201.11")
    (result,) = template_role_vars("roce_fabric", [({"roce_fabric_mtu": 9000, "link": LINK, "other": other}, {
        "own": "{{ lookup('dgxspark.cluster.role_template', 'link.network.j2') }}",
        "over": "{{ lookup('dgxspark.cluster.role_template', 'link.network.j2', template_vars={'link': other}) }}",
        "after": "{{ link.netdev }}",
        "missing": "{{ lookup('dgxspark.cluster.role_template', 'nothere.j2') }}",
        "managed": "{{ lookup('dgxspark.cluster.role_template', 'link.network.j2') is search('^# Ansible managed') }}",
    })])
    assert "Name=enP2p1s0f1np1\n" in result["own"] and "Address=192.168.100.11/24\n" in result["own"]
    assert "Name=enP2p1s0f0np0\n" in result["over"] and "Address=192.168.201.11/24\n" in result["over"]
    # The layer is the template's only: the task's variable is as it was.
    assert result["after"] == "enP2p1s0f1np1"
    assert "role_template: no template nothere.j2 in the role's templates/ directory" in result["missing"]
    assert result["managed"] is True
    assert result["own"].endswith("IPv6AcceptRA=no\n")


@pytest.mark.parametrize("role, expression, variables, checked", [
    ("monitoring", "{{ monitoring_file_set['files'] }}",
     {"groups": {"dgxspark_cluster": ["spark1"]}, "inventory_hostname": "spark1"},
     ["/etc/systemd/system/dgxspark-node-metrics.service", "/etc/systemd/system/dgxspark-node-metrics.timer"]),
    ("host_hardening", "{{ host_hardening_file_set['files'] }}", {},
     ["/etc/systemd/system/ssh.service.d/dgxspark-oom.conf"]),
    ("container_runtime", "{{ container_runtime_file_set['files'] }}",
     {"container_runtime_systemd_limits": {"LimitMEMLOCK": "infinity"}},
     ["/etc/systemd/system/docker.service.d/dgxspark-limits.conf"]),
    ("roce_fabric", "{{ roce_fabric_file_set['files'] }}",
     {"roce_fabric_backend": "networkd", "roce_fabric_links": [LINK],
      "roce_fabric_node_state": {"paths": {"/usr/sbin/netplan": {"kind": None}}}}, []),
])
def test_each_unit_and_drop_in_is_checked_and_nothing_else(role, expression, variables, checked):
    (result,) = template_role_vars(role, [(variables, {"files": expression})])
    assert isinstance(result["files"], list), result["files"]
    validated = {entry["path"]: entry["validate"] for entry in result["files"] if entry.get("validate")}
    assert validated == {path: systemd_verify_command(path) for path in checked}
    assert all(entry["content"].startswith("# Ansible managed\n") for entry in result["files"]
               if entry["path"] in checked)
