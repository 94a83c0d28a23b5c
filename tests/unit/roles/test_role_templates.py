# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The units, drop-ins and link files come from the roles' templates through
dgxspark.cluster.role_template, every Exec line of the engine's unit is quoted as
ExecStart is, and file_set is told to check each unit and drop-in with
systemd-analyze verify (filter systemd_verify_command)."""

from __future__ import annotations

import pytest

from unit_support import template_role_vars

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_systemd import (
    parse_systemd_exec_line,
    systemd_verify_command,
)

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


ENGINE = {
    "engine_service_rank": 1, "engine_service_version": "0123456789abcdef",
    "engine_service_version_dir": "/etc/dgxspark/engine/versions/0123456789abcdef",
    "engine_service_patches": [{"src": "/dev/null", "dest": "/opt/x.py", "sha256": "0" * 64}],
    "engine_service_patch_mounts": [{"src": "/etc/dgxspark/engine/versions/0123456789abcdef/patches/0-x.py",
                                     "dest": "/opt/x.py"}],
    "engine_service_exec_start": '"/usr/bin/docker" "run"', "engine_service_is_head": False,
    "engine_service_head": "spark1", "engine_image_id": "sha256:" + "12" * 32, "engine_service_vllm_argv": ["vllm"],
    "engine_service_container_env": {"A": "1"}, "engine_service_api_key": "",
    "engine_service_head_address": "192.168.100.11", "roce_fabric_node_address": "192.168.100.12",
    "roce_fabric_sysfs_root": "/run/sim sysfs/%i", "engine_service_container_name": "dgxspark-engine",
    "engine_service_stop_timeout": 10, "engine_service_docker": "/usr/bin/docker",
    "engine_image_ref": "registry.example/vllm@sha256:" + "ab" * 32, "roce_fabric_active_hcas": ["roceP2p1s0f1"],
}


def test_every_exec_line_of_the_engine_unit_is_quoted_as_execstart_is():
    (result,) = template_role_vars("engine_service", [(ENGINE, {
        "unit": "{{ engine_service_unit_content }}",
        "gid": "{{ engine_service_gid_argv }}", "sums": "{{ engine_service_patch_check_argv }}",
        "remove": "{{ engine_service_container_remove_argv }}", "stop": "{{ engine_service_container_stop_argv }}",
        "files": "{{ engine_service_version_files }}",
    })])
    assert result["unit"].startswith("# Ansible managed\n"), result["unit"]
    lines = [line for line in result["unit"].splitlines() if line.startswith("Exec")]
    assert [line.split("=", 1)[0] for line in lines] == ["ExecStartPre"] * 3 + ["ExecStart", "ExecStop"]
    values = [line.split("=", 1)[1] for line in lines]
    assert all(value.startswith(('"', '-"')) for value in values), values
    assert values[2].startswith('-"/usr/bin/docker" "rm"')
    # A space and a % in a value stay one word and reach the program as given.
    assert "/run/sim sysfs/%i" in result["gid"]
    assert [parse_systemd_exec_line(values[0]), parse_systemd_exec_line(values[1]),
            parse_systemd_exec_line(values[2][1:]), parse_systemd_exec_line(values[4])] == [
        result["gid"], result["sums"], result["remove"], result["stop"]]
    assert result["stop"] == ["/usr/bin/docker", "stop", "--time", "10", "dgxspark-engine"]
    assert isinstance(result["files"], list), result["files"]
    checks = {entry["path"].rsplit("/", 1)[1]: entry.get("validate") for entry in result["files"]}
    directory = ENGINE["engine_service_version_dir"]
    assert checks["dgxspark-engine.service"] == systemd_verify_command(directory + "/dgxspark-engine.service")
    assert checks["dgxspark-engine-watchdog.service"] == systemd_verify_command(
        directory + "/dgxspark-engine-watchdog.service")
    assert [name for name, check in checks.items() if check] == ["dgxspark-engine.service",
                                                                 "dgxspark-engine-watchdog.service"]


@pytest.mark.parametrize("role, expression, variables, checked", [
    ("monitoring", "{{ monitoring_file_set['files'] }}",
     {"groups": {"dgxspark_cluster": ["spark1"]}, "inventory_hostname": "spark1",
      "hostvars": {"spark1": {"ansible_host": "10.10.0.11"}}},
     ["/etc/systemd/system/dgxspark-node-metrics.service", "/etc/systemd/system/dgxspark-node-metrics.timer",
      "/etc/systemd/system/dgxspark-exporter-access.service"]),
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


def test_the_exporter_firewall_unit_lets_in_the_prometheus_hosts_or_the_inventorys_readers():
    base = {"groups": {"dgxspark_cluster": ["spark1", "spark2"]}, "inventory_hostname": "spark2",
            "hostvars": {"spark1": {"ansible_host": "10.10.0.11"}, "spark2": {"ansible_host": "10.10.0.12"}}}
    expression = {"unit": "{{ lookup('dgxspark.cluster.role_template', 'dgxspark-exporter-access.service.j2') }}"}
    default, listed = template_role_vars("monitoring", [
        (base, expression), (dict(base, monitoring_node_exporter_clients=["10.20.0.0/24", "prom.lan"]), expression)])
    for result, readers in ((default, ["--reader=10.10.0.11"]), (listed, ["--reader=10.20.0.0/24", "--reader=prom.lan"])):
        lines = {line.split("=", 1)[0]: line.split("=", 1)[1] for line in result["unit"].splitlines()
                 if line.startswith("Exec")}
        assert parse_systemd_exec_line(lines["ExecStart"]) == [
            "/usr/bin/python3", "/usr/local/libexec/dgxspark/dgxspark-exporter-access.py", "apply", "--port", "9100",
        ] + readers
        assert parse_systemd_exec_line(lines["ExecStop"])[2:] == ["remove", "--port", "9100"]
        assert "Before=prometheus-node-exporter.service" in result["unit"]


def test_a_firewall_chain_left_from_an_earlier_run_is_taken_off_only_where_the_firewall_is_turned_off():
    unit = "/etc/systemd/system/dgxspark-exporter-access.service"
    base = {"groups": {"dgxspark_cluster": ["spark1"]}, "inventory_hostname": "spark1", "hostvars": {"spark1": {}}}
    present = {"paths": {unit: {"kind": "file"}}}
    absent = {"paths": {unit: {"kind": None}}}
    expression = {"left": "{{ monitoring_exporter_access_left }}", "paths": "{{ monitoring_read_spec['paths'] }}"}
    results = template_role_vars("monitoring", [
        (dict(base, monitoring_node_exporter_firewall=False, monitoring_state=present), expression),
        (dict(base, monitoring_node_exporter_firewall=False, monitoring_state=absent), expression),
        (dict(base, monitoring_state=present), expression),
    ])
    assert [result["left"] for result in results] == [True, False, False]
    # The unit is read either way, the script only where the chain is wanted.
    assert unit in results[0]["paths"] and unit in results[2]["paths"]
    script = "/usr/local/libexec/dgxspark/dgxspark-exporter-access.py"
    assert script not in results[0]["paths"] and script in results[2]["paths"]
