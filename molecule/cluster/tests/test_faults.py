# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Faults operators meet, on the serving cluster, with completions sent all the
time (ServingMonitor): a node unreachable when a run starts, a fabric link down
and a full disk during restart.yml's phase 1. (A node rebooted while serving is
in test_engine_restart.py, where it takes the place of a killed rank.) Each test
records requests sent and failed and its duration (reports/faults/faults.json)
and leaves the cluster serving the inventory's version."""

from __future__ import annotations

import re
import time

import pytest

from helpers import (
    ServingMonitor,
    completion,
    deployed_record,
    engine_container,
    flat,
    group_vars,
    inventory_hosts,
    node_state,
    record_fault,
    run_playbook,
    wait_for,
)

testinfra_hosts = ["local://"]

HOSTS = sorted(inventory_hosts())
V2 = {"engine_image_ref": "{{ sim_engine_image_refs.v2 }}"}
FABRIC_NETDEV = group_vars()["roce_fabric_netdev"]


def containers():
    return {host: engine_container(host) for host in HOSTS}


def recap(output):
    """host -> (changed, unreachable, failed) from a PLAY RECAP."""
    return {host: tuple(int(n) for n in numbers) for host, *numbers in re.findall(
        r"^(spark\d)\s+:.*?changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output, re.MULTILINE)}


def serves():
    return completion(timeout=10)[0] == 200


@pytest.fixture
def serving_cluster():
    assert wait_for(serves, 60), "the cluster does not serve before the fault"
    yield
    # Whatever the test did, the next one finds the cluster serving.
    if not serves() or not wait_for(serves, 30):
        result = run_playbook("site.yml")
        assert result.returncode == 0, flat(result.stdout)[-3000:]


def test_a_node_unreachable_when_a_run_starts_stops_it_before_any_change(serving_cluster, tmp_path):
    began = time.monotonic()
    before = containers()
    versions = {host: deployed_record(host)["version"] for host in HOSTS}
    node_state("spark3", "systemctl stop ssh.socket ssh.service 2>/dev/null; systemctl stop ssh")
    # A fresh control path: a master connection kept from an earlier run would still reach the node.
    env = {"ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp")}
    try:
        with ServingMonitor() as monitor:
            runs = {playbook: run_playbook(playbook, extra_vars=extra, env=env)
                    for playbook, extra in (("site.yml", None), ("restart.yml", V2))}
    finally:
        node_state("spark3", "systemctl start ssh")
    for playbook, result in runs.items():
        out = flat(result.stdout)
        assert result.returncode != 0, (playbook, out[-2000:])
        assert re.search(r"\[spark3\]: UNREACHABLE!.*192\.168\.99\.13", out), (playbook, out[-2000:])
        # Stopped at once, on every node, before anything changed.
        assert recap(result.stdout) == {"spark1": (0, 0, 0), "spark2": (0, 0, 0), "spark3": (0, 1, 0),
                                        "spark4": (0, 0, 0)}, (playbook, out[-2000:])
        # No task of a later play ran: the first play's read stopped the run (later plays
        # are still announced, with no host left to run on). The inventory and tag checks,
        # on the controller, come before it; the inventory check's later imports only end
        # themselves on the controller (it ran once).
        first_plays = r"Inventory \| Refuse|Run \| Check|Preflight|Restart \| Check|Engine \| Check"
        later = [play for play in re.split(r"PLAY \[(?!%s)" % first_plays, result.stdout, maxsplit=1)[1:2]
                 for play in re.split(r"PLAY \[", "PLAY [" + play)[1:] if not play.startswith("Inventory | Refuse")]
        assert not any("TASK [" in part for part in later), (playbook, flat("".join(later))[:2000])
    assert containers() == before
    assert {host: deployed_record(host)["version"] for host in HOSTS} == versions
    entry = record_fault("node unreachable at start (site.yml and restart.yml)", monitor, began)
    assert entry["failed"] == 0 and entry["sent"] > 0


def rdma_port(host, state):
    """Turn the RoCE port of host's HCA DOWN (or back), as a ConnectX-7 reports a lost link,
    in the stand-in sysfs tree: its watching unit is stopped and the tree written once with
    --down, from the unit's own command line. The netdev itself stays up: the CPU engine's
    ranks talk TCP over it, so taking it down would stop the serving engine by itself (a
    real link loss breaks NCCL the same way), and what is tested is what the playbook does."""
    if state == "up":
        node_state(host, "systemctl start dgxspark-sim-rdma.service")
        return
    node_state(host, "systemctl stop dgxspark-sim-rdma.service; "
               "cmd=$(systemctl show -p ExecStart --value dgxspark-sim-rdma.service "
               "| sed -n 's/.*argv\\[\\]=\\([^;]*\\) ;.*/\\1/p' | sed 's/--watch [0-9.]*//'); "
               "$cmd --down")


def test_a_fabric_link_down_in_phase_1_fails_the_run_naming_it_and_stops_nothing(serving_cluster):
    began = time.monotonic()
    before = containers()
    versions = {host: deployed_record(host)["version"] for host in HOSTS}
    hca = group_vars()["roce_fabric_hca"]
    with ServingMonitor() as monitor:
        rdma_port("spark3", "down")
        try:
            assert "DOWN" in node_state("spark3", "cat %s/class/infiniband/%s/ports/1/state"
                                        % (group_vars()["roce_fabric_sysfs_root"], hca))
            result = run_playbook("restart.yml", extra_vars=V2)
        finally:
            rdma_port("spark3", "up")
    out = flat(result.stdout)
    assert result.returncode != 0
    assert re.search(r"spark3: %s GID index \d+ \([^)]*\), port DOWN" % hca, out), out[-3000:]
    assert all(changed == 0 for changed, _u, _f in recap(result.stdout).values()), out[-2000:]
    # Phase 2 never began: no unit switched, no rank stopped, and the old version served throughout.
    assert "Switch the units" not in out and "Stop every rank together" not in out
    assert containers() == before
    assert {host: deployed_record(host)["version"] for host in HOSTS} == versions
    entry = record_fault("fabric link (RoCE port) down in restart.yml phase 1", monitor, began)
    assert entry["failed"] == 0 and entry["sent"] > 0


def test_a_full_disk_while_the_new_image_spreads_is_refused_before_the_stop(serving_cluster):
    began = time.monotonic()
    v2_tag = "dgxspark/engine:" + group_vars()["sim_engine_image_refs"]["v2"].split("sha256:")[1][:12]
    # spark3 must receive the new image: it may hold it from an earlier upgrade.
    node_state("spark3", "docker rmi %s >/dev/null 2>&1 || true" % v2_tag)
    before = containers()
    versions = {host: deployed_record(host)["version"] for host in HOSTS}
    root = node_state("spark3", "docker info --format '{{.DockerRootDir}}'").strip()
    fill = root + "/dgxspark-fault-fill"
    # Leave 0.5 GB where the image lands: less than the image and the role's headroom need.
    free_kb = int(node_state("spark3", "df -Pk %s | awk 'NR==2 {print $4}'" % root))
    try:
        node_state("spark3", "fallocate -l %dk %s" % (max(free_kb - 512 * 1024, 1), fill))
        with ServingMonitor() as monitor:
            result = run_playbook("restart.yml", extra_vars=V2)
    finally:
        node_state("spark3", "rm -f %s" % fill)
    out = flat(result.stdout)
    assert result.returncode != 0
    assert re.search(r"\[spark3\].*(free|space)", out, re.IGNORECASE), out[-3000:]
    assert "Switch the units" not in out and "Stop every rank together" not in out
    assert containers() == before
    assert {host: deployed_record(host)["version"] for host in HOSTS} == versions
    entry = record_fault("disk full while the new image spreads", monitor, began)
    assert entry["failed"] == 0 and entry["sent"] > 0
