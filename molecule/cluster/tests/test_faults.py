# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Faults operators meet, on the serving cluster, with completions sent all the
time (ServingMonitor): a node unreachable when a run starts, a fabric link down
and a full disk during restart.yml's phase 1, the controller killed during the
unit switch and during the coordinated start, and a node rebooted while
serving. Each test records requests sent and failed and its duration
(reports/faults/faults.json) and leaves the cluster serving the inventory's
version; the file sorts after the other engine tests, and the last test ends
with site.yml, so test_rerun.py finds the cluster converged."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from helpers import (
    INVENTORY,
    ROOT,
    ServingMonitor,
    completion,
    deployed_record,
    engine_container,
    flat,
    group_vars,
    inventory_hosts,
    node_state,
    run_playbook,
    unit_state,
)

testinfra_hosts = ["local://"]

HOSTS = sorted(inventory_hosts())
V2 = {"engine_image_ref": "{{ sim_engine_image_refs.v2 }}"}
REPORT = ROOT / "reports" / "faults" / "faults.json"
FABRIC_NETDEV = group_vars()["roce_fabric_netdev"]


def record(fault, monitor, began):
    """Requests sent and failed during the fault and the test's duration, kept for the README's table."""
    sent = len(monitor.samples)
    failed = sum(1 for _started, ok in monitor.samples if not ok)
    entry = {"sent": sent, "failed": failed, "seconds": round(time.monotonic() - began, 1)}
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(REPORT.read_text()) if REPORT.is_file() else {}
    data[fault] = entry
    REPORT.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print("fault %s: %r" % (fault, entry))
    return entry


def containers():
    return {host: engine_container(host) for host in HOSTS}


