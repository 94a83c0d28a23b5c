# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Docker daemon options that open the daemon are refused in the preflight.
Runs on the controller against the converged simulated cluster, runtime part
only (--tags runtime), so the run costs the preflight and one role. (An option
only dockerd can judge, written, rolled back and corrected, is in
test_engine_restart.py: it stops every rank, and the layout switch after it
brings them back, so the suite pays for one start of the cluster, not two.)"""

from __future__ import annotations

import re

from helpers import (
    assert_nothing_changed,
    flat,
    group_vars,
    node_file_digests,
    run_playbook,
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
