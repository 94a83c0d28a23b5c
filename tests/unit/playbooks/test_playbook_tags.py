# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tags of the entry playbooks, as ansible-playbook itself lists them.

Every part of site.yml and restart.yml has its tag, and choosing parts never
leaves out the checks and the reads the running parts rely on: listed with
--tags engine, site.yml still runs the preflight checks, finds the fabric
facts and exports the image and weights the engine renders from. A selection
that names no part, or skips the checks, is refused by the first play, before
any node is reached. The listings read the simulated inventory (with its vault
identity, from ansible.cfg); nothing connects to a node.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from unit_support import REPO_ROOT

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._run_summary import PLAYBOOK_PARTS

PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def ansible_playbook(*args, inventory=None):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    cmd = [str(PLAYBOOK), *args] + (["-i", str(inventory)] if inventory else [])
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


@functools.cache
def listing(*args):
    done = ansible_playbook(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def task_lines(output):
    """The task lines of a --list-tasks output: (play name, task line without its tags)."""
    tasks, play = [], None
    for text in output.splitlines():
        found = re.match(r"^  play #\d+ \([^)]*\): (.*?)\tTAGS:", text)
        if found:
            play = found.group(1)
        elif text.startswith("      ") and "\tTAGS: [" in text:
            tasks.append((play, text.strip().split("\tTAGS:")[0]))
    return tasks


def listed_tags(output):
    tags = set()
    for found in re.findall(r"TASK TAGS: \[([^\]]*)\]", output):
        tags.update(tag.strip() for tag in found.split(",") if tag.strip())
    return tags


@pytest.mark.parametrize("playbook", sorted(PLAYBOOK_PARTS))
def test_the_playbook_lists_exactly_its_parts_and_always(playbook):
    assert listed_tags(listing("--list-tags", "playbooks/" + playbook)) == set(PLAYBOOK_PARTS[playbook]) | {"always"}


def test_tags_engine_keeps_the_checks_and_the_facts_the_engine_reads():
    everything = [task for _play, task in task_lines(listing("--list-tasks", "playbooks/site.yml"))]
    engine = [task for _play, task in task_lines(listing("--list-tasks", "--tags", "engine", "playbooks/site.yml"))]
    for task in [
        # The preflight checks.
        "dgxspark.cluster.preflight : Preflight | Check the inventory, the node, its free disk space and its GPU",
        "Preflight | Check the driver, runtime, image and fabric report inputs against their role specs",
        "dgxspark.cluster.engine_service : Engine | Check the engine configuration of the whole cluster",
        "dgxspark.cluster.model_weights : Model weights | Require a repository, a safe weights directory, a vaulted "
        "token and a source node in the play",
        "dgxspark.cluster.model_weights : Model weights | Refuse a weights directory that holds other data",
        # The fabric facts, found by the engine playbook when the fabric part does not run.
        "Engine | Check the fabric links and find the GIDs",
        # The image and the weights the engine renders from, and the guards that the nodes hold them.
        "dgxspark.cluster.engine_image : Engine image | Read the images of this node",
        "dgxspark.cluster.engine_image : Engine image | Require the image on every node when this run leaves it alone",
        "dgxspark.cluster.engine_image : Engine image | Export the image of the cluster",
        "dgxspark.cluster.model_weights : Model weights | Require this copy to hold the revision when this run leaves "
        "the weights alone",
        "dgxspark.cluster.model_weights : Model weights | Export the directory the engine mounts",
        # The engine itself, and the summary.
        "dgxspark.cluster.engine_service : Engine | Write this rank's version {{ engine_service_version }}",
        "Engine | Coordinated start",
        "Summary | Show where the API is, how to try it and what each part took",
    ]:
        assert task in engine, task
    for task in [
        "dgxspark.cluster.roce_fabric : Fabric | Configure the links",
        "dgxspark.cluster.nvidia_driver : NVIDIA driver | Query the driver and read the kernels and the held packages",
        "dgxspark.cluster.engine_image : Engine image | Bring the image to the nodes that lack it",
        "dgxspark.cluster.model_weights : Model weights | Download, sync and verify where a copy lacks the revision",
        "dgxspark.cluster.monitoring : Monitoring | Read the packages, files and units of the monitoring stack",
        "dgxspark.cluster.balancer : Balancer | Read the package, the file and the unit in one call",
    ]:
        assert task in everything, task
        assert task not in engine, task


def test_skip_tags_monitoring_lists_no_monitoring_task():
    def monitoring(output):
        return [(play, task) for play, task in task_lines(output)
                if play.startswith("Monitoring |") or task.startswith(("dgxspark.cluster.monitoring :", "Monitoring |"))]

    assert monitoring(listing("--list-tasks", "playbooks/site.yml"))
    assert monitoring(listing("--list-tasks", "--skip-tags", "monitoring", "playbooks/site.yml")) == []
    # The rest still runs, the engine's start among it.
    skipped = [task for _play, task in task_lines(listing("--list-tasks", "--skip-tags", "monitoring", "playbooks/site.yml"))]
    assert "Engine | Coordinated start" in skipped
    assert "dgxspark.cluster.balancer : Balancer | Read the package, the file and the unit in one call" in skipped


@pytest.mark.parametrize(("playbook", "args", "message"), [
    ("site.yml", ["--tags", "engin"], "--tags engin: site.yml has no part engin (did you mean engine?); its parts are: preflight, driver,"),
    ("site.yml", ["--skip-tags", "preflight"], "--skip-tags preflight: the preflight checks"),
    ("restart.yml", ["--tags", "monitoring"], "--tags monitoring: restart.yml has no part monitoring"),
])
def test_a_bad_selection_stops_the_run_before_any_node(tmp_path, playbook, args, message):
    # Nodes that cannot be reached (a loopback port nothing listens on): a run
    # that went past the first plays would fail on them instead. No
    # placeholder either, so the inventory check lets the run on to the tags.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("dgxspark_cluster:\n  vars: {preflight_require_api_key: false}\n  hosts:\n"
                         + "".join("    spark%d: {ansible_host: 127.0.0.%d, ansible_port: 9, ansible_connection: ssh}\n"
                                   % (n, n + 1) for n in range(1, 5)))
    done = ansible_playbook("playbooks/" + playbook, *args, inventory=inventory)
    assert done.returncode != 0
    assert message in " ".join(done.stdout.split()), done.stdout[-3000:]
    assert re.findall(r"^PLAY \[(.*?)\]", done.stdout, re.MULTILINE) == [
        "Inventory | Refuse placeholder values before contacting any host", "Run | Check the parts the tags choose"]
    assert "UNREACHABLE" not in done.stdout
