# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/lib.sh dgxspark_prerequisites, run by bash with a PATH of stub commands:
what it installs as root where apt-get is, what it prints elsewhere, and how
it starts dockerd when no daemon answers."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from unit_support import REPO_ROOT

# Real programs the function and lib.sh use besides the stubbed ones.
REAL_TOOLS = ("dirname", "sleep", "tail", "setsid")
CLUSTER_TOOLS = ("ssh-keygen", "rsync", "mmdebstrap", "gpg", "dpkg-scanpackages", "iptables", "dockerd")
# Every stub appends its name and arguments to $STUB_LOG; `docker info` answers
# once $STUB_DIR/docker_up exists, which the dockerd stub makes when told to.
STUB = """#!/bin/bash
echo "${0##*/} $*" >> "$STUB_LOG"
case "${0##*/} $1" in
  "id -u") echo "$STUB_UID" ;;
  "docker info") [ -e "$STUB_DIR/docker_up" ] ;;
  "dockerd "*) echo "dockerd log line"; [ -z "$STUB_DOCKERD_WORKS" ] || : > "$STUB_DIR/docker_up"; exit 0 ;;
  "python3 -c") exit "${STUB_ENSUREPIP_RC:-0}" ;;
esac
"""


class Machine:
    """A directory of stub commands that stands for a machine's PATH."""

    def __init__(self, root: Path, uid: int = 0, apt: bool = True, missing: tuple[str, ...] = ()):
        self.bin = root / "bin"
        self.bin.mkdir()
        self.log = root / "calls.log"
        self.log.touch()
        self.root = root
        self.uid = uid
        for tool in REAL_TOOLS:
            (self.bin / tool).symlink_to(shutil.which(tool))
        stubs = {"id", "docker", "python3", "python3.11", *CLUSTER_TOOLS}
        if apt:
            stubs |= {"apt-get"}
        for name in stubs - set(missing):
            path = self.bin / name
            path.write_text(STUB)
            path.chmod(0o755)

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        script = f'source "{REPO_ROOT}/tools/lib.sh"; dgxspark_prerequisites {" ".join(args)}'
        return subprocess.run(
            ["/bin/bash", "-c", script],
            env={
                "PATH": str(self.bin),
                "STUB_LOG": str(self.log),
                "STUB_DIR": str(self.root),
                "STUB_UID": str(self.uid),
                "DGXSPARK_DOCKERD_LOG": str(self.root / "dockerd.log"),
                "DGXSPARK_DOCKERD_WAIT": "2",
                **env,
            },
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def calls(self, name: str) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if line.split(" ", 1)[0] == name]

    def docker_up(self) -> None:
        (self.root / "docker_up").touch()


def test_nothing_missing_installs_and_starts_nothing(tmp_path):
    machine = Machine(tmp_path)
    machine.docker_up()
    result = machine.run("cluster")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert machine.calls("apt-get") == []
    assert machine.calls("dockerd") == []


def test_root_on_debian_installs_what_is_missing_and_says_so(tmp_path):
    machine = Machine(tmp_path, missing=("mmdebstrap", "rsync", "dpkg-scanpackages", "gpg", "iptables"))
    machine.docker_up()
    result = machine.run("cluster")
    assert result.returncode == 0, result.stderr
    assert machine.calls("apt-get") == [
        "apt-get update -qq",
        "apt-get install -y -qq rsync mmdebstrap gnupg dpkg-dev iptables",
    ]
    assert "installing missing prerequisites: apt-get install -y rsync mmdebstrap gnupg dpkg-dev iptables" in result.stderr


def test_toolchain_only_needs_no_cluster_tools_or_daemon(tmp_path):
    machine = Machine(tmp_path, missing=("mmdebstrap", "dockerd"))
    result = machine.run()
    assert result.returncode == 0, result.stderr
    assert machine.calls("apt-get") == []
    assert machine.calls("docker") == []


def test_missing_venv_and_python311(tmp_path):
    machine = Machine(tmp_path, missing=("python3.11",))
    machine.docker_up()
    result = machine.run("cluster", STUB_ENSUREPIP_RC="1")
    assert result.returncode == 0, result.stderr
    assert machine.calls("apt-get")[-1] == "apt-get install -y -qq python3-venv python3.11 python3-pip"


def test_not_root_prints_the_commands_and_fails(tmp_path):
    machine = Machine(tmp_path, uid=1000, missing=("mmdebstrap", "dockerd"))
    result = machine.run("cluster")
    assert result.returncode == 1
    assert "sudo apt-get update && sudo apt-get install -y mmdebstrap docker.io" in result.stderr
    assert machine.calls("apt-get") == []


def test_root_without_apt_prints_the_commands_and_fails(tmp_path):
    machine = Machine(tmp_path, apt=False, missing=("rsync",))
    result = machine.run("cluster")
    assert result.returncode == 1
    assert "elsewhere your system's packages of the same names" in result.stderr
    assert "  apt-get update && apt-get install -y rsync" in result.stderr


def test_root_starts_dockerd_in_the_background_and_waits_for_it(tmp_path):
    machine = Machine(tmp_path)
    result = machine.run("cluster", STUB_DOCKERD_WORKS="1")
    assert result.returncode == 0, result.stderr
    assert machine.calls("dockerd") == ["dockerd "]
    assert f"starting dockerd in the background (log: {tmp_path / 'dockerd.log'})" in result.stderr
    assert "dockerd answers" in result.stderr
    assert (tmp_path / "dockerd.log").read_text() == "dockerd log line\n"


def test_dockerd_that_never_answers_fails_with_its_log(tmp_path):
    machine = Machine(tmp_path)
    result = machine.run("cluster")
    assert result.returncode == 1
    assert "dockerd did not answer within 2 s" in result.stderr
    assert "dockerd log line" in result.stderr


def test_not_root_without_daemon_prints_how_to_start_it(tmp_path):
    machine = Machine(tmp_path, uid=1000)
    result = machine.run("cluster")
    assert result.returncode == 1
    assert f"sudo sh -c 'dockerd >{tmp_path / 'dockerd.log'} 2>&1 &'" in result.stderr
    assert machine.calls("dockerd") == []


@pytest.mark.parametrize("script", ["tools/simulate", "tools/test"])
def test_readme_commands_check_prerequisites_before_the_toolchain(script):
    text = (REPO_ROOT / script).read_text()
    assert text.index("dgxspark_prerequisites") < text.index("dgxspark_venv\n")


def test_ci_runs_only_the_readme_test_command():
    commands = [
        line for line in (REPO_ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert commands[-1] == "exec tools/test"
    assert not any("apt-get" in line or "dockerd" in line for line in commands)
    assert os.access(REPO_ROOT / ".ci/run", os.X_OK)
