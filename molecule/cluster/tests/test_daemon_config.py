# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Docker daemon options: refused in the preflight when they open the daemon or
cannot start it; an option only dockerd can judge is written, Docker does not
come back, the previous daemon.json is put back, and a corrected run converges.
Runs on the controller against the converged simulated cluster, runtime part
only (--tags runtime), so each run costs the preflight and one role."""

from __future__ import annotations

import re

from helpers import (
    assert_nothing_changed,
    completion,
    flat,
    group_vars,
    node_file_digests,
    node_state,
    run_playbook,
    unit_state,
)

testinfra_hosts = ["local://"]

DAEMON_JSON = "/etc/docker/daemon.json"


def with_options(**added):
    """The simulated inventory's daemon options (its plain-HTTP registry) plus O(added)."""
    return {**group_vars()["container_runtime_daemon_options"], **added}


def test_an_open_tcp_daemon_is_refused_in_the_preflight():
    hosts = ["spark1", "spark2", "spark3", "spark4"]
    before = node_file_digests(hosts, [DAEMON_JSON])
    result = run_playbook("site.yml", "--tags", "runtime",
                          extra_vars={"container_runtime_daemon_options": with_options(hosts=["tcp://0.0.0.0:2375"])})
    assert result.returncode != 0, result.stdout
    output = flat(result.stdout)
    assert re.search(r"spark\d: container_runtime_daemon_options\.hosts holds tcp://0\.0\.0\.0:2375 without "
                     r"tlsverify: true", output), output[-3000:]
    assert_nothing_changed(result)
    assert node_file_digests(hosts, [DAEMON_JSON]) == before


def test_a_daemon_option_dockerd_refuses_is_rolled_back_and_a_corrected_run_converges():
    # Every node gets the option (-e); the preflight's engine checks need the whole cluster.
    hosts = ["spark1", "spark2", "spark3", "spark4"]
    before = node_file_digests(hosts, [DAEMON_JSON])
    bad = {"container_runtime_daemon_options": with_options(**{"dgxspark-no-such-option": True})}
    result = run_playbook("site.yml", "--tags", "runtime", extra_vars=bad)
    assert result.returncode != 0, result.stdout
    output = flat(result.stdout)
    assert re.search(r"spark\d: (Docker did not start with the new|dockerd --validate refused the new) "
                     r"/etc/docker/daemon\.json", output), output[-3000:]
    assert "dgxspark-no-such-option" in output
    # The previous file is back and Docker runs on it. The ranks did not survive the
    # failed restart (their units run the docker client, which the daemon's exit ends):
    # bookworm's dockerd 20.10 has no --validate to refuse the file before the restart.
    assert node_file_digests(hosts, [DAEMON_JSON]) == before
    for host in hosts:
        assert node_state(host, "systemctl is-active docker").strip() == "active", host

    # The corrected inventory (the option left out): the runtime has nothing left to
    # change, and site.yml brings the lane back to serving.
    rerun = run_playbook("site.yml", "--tags", "runtime")
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    recap = dict(re.findall(r"^(spark\d)\s+:.*?changed=(\d+)", rerun.stdout, re.MULTILINE))
    assert recap == dict.fromkeys(hosts, "0"), recap
    back = run_playbook("site.yml")
    assert back.returncode == 0, flat(back.stdout)[-3000:]
    for host in hosts:
        assert unit_state(host) == "active", host
    status, text = completion()
    assert status == 200 and text, (status, text)
