# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nodes run the pinned NVIDIA driver (installed from the stand-in repository,
upgraded on the node that started with the older one), and Docker with the NVIDIA
Container Toolkit: daemon.json as configured, the nvidia runtime listed, and a
container started with --gpus all sees the host's GPU."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import testinfra.utils.ansible_runner
import yaml

from helpers import GROUP, INVENTORY, ROOT, flat, role_settings

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(str(INVENTORY)).get_hosts(GROUP)

# Nodes the harness started with the older stand-in driver (prepare_apt_fixture.yml).
OLD_DRIVER_HOSTS = ("spark4",)
OLD_DRIVER_VERSION = "580.82.07-0ubuntu1"


def settings():
    return role_settings("nvidia_driver", "container_runtime")


def test_driver_package_is_installed_at_the_pinned_version(host):
    wanted = settings()["nvidia_driver_package_version"]
    for package in settings()["nvidia_driver_packages"]:
        pkg = host.package(package)
        assert pkg.is_installed, package
        assert pkg.version == wanted, f"{package}: {pkg.version}"


def test_driver_version_is_pinned(host):
    name = settings()["nvidia_driver_apt_repo_name"]
    pref = host.file(f"/etc/apt/preferences.d/{name}.pref")
    assert pref.exists
    assert f"Pin: version {settings()['nvidia_driver_package_version']}" in pref.content_string
    policy = host.check_output("apt-cache policy %s", settings()["nvidia_driver_packages"][0])
    assert f"Candidate: {settings()['nvidia_driver_package_version']}" in policy


def test_nvidia_smi_answers_the_expected_driver(host):
    out = host.check_output("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader")
    assert out.strip() == "NVIDIA GB10, %s" % settings()["nvidia_driver_min_version"]
    assert host.file("/usr/bin/nvidia-smi").exists


def test_the_older_driver_was_upgraded(host):
    if host.backend.get_hostname() not in OLD_DRIVER_HOSTS:
        pytest.skip("started without a driver")
    log = host.check_output("grep ' nvidia-driver-580-open:' /var/log/dpkg.log || true")
    assert f"upgrade nvidia-driver-580-open:all {OLD_DRIVER_VERSION} " in log, log
    # The older package's GPU description went with it.
    assert not host.file("/etc/dgxspark-standin/gpu.json").exists


def test_toolkit_is_installed_at_the_pinned_version(host):
    for package in settings()["container_runtime_toolkit_packages"]:
        pkg = host.package(package)
        assert pkg.is_installed, package
        assert pkg.version == settings()["container_runtime_toolkit_version"]
    assert host.exists("nvidia-container-runtime-hook")


def test_daemon_json_holds_the_options_and_the_required_keys(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    wanted = settings()
    assert config["runtimes"]["nvidia"]["path"] == wanted["container_runtime_nvidia_runtime_path"]
    assert config["live-restore"] is True
    assert config["default-ulimits"] == {
        name: {"Name": name, "Soft": limit["soft"], "Hard": limit["hard"]}
        for name, limit in wanted["container_runtime_ulimits"].items()
    }
    for key, value in wanted["container_runtime_daemon_options"].items():
        assert config[key] == value, key
    assert config["insecure-registries"] == ["192.168.99.5:5000"]


def test_docker_lists_the_nvidia_runtime_and_live_restore(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert "nvidia" in info["Runtimes"]
    assert info["LiveRestoreEnabled"] is True
    # Docker's own default under systemd on cgroup v2 is the systemd driver, whose
    # daemon-reloads take running GPU containers' devices away.
    assert info["CgroupDriver"] == settings()["container_runtime_cgroup_driver"] == "cgroupfs"
    assert json.loads(host.file("/etc/docker/daemon.json").content_string)["exec-opts"][-1] == (
        "native.cgroupdriver=cgroupfs"
    )


def gpu_check_image(host):
    image = settings().get("container_runtime_gpu_check_image")
    if image:
        return image
    ids = host.check_output("docker images -q dgxspark/engine").split()
    if not ids:
        pytest.fail("no image on the node to run the GPU check in; set container_runtime_gpu_check_image")
    return ids[0]


def test_a_container_with_gpus_sees_the_host_gpu(host):
    image = gpu_check_image(host)
    inside = host.run(
        "docker run --rm --pull=never --gpus all %s nvidia-smi --query-gpu=name,driver_version --format=csv,noheader",
        image,
    )
    assert inside.rc == 0, inside.stderr
    on_host = host.check_output("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader")
    assert inside.stdout.strip() == on_host.strip()


def test_a_container_without_gpus_sees_no_gpu(host):
    result = host.run("docker run --rm --pull=never %s sh -c 'command -v nvidia-smi'", gpu_check_image(host))
    assert result.rc != 0, result.stdout


def run_roles(tmp_path, check):
    playbook = tmp_path / "node_software.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Node software | Again",
        "hosts": GROUP,
        "gather_facts": True,
        "roles": [{"role": "dgxspark.cluster.nvidia_driver"}, {"role": "dgxspark.cluster.container_runtime"}],
    }]))
    cmd = ["ansible-playbook", "-i", str(INVENTORY), str(playbook)] + (["--check"] if check else [])
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_running_the_roles_again_changes_nothing(host, tmp_path, check):
    # Once for the cluster, not per node.
    if host.backend.get_hostname() != testinfra_hosts[0]:
        pytest.skip("runs once, on the whole cluster")
    digest = "sha256sum /etc/docker/daemon.json; docker inspect --format '{{.State.StartedAt}}' $(docker ps -q) 2>/dev/null; true"
    before = host.check_output(digest)
    result = run_roles(tmp_path, check)
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    recap = [line for line in result.stdout.splitlines() if line.startswith("spark")]
    assert len(recap) == 4 and all("changed=0" in line and "failed=0" in line for line in recap), recap
    assert host.check_output(digest) == before
