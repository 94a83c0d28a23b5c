# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_software import (
    NodeSoftwareError,
    apt_pin_file,
    apt_source_file,
    daemon_config,
    daemon_options_problems,
    docker_info_problems,
    driver_verdict,
    gpu_check_problems,
    parse_driver_version,
)

LIMITS = {
    "memlock": {"soft": -1, "hard": -1},
    "nofile": {"soft": 1048576, "hard": 1048576},
    "stack": {"soft": 67108864, "hard": 67108864},
}


def facts(version, present=True):
    return {
        "dgxspark_gpu_present": present,
        "dgxspark_gpu_driver_version": version,
        "dgxspark_gpus": [{"name": "NVIDIA GB10", "driver_version": version}] if present else [],
    }


@pytest.mark.parametrize(
    "text, parts",
    [("580.95.05", (580, 95, 5)), ("580", (580,)), (" 575.51.03 ", (575, 51, 3))],
)
def test_driver_versions_parse_to_numbers(text, parts):
    assert parse_driver_version(text) == parts


@pytest.mark.parametrize("text", ["", "580.95.05-0ubuntu1", "r580", "580..1", None])
def test_malformed_versions_are_refused_naming_the_variable(text):
    with pytest.raises(NodeSoftwareError, match="nvidia_driver_min_version"):
        parse_driver_version(text)


@pytest.mark.parametrize(
    "found, state",
    [
        ("580.95.05", "ok"),
        ("580.126.09", "ok"),  # 126 > 95 as numbers, though not as text
        ("581.0", "ok"),
        ("580.82.07", "old"),
        ("580.9.99", "old"),
        ("575.51.03", "old"),
    ],
)
def test_verdict_compares_versions_as_numbers(found, state):
    verdict = driver_verdict(facts(found), "580.95.05")
    assert verdict["state"] == state
    assert verdict["found"] == found
    assert verdict["expected"] == "580.95.05"
    assert found in verdict["message"]


def test_no_gpu_means_missing():
    verdict = driver_verdict(facts(None, present=False), "580.95.05")
    assert verdict == {
        "found": None,
        "expected": "580.95.05",
        "state": "missing",
        "message": "no NVIDIA driver answers (nvidia-smi is missing or fails)",
    }


def test_verdict_of_empty_facts_is_missing():
    assert driver_verdict({}, "580.95.05")["state"] == "missing"


def test_verdict_refuses_a_bad_minimum():
    with pytest.raises(NodeSoftwareError, match="nvidia_driver_min_version='latest'"):
        driver_verdict(facts("580.95.05"), "latest")


def test_daemon_config_adds_the_required_keys_to_the_options():
    options = {"storage-driver": "overlay2", "insecure-registries": ["192.168.99.5:5000"]}
    config = daemon_config(options, "nvidia-container-runtime", LIMITS)
    assert config == {
        "storage-driver": "overlay2",
        "insecure-registries": ["192.168.99.5:5000"],
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}},
        "exec-opts": ["native.cgroupdriver=cgroupfs"],
        "live-restore": True,
        "default-ulimits": {
            "memlock": {"Name": "memlock", "Soft": -1, "Hard": -1},
            "nofile": {"Name": "nofile", "Soft": 1048576, "Hard": 1048576},
            "stack": {"Name": "stack", "Soft": 67108864, "Hard": 67108864},
        },
    }
    assert options == {"storage-driver": "overlay2", "insecure-registries": ["192.168.99.5:5000"]}


