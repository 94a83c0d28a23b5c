# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""--limit on the serving cluster: a limit that leaves nodes out is refused before any
change by every playbook whose parts act on the whole cluster together, naming the nodes
left out and the fix; the inventory check still runs under a limit (its play is the
controller's, which a limit to nodes would otherwise skip); and the parts that act on each
node alone run on the limited node, changing nothing on a converged cluster and leaving the
engine serving untouched."""

from __future__ import annotations

import re

from helpers import completion, engine_container, flat, inventory_hosts, run_playbook, run_side_by_side

testinfra_hosts = ["local://"]

HOSTS = sorted(inventory_hosts())
NODE_PARTS = "driver,runtime,hardening,fabric,monitoring"


def test_a_limit_that_splits_the_cluster_is_refused_and_node_parts_run_on_the_limited_node():
    before = {host: engine_container(host) for host in HOSTS}
    runs = run_side_by_side({
        "site one node": ("site.yml", ["--limit", "spark2"], None),
        "restart one replica's nodes": ("restart.yml", ["--limit", "spark3,spark4"], None),
        "validate one node": ("validate.yml", ["--limit", "spark2"], None),
        "bad port under a limit": ("site.yml", ["--limit", "spark2", "--tags", NODE_PARTS],
                                   {"engine_service_api_port": 70000}),
    })
    for name, result in runs.items():
        assert result.returncode != 0, (name, flat(result.stdout)[-2000:])
        # Refused before the first change: the run lock (taken before it) was never reached.
        assert "Take the cluster's run lock" not in result.stdout, (name, flat(result.stdout)[-2000:])
    site = flat(runs["site one node"].stdout)
    assert ("--limit leaves out spark1, spark3, spark4 of the cluster (spark1, spark2, spark3, spark4), but site.yml"
            " runs fabric_report, image, weights, engine, balancer") in site, site[-2000:]
    assert "--limit spark2 --tags %s" % NODE_PARTS in site, site[-2000:]
    restart = flat(runs["restart one replica's nodes"].stdout)
    assert "--limit leaves out spark1, spark2 of the cluster" in restart, restart[-2000:]
    assert "restart.yml runs image, weights, engine" in restart and "--tags" not in restart.split("--limit leaves")[1]
    assert "validate.yml runs fabric_report" in flat(runs["validate one node"].stdout)
    # The inventory check is the controller's play: a limit to a node does not skip it.
    port = flat(runs["bad port under a limit"].stdout)
    assert re.search(r"engine_service_api_port.{0,200}70000", port), port[-2000:]
    assert "Refuse undeclared variables" in port

    node_run = run_playbook("site.yml", "--limit", "spark2", "--tags", NODE_PARTS)
    out = flat(node_run.stdout)
    assert node_run.returncode == 0, out[-3000:]
    recap = [line for line in node_run.stdout.splitlines() if re.match(r"^spark\d\s+:", line)]
    assert len(recap) == 1 and recap[0].startswith("spark2") and "changed=0" in recap[0], recap
    assert "Ran on spark2 only (--limit, leaving out spark1, spark3, spark4)" in out and "were left out" in out, (
        out[-2000:]
    )
    assert re.search(r"driver\s+\d+\.\d s", out) and re.search(r"engine\s+not run \(", out), out[-2000:]
    # The engine plays ended at once: no image, weights or engine check judged the
    # cluster from one node, and no rank restarted.
    assert "Engine image | Require the image on every node" not in out
    assert {host: engine_container(host) for host in HOSTS} == before
    assert completion()[0] == 200
