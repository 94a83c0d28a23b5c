# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/lib.sh dgxspark_sim_recreate_down_nodes, run by bash with stub
`molecule` and `docker` commands: a cluster Molecule counts as created whose
nodes do not all run as prepared (the Docker daemon restarted, a node was
restarted, stopped or removed) is destroyed so that the next converge creates
it again; a running, prepared or never-created cluster is left alone."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from unit_support import REPO_ROOT

# `molecule list -f plain` rows: name, driver, provisioner, scenario, created, converged.
# The docker stub answers `inspect` from $STUB_DIR/<name> (true/false), and
# fails like Docker for a container that does not exist; `exec NAME test -e
# /run/dgxspark-sim-prepared` finds the mark where $STUB_DIR/<name>.prepared is.
STUB = """#!/bin/bash
echo "${0##*/} $*" >> "$STUB_DIR/calls.log"
case "${0##*/} $1" in
  "molecule list") echo "WARNING on stderr" >&2; cat "$STUB_DIR/molecule-list" ;;
  "docker inspect") name="${@: -1}"; [ -e "$STUB_DIR/$name" ] || { echo "No such object: $name" >&2; exit 1; }
                    cat "$STUB_DIR/$name" ;;
  "docker exec") [ "$3 $4 $5" = "test -e /run/dgxspark-sim-prepared" ] && [ -e "$STUB_DIR/$2.prepared" ] ;;
esac
"""
NODES = ("spark1", "spark2", "spark3", "spark4", "sim-upstream")


def run(tmp_path, created: bool, running: dict[str, str], restarted: tuple[str, ...] = ()):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("molecule", "docker"):
        (bin_dir / tool).write_text(STUB)
        (bin_dir / tool).chmod(0o755)
    for tool in ("dirname", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (tmp_path / "molecule-list").write_text(
        "".join(f"{name}  docker  ansible cluster {str(created).lower()}    false\n" for name in NODES))
    for name, state in running.items():
        (tmp_path / name).write_text(state + "\n")
        if state == "true" and name not in restarted:
            (tmp_path / f"{name}.prepared").touch()
    result = subprocess.run(
        ["/bin/bash", "-c", f'source "{REPO_ROOT}/tools/lib.sh"; dgxspark_sim_recreate_down_nodes'],
        env={"PATH": str(bin_dir), "STUB_DIR": str(tmp_path)}, capture_output=True, text=True, timeout=30, check=False)
    calls = (tmp_path / "calls.log").read_text().splitlines()
    return result, [call for call in calls if call.startswith("molecule destroy")]


def test_a_running_cluster_is_left_alone(tmp_path):
    result, destroys = run(tmp_path, created=True, running=dict.fromkeys(NODES, "true"))
    assert result.returncode == 0, result.stderr
    assert destroys == []
    assert result.stderr == ""


@pytest.mark.parametrize("running, down", [
    # The Docker daemon restarted: every container exists, none runs.
    (dict.fromkeys(NODES, "false"), "spark1 spark2 spark3 spark4 sim-upstream"),
    # One node stopped by hand.
    ({**dict.fromkeys(NODES, "true"), "spark3": "false"}, "spark3"),
    # One node removed by hand (docker rm -f): inspect finds nothing.
    ({name: "true" for name in NODES if name != "spark2"}, "spark2"),
])
def test_a_created_cluster_with_nodes_down_is_destroyed_and_named(tmp_path, running, down):
    result, destroys = run(tmp_path, created=True, running=running)
    assert result.returncode == 0, result.stderr
    assert destroys == ["molecule destroy -s cluster"]
    assert f"simulated nodes down or restarted since prepared ({down})" in result.stderr


def test_a_node_restarted_since_prepare_gets_the_cluster_recreated(tmp_path):
    # `docker restart spark4`: it runs, but its /run (a tmpfs) lost the mark.
    result, destroys = run(tmp_path, created=True, running=dict.fromkeys(NODES, "true"), restarted=("spark4",))
    assert destroys == ["molecule destroy -s cluster"]
    assert "(spark4)" in result.stderr


def test_a_cluster_never_created_is_left_to_molecule_create(tmp_path):
    result, destroys = run(tmp_path, created=False, running={})
    assert result.returncode == 0, result.stderr
    assert destroys == []