def test_daemon_config_keeps_other_runtimes_and_runtime_args():
    options = {"runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"path": "/old", "runtimeArgs": []}}}
    config = daemon_config(options, "/usr/bin/nvidia-container-runtime", LIMITS)
    assert config["runtimes"] == {
        "crun": {"path": "/usr/bin/crun"},
        "nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []},
    }
    assert options["runtimes"]["nvidia"]["path"] == "/old"


def test_daemon_config_sets_a_default_runtime_that_exists():
    assert daemon_config({}, "nvidia-container-runtime", LIMITS, "nvidia")["default-runtime"] == "nvidia"
    assert "default-runtime" not in daemon_config({}, "nvidia-container-runtime", LIMITS, "")
    with pytest.raises(NodeSoftwareError, match="container_runtime_default_runtime='kata'"):
        daemon_config({}, "nvidia-container-runtime", LIMITS, "kata")


@pytest.mark.parametrize("key", ["live-restore", "default-ulimits"])
def test_options_may_not_set_keys_the_role_owns(key):
    with pytest.raises(NodeSoftwareError, match="container_runtime_daemon_options sets '%s'" % key):
        daemon_config({key: False}, "nvidia-container-runtime", LIMITS)


@pytest.mark.parametrize(
    "ulimits, match",
    [
        ({"memlock": {"soft": -1, "hard": -1}}, "lacks nofile, stack"),
        (dict(LIMITS, stack={"soft": 1}), r"container_runtime_ulimits.stack="),
        (dict(LIMITS, nofile={"soft": "1024", "hard": 1024}), r"container_runtime_ulimits.nofile.soft='1024'"),
        (dict(LIMITS, nofile={"soft": True, "hard": 1024}), r"nofile.soft=True"),
        (dict(LIMITS, memlock={"soft": -2, "hard": -1}), r"memlock.soft=-2"),
        (dict(LIMITS, nofile={"soft": 4096, "hard": 1024}), "soft 4096 above hard 1024"),
        (dict(LIMITS, memlock={"soft": -1, "hard": 8388608}), "soft -1 above hard 8388608"),
        ([], "expected a dict name"),
    ],
)
def test_bad_ulimits_are_refused_naming_the_variable(ulimits, match):
    with pytest.raises(NodeSoftwareError, match=match):
        daemon_config({}, "nvidia-container-runtime", ulimits)


def test_simulation_ulimits_pass():
    limits = dict(LIMITS, memlock={"soft": 8388608, "hard": 8388608})
    config = daemon_config({}, "nvidia-container-runtime", limits)
    assert config["default-ulimits"]["memlock"] == {"Name": "memlock", "Soft": 8388608, "Hard": 8388608}


@pytest.mark.parametrize(
    "options, path, match",
    [
        ([], "nvidia-container-runtime", "container_runtime_daemon_options=\\[\\]"),
        ({"runtimes": ["nvidia"]}, "nvidia-container-runtime", "container_runtime_daemon_options.runtimes="),
        ({}, "", "container_runtime_nvidia_runtime_path=''"),
    ],
)
def test_bad_options_are_refused(options, path, match):
    with pytest.raises(NodeSoftwareError, match=match):
        daemon_config(options, path, LIMITS)


def info(runtimes, driver="cgroupfs"):
    return {"Runtimes": runtimes, "CgroupDriver": driver}


def test_docker_info_problems_runtimes():
    assert docker_info_problems(info({"runc": {"path": "runc"}, "nvidia": {"path": "nvidia-container-runtime"}})) == []
    assert docker_info_problems(info({"runc": {}, "io.containerd.runc.v2": {}})) == [
        "docker info lists runtimes io.containerd.runc.v2, runc; expected nvidia among them"
    ]
    assert docker_info_problems(info({})) == ["docker info lists runtimes none; expected nvidia among them"]
    assert docker_info_problems(info(None))[0].startswith("docker info listed runtimes None")
    assert docker_info_problems(None)[0].startswith("docker info printed None")


def test_docker_info_problems_cgroup_driver():
    # Debian's and Ubuntu's Docker on cgroup v2 under systemd default to the systemd driver.
    problems = docker_info_problems(info({"nvidia": {}}, "systemd"))
    assert problems == [
        "docker info reports cgroup driver systemd; expected cgroupfs (container_runtime_cgroup_driver): with "
        "systemd, a systemctl daemon-reload takes running GPU containers' devices away"
    ]
    assert docker_info_problems(info({"nvidia": {}}, "systemd"), "nvidia", "systemd") == []
    assert docker_info_problems({"Runtimes": {"nvidia": {}}}) == [
        "docker info reports cgroup driver none; expected cgroupfs (container_runtime_cgroup_driver)"
    ]


def test_daemon_config_sets_the_cgroup_driver_after_the_options_exec_opts():
    config = daemon_config({"exec-opts": ["native.umask=normal"]}, "nvidia-container-runtime", LIMITS)
    assert config["exec-opts"] == ["native.umask=normal", "native.cgroupdriver=cgroupfs"]
    systemd = daemon_config({}, "nvidia-container-runtime", LIMITS, "", "systemd")
    assert systemd["exec-opts"] == ["native.cgroupdriver=systemd"]
    with pytest.raises(NodeSoftwareError, match="container_runtime_cgroup_driver='cgroupv2'"):
        daemon_config({}, "nvidia-container-runtime", LIMITS, "", "cgroupv2")
    with pytest.raises(NodeSoftwareError, match="without native.cgroupdriver"):
        daemon_config({"exec-opts": ["Native.CgroupDriver=systemd"]}, "nvidia-container-runtime", LIMITS)


def test_daemon_options_problems_refuses_a_cgroup_driver_in_exec_opts():
    problems = daemon_options_problems({"exec-opts": ["native.cgroupdriver=systemd"]}, "spark4")
    assert len(problems) == 1
    assert problems[0].startswith("spark4: container_runtime_daemon_options.exec-opts holds native.cgroupdriver=systemd")
    assert "container_runtime_cgroup_driver" in problems[0]
    assert daemon_options_problems({"exec-opts": ["native.umask=normal"]}, "spark4") == []
    assert "expected a list of strings" in daemon_options_problems({"exec-opts": "x"}, "spark4")[0]


def test_gpu_check_agrees_with_the_host():
    assert gpu_check_problems("NVIDIA GB10, 580.95.05\n", facts("580.95.05")) == []


def test_gpu_check_reports_another_driver_in_the_container():
    assert gpu_check_problems("NVIDIA GB10, 580.82.07\n", facts("580.95.05")) == [
        "the container sees NVIDIA GB10 driver 580.82.07; the host's nvidia-smi reports NVIDIA GB10 driver 580.95.05"
    ]


def test_gpu_check_reports_no_gpu_and_odd_output():
    assert gpu_check_problems("", facts("580.95.05")) == [
        "the container sees no GPU; the host's nvidia-smi reports NVIDIA GB10 driver 580.95.05"
    ]
    assert gpu_check_problems("sh: nvidia-smi: not found", facts("580.95.05")) == [
        "the container printed 'sh: nvidia-smi: not found'; expected 'name, driver_version' lines"
    ]
    assert gpu_check_problems("NVIDIA GB10, 580.95.05", {}) == [
        "the host lists no GPU (gpu_facts); expected at least one"
    ]


def test_daemon_options_problems_accepts_ordinary_options():
    assert daemon_options_problems({"storage-driver": "overlay2", "log-opts": {"max-size": "10m"}}, "spark1") == []


def test_daemon_options_problems_refuses_a_tcp_listener_without_tls_verify():
    problems = daemon_options_problems({"hosts": ["unix:///var/run/docker.sock", "tcp://0.0.0.0:2375"]}, "spark2")
    assert any("spark2:" in p and "tcp://0.0.0.0:2375 without tlsverify" in p for p in problems)
    # a TLS listener is not refused as open, but hosts is still refused (dockerd gets -H fd://)
    tls = {"hosts": ["tcp://0.0.0.0:2376"], "tlsverify": True, "tlscacert": "/ca", "tlscert": "/c", "tlskey": "/k"}
    tls_problems = daemon_options_problems(tls, "spark2")
    assert not any("without tlsverify" in p for p in tls_problems)
    assert any("-H fd://" in p for p in tls_problems)
    half = dict(tls, tlskey="")
    assert any("without tlsverify" in p for p in daemon_options_problems(half, "spark2"))


def test_daemon_options_problems_refuses_owned_keys_and_bad_shapes():
    assert any("'live-restore'" in p for p in daemon_options_problems({"live-restore": False}, "spark3"))
    assert "expected a dict" in daemon_options_problems(["hosts"], "spark3")[0]
    assert "expected a list of listen addresses" in daemon_options_problems({"hosts": 5}, "spark3")[0]


def test_apt_source_file_leaves_components_out_of_a_flat_repository():
    assert apt_source_file("https://repo.example/sbsa/", "/", [], "/etc/apt/keyrings/repo.asc") == (
        "# Ansible managed\nTypes: deb\nURIs: https://repo.example/sbsa/\nSuites: /\n"
        "Signed-By: /etc/apt/keyrings/repo.asc\n"
    )
    assert apt_source_file("https://repo.example", "noble", ["main", "contrib"], "/k.asc", "Managed") == (
        "# Managed\nTypes: deb\nURIs: https://repo.example\nSuites: noble\nComponents: main contrib\n"
        "Signed-By: /k.asc\n"
    )


def test_apt_pin_file_holds_the_packages_at_the_version():
    assert apt_pin_file(["driver", "utils"], "580.95.05-0ubuntu1", 1001, "the NVIDIA driver") == (
        "# Ansible managed\n# Holds the NVIDIA driver at the version the cluster is tested with.\n"
        "Package: driver utils\nPin: version 580.95.05-0ubuntu1\nPin-Priority: 1001\n"
    )