def recap(output):
    """host -> (changed, unreachable, failed) from a PLAY RECAP."""
    return {host: tuple(int(n) for n in numbers) for host, *numbers in re.findall(
        r"^(spark\d)\s+:.*?changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output, re.MULTILINE)}


def wait_for(predicate, timeout, step=1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def serves():
    return completion(timeout=10)[0] == 200


def one_version_everywhere():
    """Every rank runs the image its deployed version names, and all ranks the same: no mixed cluster."""
    records = {host: deployed_record(host) for host in HOSTS}
    running = {host: engine_container(host, "{{.Image}}") for host in HOSTS}
    assert len({r["version"] for r in records.values()}) >= 1
    assert len({r["image_id"] for r in records.values()}) == 1, records
    assert running == {host: records[host]["image_id"] for host in HOSTS}, (running, records)
    assert [unit_state(host) for host in HOSTS] == ["active"] * len(HOSTS)
    return records


def run_until_killed(playbook, pattern, extra_vars=None, timeout=600):
    """Start a playbook and SIGKILL the controller (its whole process group: the main
    process and the workers it forked) as soon as a line of its output matches
    O(pattern). Returns the output up to the kill."""
    cmd = ["ansible-playbook", "-i", str(INVENTORY), str(ROOT / "playbooks" / playbook)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines = []
    deadline = time.monotonic() + timeout
    killed = False
    try:
        for line in proc.stdout:
            lines.append(line)
            if re.search(pattern, "".join(lines[-40:])):
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            if time.monotonic() > deadline:
                break
    finally:
        if not killed:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert killed, "the playbook never reached %r:\n%s" % (pattern, "".join(lines)[-3000:])
    return "".join(lines)


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
        # No later play began: the first play's read stopped the run.
        assert "PLAY [Node software" not in out and "PLAY [Engine image" not in out, (playbook, out[-2000:])
    assert containers() == before
    assert {host: deployed_record(host)["version"] for host in HOSTS} == versions
    entry = record("node unreachable at start (site.yml and restart.yml)", monitor, began)
    assert entry["failed"] == 0 and entry["sent"] > 0


def test_a_fabric_link_down_in_phase_1_fails_the_run_naming_it_and_stops_nothing(serving_cluster):
    began = time.monotonic()
    before = containers()
    versions = {host: deployed_record(host)["version"] for host in HOSTS}
    with ServingMonitor() as monitor:
        node_state("spark3", "ip link set %s down" % FABRIC_NETDEV)
        try:
            result = run_playbook("restart.yml", extra_vars=V2)
        finally:
            node_state("spark3", "ip link set %s up" % FABRIC_NETDEV)
        # The ranks' connections over the fabric outlive a short outage.
        assert wait_for(serves, 90), "the cluster did not serve again after the link came back"
    out = flat(result.stdout)
    assert result.returncode != 0
    assert re.search(r"spark3: .*%s" % FABRIC_NETDEV, out), out[-3000:]
    assert all(changed == 0 for changed, _u, _f in recap(result.stdout).values()), out[-2000:]
    # Phase 2 never began: no unit switched, no rank stopped.
    assert "Switch the units" not in out and "Stop every rank together" not in out
    assert containers() == before
    assert {host: deployed_record(host)["version"] for host in HOSTS} == versions
    record("fabric link down in restart.yml phase 1", monitor, began)


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
    entry = record("disk full while the new image spreads", monitor, began)
    assert entry["failed"] == 0 and entry["sent"] > 0


def test_the_controller_killed_during_the_switch_and_the_start_leaves_no_mixed_cluster(serving_cluster):
    began = time.monotonic()
    v1 = one_version_everywhere()
    with ServingMonitor() as monitor:
        # Killed as the first rank switched its units (the old version still runs everywhere).
        run_until_killed("restart.yml", r"Switch the units to version \w+\] \*+\s+changed: \[spark\d\]", V2)
        # The re-run restarts every rank that does not run its switched version.
        result = run_playbook("restart.yml", extra_vars=V2)
        assert result.returncode == 0, flat(result.stdout)[-3000:]
        v2 = one_version_everywhere()
        assert v2["spark1"]["image_id"] != v1["spark1"]["image_id"]
        assert serves()
        # Killed as the head was about to start, its workers already started on the inventory's version.
        run_until_killed("restart.yml", r"TASK \[[^\]]*Engine \| Start the head rank\]")
        result = run_playbook("restart.yml")
        assert result.returncode == 0, flat(result.stdout)[-3000:]
        after = one_version_everywhere()
        assert after["spark1"]["image_id"] == v1["spark1"]["image_id"]
        assert serves()
    record("controller killed during the unit switch and the coordinated start", monitor, began)


def test_a_rebooted_node_is_named_does_not_come_back_half_alive_and_site_yml_restores_serving(serving_cluster):
    began = time.monotonic()
    with ServingMonitor() as monitor:
        subprocess.run(["docker", "restart", "spark3"], check=True, capture_output=True)
        # The node's own boot: Docker gives it its interfaces back under their container names; a
        # Spark keeps its port names across boots, as the harness's prepare step makes them.
        node_state("spark3", "for n in $(ls /sys/class/net); do "
                   "if ip -4 -o addr show dev $n | grep -q ' 192\\.168\\.100\\.'; then ip link set $n down; "
                   "ip addr flush dev $n; ip link set $n name %s; ip link set %s mtu 1500 up; fi; done; "
                   "systemctl restart dgxspark-sim-rdma.service systemd-networkd" % (FABRIC_NETDEV, FABRIC_NETDEV))
        assert wait_for(lambda: subprocess.run(["ssh-keyscan", "-T", "2", "192.168.99.13"], capture_output=True,
                                               check=False).returncode == 0, 60)
        # The rebooted rank's unit is not started at boot, and the ranks that lost their peer stop.
        assert wait_for(lambda: all(unit_state(host) != "active" for host in HOSTS), timeout=240), \
            {host: unit_state(host) for host in HOSTS}
        status = run_playbook("status.yml")
        assert status.returncode != 0
        assert "spark3" in flat(status.stdout), flat(status.stdout)[-3000:]
        assert re.search(r"spark3: unit dgxspark-engine\.service is \w+", flat(status.stdout)), flat(status.stdout)[-3000:]
        result = run_playbook("site.yml")
        assert result.returncode == 0, flat(result.stdout)[-3000:]
        one_version_everywhere()
        assert serves()
    record("node rebooted while serving", monitor, began)
