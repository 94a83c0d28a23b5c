# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The entry playbooks refuse the sample inventory's placeholders on the controller, before
any host is contacted; the simulated inventory passes the same check. Each case is one
ansible-playbook run from the checkout (a few seconds, no node needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from unit_support import REPO_ROOT

ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
SAMPLE_HOSTS = ["spark1", "spark2", "spark3", "spark4"]
# Every placeholder of inventory/sample, as the refusal names it.
SAMPLE_PLACEHOLDERS = [
    "spark1..spark4: engine_image_ref is registry.example.com/vllm/vllm-dspark-gb10:production-3.75@sha256:"
    + "0" * 64 + " (the registry registry.example.com is a name under the reserved domain example.com",
    "spark1..spark4: engine_image_ref is sha256:" + "0" * 64 + " (a digest of one repeated hex digit)",
    "spark1..spark4: model_weights_hf_revision is 0123456789abcdef0123456789abcdef01234567 (a revision that is a "
    "run of consecutive hex digits)",
    "spark1..spark4: engine_service_api_key is not set",
]


def run(inventory, playbook, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(REPO_ROOT / "playbooks" / playbook),
                           *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    return done, " ".join(done.stdout.split())


def recap_hosts(stdout):
    recap = stdout.partition("PLAY RECAP")[2]
    return re.findall(r"^(\S+)\s+: ok=", recap, re.MULTILINE)


@pytest.mark.parametrize("playbook", ["site.yml", "restart.yml"])
def test_the_sample_inventory_is_refused_before_any_host_is_contacted(playbook):
    done, output = run(REPO_ROOT / "inventory" / "sample", playbook)
    assert done.returncode != 0, output[-3000:]
    assert "The inventory still holds 8 placeholder value(s); no host was contacted." in output, output[-3000:]
    for placeholder in SAMPLE_PLACEHOLDERS:
        assert placeholder in output, placeholder
    assert ("spark1..spark4: ansible_host is 192.0.2.11" not in output
            and "spark1: ansible_host is 192.0.2.11 (an address of the documentation range 192.0.2.0/24" in output
            and "spark4: ansible_host is 192.0.2.14" in output)
    # Only the controller ran a task: no cluster host is in the recap.
    assert recap_hosts(done.stdout) == ["localhost"], done.stdout[-2000:]


def test_a_host_vars_override_is_judged_per_host(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO_ROOT / "inventory" / "sample", inventory)
    (inventory / "host_vars").mkdir()
    (inventory / "host_vars" / "spark3.yml").write_text(
        "---\nansible_host: 10.10.0.13\nmodel_weights_hf_revision: 5d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1a0\n")
    done, output = run(inventory, "inventory_check.yml")
    assert done.returncode != 0, output[-3000:]
    assert "spark1, spark2, spark4: model_weights_hf_revision is 0123456789abcdef" in output, output[-3000:]
    assert "spark3: ansible_host" not in output and "spark3: model_weights_hf_revision" not in output
    assert "spark1..spark4: engine_service_api_key is not set" in output


def test_the_simulated_inventory_passes():
    # prepare_upstream.yml writes the image references of the simulated registry; a
    # stand-in of the same shape here.
    refs = {"sim_engine_image_refs": {"v1": "192.168.99.5:5000/dgxspark/vllm-sim@sha256:" + "4f1c9a0e7b2d" * 5 + "9a3e"}}
    done, output = run(REPO_ROOT / "inventory" / "simulated" / "hosts.yml", "inventory_check.yml",
                       "-e", json.dumps(refs))
    assert done.returncode == 0, output[-3000:]
    assert recap_hosts(done.stdout) == ["localhost"]


SIM_REFS = {"sim_engine_image_refs": {"v1": "192.168.99.5:5000/dgxspark/vllm-sim@sha256:" + "4f1c9a0e7b2d" * 5 + "9a3e"}}


def simulated_copy(tmp_path, host_vars=None, drop_groups=()):
    """A copy of the simulated inventory, O(host_vars) (host to its values) as host_vars files
    and the groups O(drop_groups) left out; the path of its hosts file."""
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO_ROOT / "inventory" / "simulated", inventory)
    hosts = inventory / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    for group in drop_groups:
        del data[group]
    hosts.write_text(yaml.safe_dump(data))
    (inventory / "host_vars").mkdir()
    for host, values in (host_vars or {}).items():
        (inventory / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(values))
    return hosts


@pytest.mark.parametrize("host_vars, drop_groups, expected", [
    ({"spark3": {"engine_service_start_timout": 600}}, (),
     "spark3: engine_service_start_timout is set (to 600) but no role declares it, so it would be ignored and the "
     "default used; did you mean engine_service_start_timeout?"),
    ({"spark3": {"bench_request_timeout": -1}}, (),
     "spark3: bench_request_timeout is -1; expected a number from 0.01 to 86400."),
    ({"spark3": {"engine_service_replicas": 2}}, ("dgxspark_balancer",),
     "spark3: engine_service_replicas is 2, a fleet that needs the balancer, but the inventory has no group "
     "dgxspark_balancer."),
    # A monitoring host named but missing: Prometheus would fall back to the first engine host.
    ({"spark3": {"monitoring_server_group": "monitoring"}}, (),
     "spark3: monitoring_server_group is monitoring, but the inventory has no group monitoring; expected a group that "
     "holds the host Prometheus runs on."),
    # balancer.yml's play targets dgxspark_balancer by name: another group would be left out.
    ({"spark3": {"balancer_group": "lb"}}, (),
     "spark3: balancer_group is lb; expected dgxspark_balancer, the group playbooks/balancer.yml runs the role on"),
], ids=["unknown_variable", "out_of_range", "fleet_without_balancer_group", "monitoring_group_missing",
        "balancer_group_not_the_plays"])
def test_one_hosts_unknown_out_of_range_or_layout_input_is_refused_on_the_controller(tmp_path, host_vars,
                                                                                     drop_groups, expected):
    done, output = run(simulated_copy(tmp_path, host_vars, drop_groups), "site.yml", "-e", json.dumps(SIM_REFS))
    assert done.returncode != 0, output[-3000:]
    assert expected in output, output[-3000:]
    assert not re.search(r"spark[124]: (engine_service|bench)_", output), output[-3000:]
    assert recap_hosts(done.stdout) == ["localhost"], done.stdout[-2000:]


SECRET = "sk-never-shown-0123"


@pytest.mark.parametrize("values, expected", [
    ({"model_weights_dir": "/srv"},
     "spark3: model_weights_dir is /srv; expected the model's own directory, an absolute normalised path at least 3 "
     "levels deep (/srv/models/<name>), since the weights sync (rsync --delete) deletes whatever else it holds; /srv "
     "is 1 level deep, a shared directory. Set model_weights_dir to a directory only the weights live in."),
    ({"engine_service_container_extra_args": ["--env", "HF_TOKEN=" + SECRET]},
     "spark3: engine_service_container_extra_args[1] holds HF_TOKEN, a secret, on a command line (its value is not "
     "repeated here)"),
    ({"engine_service_env": {"HF_HUB_OFFLINE": "1", "VLLM_API_KEY": SECRET}},
     "spark3: engine_service_env holds VLLM_API_KEY, a secret, in plain environment: the environment is written into "
     "every rank's version and shown by ansible-playbook -v; expected: the API key in engine_service_api_key, "
     "vault-encrypted"),
    ({"engine_image_ref": "192.168.99.5:5000/DGXSpark/vllm-sim@" + SIM_REFS["sim_engine_image_refs"]["v1"][-71:]},
     "spark3: engine_image_ref is 192.168.99.5:5000/DGXSpark/vllm-sim@sha256:"),
    ({"model_weights_hf_revision": "0d1e2f3a4b5c"},
     "spark3: model_weights_hf_revision is 0d1e2f3a4b5c, but 5d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1a0 on spark1, spark2 "
     "and spark4; expected one value on every host of dgxspark_cluster"),
], ids=["weights_dir", "secret_in_arguments", "secret_in_environment", "image_reference_grammar",
        "cluster_wide_disagreement"])
def test_one_hosts_value_of_the_wrong_form_or_disagreeing_is_refused_on_the_controller(tmp_path, values, expected):
    done, output = run(simulated_copy(tmp_path, {"spark3": values}), "inventory_check.yml", "-e", json.dumps(SIM_REFS))
    assert done.returncode != 0, output[-3000:]
    assert expected.replace("'", "''") in output, output[-3000:]
    assert SECRET not in done.stdout + done.stderr
    assert not re.search(r"spark[124]: ", output), output[-3000:]
    assert recap_hosts(done.stdout) == ["localhost"], done.stdout[-2000:]


def test_an_extra_var_built_from_a_group_variable_passes_for_hosts_outside_the_group(tmp_path):
    # Molecule's upgrades pass -e engine_image_ref='{{ sim_engine_image_refs.v2 }}': the
    # references are group variables of dgxspark_cluster (prepare_upstream.yml), which
    # sim-upstream, outside the group, lacks. Its undefined value is not judged, and must not
    # break the check's message; the cluster's hosts judge the reference it resolves to.
    hosts = simulated_copy(tmp_path)
    (hosts.parent / "group_vars" / "dgxspark_cluster" / "generated_engine_images.yml").write_text(
        yaml.safe_dump({"sim_engine_image_refs": {"v1": SIM_REFS["sim_engine_image_refs"]["v1"],
                                                  "v2": "192.168.99.5:5000/DGXSpark/vllm-sim:v2"}}))
    done, output = run(hosts, "inventory_check.yml", "-e", json.dumps({"engine_image_ref": "{{ sim_engine_image_refs.v1 }}"}))
    assert done.returncode == 0, output[-3000:]
    done, output = run(hosts, "inventory_check.yml", "-e", json.dumps({"engine_image_ref": "{{ sim_engine_image_refs.v2 }}"}))
    assert done.returncode != 0, output[-3000:]
    assert "spark1: engine_image_ref is 192.168.99.5:5000/DGXSpark/vllm-sim:v2;" in output, output[-3000:]
    assert "sim-upstream: engine_image_ref" not in output and "is undefined" not in output, output[-3000:]


def test_a_fleet_with_the_balancer_group_passes(tmp_path):
    # The simulated inventory's dgxspark_balancer group is empty: the balancer runs on rank 0.
    # Every host sets the fleet: the replicas are one engine setting for the whole cluster.
    fleet = {host: {"engine_service_replicas": 2} for host in SAMPLE_HOSTS}
    done, output = run(simulated_copy(tmp_path, fleet), "inventory_check.yml", "-e", json.dumps(SIM_REFS))
    assert done.returncode == 0, output[-3000:]
