# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""restart.yml on the serving cluster: an upgrade with a short serving gap
(after a first attempt whose controller was killed mid-switch), a version
that never serves because a worker cannot start (every rank stopped, every
journal collected, the previous version back), and a node rebooted while
serving (site.yml's controller killed once during the coordinated start that
restores it). The tests run in order and end with site.yml bringing the
cluster back to the inventory's version. The fault tests record requests sent
and failed in reports/faults/faults.json."""

from __future__ import annotations

import re
import subprocess
import time

from helpers import (
    ROOT,
    ServingMonitor,
    completion,
    deployed_record,
    engine_container,
    firing,
    flat,
    inventory_hosts,
    node_state,
    one_version_everywhere,
    query,
    record_alert_time,
    record_fault,
    run_playbook,
    run_until_killed,
    sim_node_boot,
    unit_state,
    wait_for,
    wait_for_alert,
)

testinfra_hosts = ["local://"]

HOSTS = sorted(inventory_hosts())
V2 = {"engine_image_ref": "{{ sim_engine_image_refs.v2 }}"}


def image_ids():
    return {host: engine_container(host, "{{.Image}}") for host in HOSTS}


def test_restart_of_an_unchanged_version_restarts_nothing_and_says_how_to_force_it():
    containers = {host: engine_container(host) for host in HOSTS}
    result = run_playbook("restart.yml")
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    assert {host: engine_container(host) for host in HOSTS} == containers
    assert len(re.findall(r"^spark\d\s+:.*changed=0 ", result.stdout, re.MULTILINE)) == len(HOSTS), flat(result.stdout)[-2000:]
    assert "nothing changed, so no rank restarts" in flat(result.stdout)
    assert "-e engine_service_restart=true" in flat(result.stdout)


def test_upgrade_to_a_new_image_serves_until_the_switch_and_after_it_even_when_the_controller_dies_mid_switch():
    """An upgrade whose controller is killed (SIGKILL of ansible-playbook and its workers) as the
    first rank's units switch: the old version keeps serving everywhere, and a re-run of the same
    restart.yml restarts every rank, including those whose units had switched, onto the new
    version together; no rank is left on a mixed version."""
    began = time.monotonic()
    old = {host: deployed_record(host) for host in HOSTS}
    with ServingMonitor() as monitor:
        run_until_killed("restart.yml", r"Switch the units to version \w+\] \*+\s+changed: \[spark\d\]", V2)
        switched = [host for host in HOSTS if deployed_record(host)["version"] != old[host]["version"]]
        assert switched, "the controller was killed before any rank switched"
        # The kill left the old version running on every rank.
        assert image_ids() == {host: old[host]["image_id"] for host in HOSTS}
        killed_at = time.monotonic()
        result = run_playbook("restart.yml", extra_vars=V2)
        time.sleep(2)
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    assert sum(1 for started, ok in monitor.samples if started < killed_at and not ok) == 0
    one_version_everywhere()
    record_fault("controller killed during the unit switch of restart.yml", monitor, began)
    new = {host: deployed_record(host) for host in HOSTS}
    assert len({record["image_id"] for record in new.values()}) == 1
    assert all(new[h]["image_id"] != old[h]["image_id"] and new[h]["version"] != old[h]["version"] for h in HOSTS)
    assert set(image_ids().values()) == {new["spark1"]["image_id"]}
    # The new image's marker is what the head runs now.
    assert node_state("spark1", "docker exec dgxspark-engine cat /etc/dgxspark-sim-engine-version").strip() == "v2"
    gap = monitor.longest_gap()
    assert gap is not None, "the cluster did not serve again after the upgrade"
    # Phase 1 ran while serving: the outage is the coordinated stop and start, well under the run itself.
    served_during_phase_1 = sum(1 for _started, ok in monitor.samples if ok)
    assert served_during_phase_1 > 10
    print("serving gap of the upgrade: %.1f s" % gap)
    # The run says where the gap went, read from the head's journal.
    # (YAML output doubles the quote: gap''s.)
    parts = re.search(r"The gap'{1,2}s parts: stop ([\d.]+) s, startup ([\d.]+) s, rendezvous ([\d.]+) s, "
                      r"model load ([\d.]+) s, engine init ([\d.]+) s, first completion ([\d.]+) s", flat(result.stdout))
    assert parts, flat(result.stdout)[-3000:]
    # The ranks are killed after engine_service_stop_timeout (1 s here, then docker and
    # systemd wind down: a few seconds on a loaded 2-core machine), not systemd's 90 s.
    assert float(parts.group(1)) < 1 + 10
    assert sum(float(value) for value in parts.groups()) <= gap + 5
    for host in HOSTS:
        previous = node_state(host, "readlink /etc/dgxspark/engine/previous").strip()
        assert previous.endswith("/" + old[host]["version"])


# One failed start proves the rollback: a version that never serves (here
# because spark3's rank cannot start) is rolled back everywhere, every rank
# of it stopped and every journal collected. (An earlier separate test with a
# flag vLLM rejects took the same path: a failed unit fails the verdict.)
def test_a_version_whose_worker_cannot_start_is_rolled_back_with_every_rank_stopped_and_journal_collected(tmp_path):
    serving = {host: deployed_record(host)["version"] for host in HOSTS}
    override = tmp_path / "override.yml"
    override.write_text("dgxspark_cluster:\n  hosts:\n    spark3:\n      engine_service_extra_mounts:\n"
                        "        - {src: /opt/dgxspark-sim/no-such-runtime, dest: /opt/vllm-runtime}\n")
    since = node_state("spark1", "date -u '+%F %T'").strip()
    result = run_playbook("restart.yml", "-i", str(override), extra_vars=V2)
    out = flat(result.stdout)
    assert result.returncode != 0
    assert "spark3: unit dgxspark-engine.service is failed" in out and "Rolled back from" in out, out[-3000:]
    assert "did not come up healthy" in out and "which serves again" in out, out[-3000:]
    failed = re.search(r"spark1: version (\w+) did not come up healthy", out).group(1)
    # Every rank of the failed version was stopped, not only the one that failed...
    for host in ("spark1", "spark2", "spark4"):
        version = re.search(r"%s: version (\w+) did not come up healthy" % host, out).group(1)
        journal = node_state(host, "journalctl -u dgxspark-engine.service --since '%s' --no-pager -o cat" % since)
        events = [line for line in journal.splitlines() if line.startswith(("Started dgxspark-engine", "Stopped dgxspark-engine"))]
        started = [i for i, line in enumerate(events) if line.startswith("Started") and "version %s)" % version in line]
        assert started and events[started[0] + 1].startswith("Stopped"), events
    # ...each rank's journal of the failed start reached the controller...
    logs = {host: sorted((ROOT / "reports" / "engine").glob("%s-*.log" % host), key=lambda path: path.stat().st_mtime)
            for host in HOSTS}
    assert all(logs.values()) and "no-such-runtime" in logs["spark3"][-1].read_text()
    assert failed in logs["spark1"][-1].name
    # ...and the version that served before serves again.
    assert {host: deployed_record(host)["version"] for host in HOSTS} == serving
    assert [unit_state(host) for host in HOSTS] == ["active"] * 4
    assert completion()[0] == 200
    # Only spark3's version changed (the others were asked to restart): its history records the
    # switch and the rollback; the others switched nothing.
    assert "rollback:" in node_state("spark3", "tail -n 1 /var/lib/dgxspark/engine/history.log")
    assert not any("rollback:" in node_state(host, "tail -n 1 /var/lib/dgxspark/engine/history.log")
                   for host in ("spark1", "spark2", "spark4"))


def test_a_rebooted_node_is_named_does_not_come_back_half_alive_and_site_yml_restores_serving_after_a_kill():
    """A node rebooted while serving (its container restarted): its rank dies with it and is not
    started at boot, the ranks that lost their peer are stopped by their watchdogs, status.yml
    names the node, and site.yml brings the inventory's version back, coordinated."""
    assert completion()[0] == 200
    began = time.monotonic()
    with ServingMonitor() as monitor:
        rebooted = time.monotonic()
        subprocess.run(["docker", "restart", "spark3"], check=True, capture_output=True)
        sim_node_boot("spark3")
        # Monitoring (site.yml deploys it) sees the rank down.
        record_alert_time("DgxsparkEngineRankDown", wait_for_alert("DgxsparkEngineRankDown", {"host": "spark3"},
                                                                   180, since=rebooted))
        # The rebooted rank's unit is not started at boot; the ranks that lost their peer stop.
        assert wait_for(lambda: all(unit_state(host) != "active" for host in HOSTS), timeout=240), \
            {host: unit_state(host) for host in HOSTS}
        status = run_playbook("status.yml")
        out = flat(status.stdout)
        assert status.returncode != 0
        assert re.search(r"spark3: unit dgxspark-engine\.service is (failed|inactive)", out), out[-3000:]
        # The head's engine dies with its peer; the other workers would wait forever: their watchdogs stop them.
        watchdogs = {host: node_state(host, "journalctl -u dgxspark-engine-watchdog.service --no-pager -o cat | tail -n 5")
                     for host in ("spark2", "spark4")}
        assert all("half-alive" in text for text in watchdogs.values()), watchdogs
        # site.yml sees ranks down and starts the inventory's version, coordinated. Its controller
        # is killed once as the head is about to start (the workers already started on the
        # inventory's version): a re-run of site.yml converges to one version on every rank.
        run_until_killed("site.yml", r"TASK \[[^\]]*Engine \| Start the head rank\]")
        result = run_playbook("site.yml")
        assert result.returncode == 0, flat(result.stdout)[-3000:]
        one_version_everywhere()
        # The monitoring stack came back with the node: that run's monitoring play changed nothing.
        monitoring_play = result.stdout.split("PLAY [Monitoring")[1].split("PLAY [")[0]
        assert not re.search(r"^changed: ", monitoring_play, re.MULTILINE), monitoring_play
        assert node_state("spark1", "docker exec dgxspark-engine cat /etc/dgxspark-sim-engine-version").strip() == "v1"
        assert completion()[0] == 200
    assert run_playbook("status.yml").returncode == 0
    assert wait_for(lambda: not firing("DgxsparkEngineRankDown") and all(r["value"][1] == "1" for r in query("up")), 60), \
        (firing("DgxsparkEngineRankDown"), query("up"))
    record_fault("node rebooted while serving, site.yml killed during the coordinated start", monitor, began)
