# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""site.yml refuses unsuitable nodes with a message naming the host, what was
found and the variable to change. Runs on the controller against the
simulated cluster."""

from __future__ import annotations

import hashlib
import posixpath
import re
import shutil

import pytest
import yaml

from helpers import (
    INVENTORY,
    assert_nothing_changed,
    batched_refusals,
    flat,
    group_vars,
    host_override_args,
    node_state,
    run_playbook,
    selected_cases,
)

testinfra_hosts = ["local://"]

REFUSALS = [
    (
        {"preflight_min_memory_mb": 10**7},
        r"spark\d has \d+ MiB of memory; at least 10000000 MiB is required \(preflight_min_memory_mb\)",
    ),
    (
        {"preflight_supported_architectures": ["aarch64"]},
        r"spark\d is x86_64; expected one of aarch64 \(preflight_supported_architectures\)",
    ),
    (
        {"preflight_disk_requirements": [{"path": "/srv/models", "min_free_gb": 10**6}]},
        r"spark\d: [\d.]+ GB free on the filesystem holding /srv/models \(measured at /[\w/]*\); 1000000 GB is required \(preflight_disk_requirements\)",
    ),
    (
        {"preflight_supported_systems": [{"distribution": "Ubuntu", "version": "24.04"}]},
        r"spark\d runs Debian 12[.\d]*; supported: Ubuntu 24.04\.",
    ),
    (
        {"preflight_expected_gpu_names": ["NVIDIA H100"]},
        r"spark\d GPU 0 is 'NVIDIA GB10'; expected one of NVIDIA H100 \(preflight_expected_gpu_names\)",
    ),
    (
        {"preflight_cluster_group": "sparks"},
        r"Inventory group 'sparks' is missing or empty",
    ),
    # Inputs of roles whose plays come later, judged against their specs in the preflight play.
    (
        {"engine_image_strategy": "rsync"},
        r"spark\d: value of engine_image_strategy must be one of: spread, pull, registry, got: rsync \(role engine_image; "
        r"the types and choices are in roles/engine_image/meta/argument_specs.yml\)\. Fix the variable in the inventory\.",
    ),
    (
        {"fabric_report_ping_count": "many"},
        r"spark\d: argument 'fabric_report_ping_count' is of type str and we were unable to convert to int.* \(role fabric_report;",
    ),
]


REFUSALS = {next(iter(extra_vars)): (extra_vars, message) for extra_vars, message in REFUSALS}


# Cases one run carries together (helpers.batched_refusals): the node checks name every
# problem of a node at once, and so does the check of the later roles' inputs.
BATCHES = (
    ("preflight_min_memory_mb", "preflight_supported_architectures", "preflight_disk_requirements",
     "preflight_supported_systems", "preflight_expected_gpu_names"),
    ("engine_image_strategy", "fabric_report_ping_count"),
)


@pytest.fixture(scope="module")
def refused(request, tmp_path_factory):
    """The selected cases' site.yml runs, several cases to a run and the runs side by side
    (each is refused before any change)."""
    cases = selected_cases(request, "test_site_refuses_unsuitable_nodes")
    return batched_refusals({case: REFUSALS[case][0] for case in cases}, BATCHES, tmp_path_factory)


@pytest.mark.parametrize("case", list(REFUSALS))
def test_site_refuses_unsuitable_nodes(case, refused):
    message = REFUSALS[case][1]
    result = refused[case]
    assert result.returncode != 0, result.stdout
    output = " ".join(result.stdout.split())
    assert re.search(message, output), output[-3000:]
    assert_nothing_changed(result)


# The preflight asks the simulated upstream (sim-upstream: the registry on :5000,
# plain HTTP, and the Hub stand-in on :8080) from the nodes that will fetch.
# spark1 is both the image's source (engine_image_strategy spread) and the
# weights' download node (the first host of the play).
NOT_PUSHED = "sha256:" + hashlib.sha256(b"an image never pushed to sim-upstream").hexdigest()
NOT_ON_HUB = hashlib.sha256(b"a commit the Hub stand-in does not have").hexdigest()[:40]


def unpushed_ref():
    # The simulated image's repository, at a digest the registry does not hold.
    return group_vars()["sim_engine_image_refs"]["v1"].rpartition("@")[0] + "@" + NOT_PUSHED


def test_site_refuses_a_digest_the_registry_lacks_before_changing_anything():
    ref = unpushed_ref()
    result = run_playbook("site.yml", extra_vars={"engine_image_ref": ref})
    out = flat(result.stdout)
    assert result.returncode != 0
    # The repository of a RepoDigests entry has no tag: <registry>/<name>.
    registry, _slash, name = ref.rpartition("@")[0].partition("/")
    assert ("spark1: engine_image_ref is %s, which this node would pull: http://%s/v2/%s/manifests/%s answered HTTP "
            "404: the registry does not hold %s. Push the image you tested there, or put the digest of the image you "
            "tested in engine_image_ref" % (ref, registry, name, NOT_PUSHED, ref)) in out, out[-3000:]
    assert "PLAY [Node software" not in result.stdout
    assert_nothing_changed(result)


def test_site_refuses_a_revision_the_hub_lacks_before_changing_anything():
    result = run_playbook("site.yml", extra_vars={"model_weights_hf_revision": NOT_ON_HUB})
    out = flat(result.stdout)
    assert result.returncode != 0
    endpoint, repo_id = group_vars()["model_weights_hf_endpoint"], group_vars()["model_weights_hf_repo_id"]
    assert ("spark1: model_weights_hf_revision is %s of model_weights_hf_repo_id %s, which this node would download: "
            "%s/api/models/%s/revision/%s: revision %s of %s: HTTP 404 RevisionNotFound" % (
                NOT_ON_HUB, repo_id, endpoint, repo_id, NOT_ON_HUB, NOT_ON_HUB, repo_id)) in out, out[-3000:]
    assert "Put the commit hash of the revision you tested in model_weights_hf_revision" in out
    assert "PLAY [Node software" not in result.stdout
    assert_nothing_changed(result)


def test_with_the_upstream_check_off_a_run_gets_past_the_preflight():
    # The same unpushed digest: the preflight no longer asks, so the run reaches the
    # engine image play, where the pull fails as it did before the check existed.
    ref = unpushed_ref()
    result = run_playbook("site.yml", extra_vars={"engine_image_ref": ref, "preflight_check_upstream": False})
    out = flat(result.stdout)
    assert result.returncode != 0
    assert "which this node would pull" not in out
    assert "PLAY [Node software" in result.stdout and "PLAY [Engine image" in result.stdout, out[-3000:]
    assert "pulling %s failed" % ref in out, out[-3000:]


# Unknown variables, numbers out of range and a fleet without its balancer group:
# playbooks/inventory_check.yml judges each host's own variables on the controller,
# before any play runs on a node. Each case sets its value on spark2 alone, in a
# host_vars file of a copy of the simulated inventory (its group_vars come along).
SECRET = "sk-never-shown-0123"
HOST_OVERRIDE_REFUSALS = [
    (
        {"engine_service_start_timout": 600},
        (),
        "spark2: engine_service_start_timout is set (to 600) but no role declares it, so it would be ignored and "
        "the default used; did you mean engine_service_start_timeout? Rename or remove it in the inventory",
    ),
    (
        {"engine_service_start_timeout": 60},
        (),
        "spark2: engine_service_start_timeout is 60; expected a number 300 or more. Set it in that range in the "
        "inventory.",
    ),
    (
        {"engine_service_replicas": 2},
        ("dgxspark_balancer",),
        "spark2: engine_service_replicas is 2, a fleet that needs the balancer, but the inventory has no group "
        "dgxspark_balancer.",
    ),
    # A weights directory the sync (rsync --delete) would empty of everything else.
    (
        {"model_weights_dir": "/srv"},
        (),
        "spark2: model_weights_dir is /srv; expected the model's own directory, an absolute normalised path at "
        "least 3 levels deep (/srv/models/<name>), since the weights sync (rsync --delete) deletes whatever else it "
        "holds; /srv is 1 level deep, a shared directory. Set model_weights_dir to a directory only the weights live in.",
    ),
    # A secret on a command line, never repeated (SECRET is asserted absent below).
    (
        {"engine_service_extra_args": ["--dtype", "float32", "--enforce-eager", "--api-key=" + SECRET]},
        (),
        "spark2: engine_service_extra_args[3] holds --api-key, a secret, on a command line (its value is not repeated "
        "here): a command line is written into the node's unit and shown by ps and ansible-playbook -v; expected: the "
        "API key in engine_service_api_key, vault-encrypted",
    ),
    # A secret in the plain engine environment (by its name, or by its value's shape), never repeated. Judged
    # here alone: the preflight's container check leaves the environments' secrets to the inventory check.
    (
        {"engine_service_env": {"HF_HUB_OFFLINE": "1", "VLLM_API_KEY": SECRET}},
        (),
        "spark2: engine_service_env holds VLLM_API_KEY, a secret, in plain environment: the environment is written "
        "into every rank's version and shown by ansible-playbook -v; expected: the API key in engine_service_api_key, "
        "vault-encrypted",
    ),
    # An image reference outside Docker's grammar: uppercase in the repository path (a tag without a digest is
    # refused the same way, before any node is contacted).
    (
        {"engine_image_ref": "192.168.99.5:5000/DGXSpark/vllm-sim@sha256:" + "4f1c9a0e7b2d" * 5 + "9a3e"},
        (),
        "spark2: engine_image_ref is 192.168.99.5:5000/DGXSpark/vllm-sim@sha256:" + "4f1c9a0e7b2d" * 5 + "9a3e; "
        "expected a digest-pinned reference",
    ),
]


def host_override_inventory(directory, host, values, drop_groups):
    """A copy of the simulated inventory under O(directory), O(values) in O(host)'s
    host_vars file and the groups O(drop_groups) left out; the path of its hosts file."""
    inventory = directory / "inventory"
    shutil.copytree(INVENTORY.parent, inventory)
    hosts = inventory / INVENTORY.name
    data = yaml.safe_load(hosts.read_text())
    for group in drop_groups:
        del data[group]
    hosts.write_text(yaml.safe_dump(data))
    (inventory / "host_vars").mkdir(exist_ok=True)
    (inventory / "host_vars" / ("%s.yml" % host)).write_text(yaml.safe_dump(values))
    return hosts


@pytest.mark.parametrize("values, drop_groups, message", HOST_OVERRIDE_REFUSALS,
                         ids=["unknown_variable", "out_of_range", "fleet_without_balancer_group", "shared_weights_dir",
                              "secret_in_extra_args", "secret_in_env", "image_reference_grammar"])
def test_site_refuses_one_hosts_inventory_input_before_contacting_any_node(tmp_path, values, drop_groups, message):
    inventory = host_override_inventory(tmp_path, "spark2", values, drop_groups)
    result = run_playbook("site.yml", inventory=inventory)
    output = flat(result.stdout)
    assert result.returncode != 0, output[-3000:]
    assert message in output.replace("''", "'"), output[-3000:]
    assert SECRET not in result.stdout + result.stderr
    # Only the overridden host is named, and no node was contacted: nothing changed.
    assert not re.search(r"spark[134]: (engine_service|engine_image|model_weights)_", output), output[-3000:]
    assert "PLAY [Preflight" not in result.stdout
    assert re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", result.stdout.partition("PLAY RECAP")[2],
                      re.MULTILINE) == [("localhost", "0")], result.stdout[-2000:]


# The weights directory is the weights' own: the sync (rsync --delete) deletes whatever else
# it holds. Before anything changes, each node's directory must be absent, empty, hold the
# collection's marker or only files of the manifest the node keeps for it. A scratch
# directory on spark2 alone (an -i override) holds someone else's files: refused in the
# preflight play, naming spark2, the path and the files, and they are still there. Not under
# /tmp: the inventory check refuses a weights directory under a system tree before any node
# is contacted.
SCRATCH_WEIGHTS = "/srv/dgxspark-refusal-scratch/weights"
MARKER = "/.dgxspark-weights"
MARKER_AWAY = "/root/dgxspark-weights.marker"


@pytest.fixture
def foreign_weights_dir():
    scratch = SCRATCH_WEIGHTS
    node_state("spark2", f"mkdir -p {scratch}/runs && echo mine > {scratch}/notes.txt && echo 1 > {scratch}/runs/run.log")
    yield SCRATCH_WEIGHTS
    node_state("spark2", "rm -rf %s" % posixpath.dirname(SCRATCH_WEIGHTS))


@pytest.fixture
def spark3_without_its_marker():
    # As on a cluster converged before the marker existed: spark3's directory holds only the
    # files of the manifest spark3 keeps, so it still counts as the weights' own.
    marker = group_vars()["model_weights_dir"] + MARKER
    node_state("spark3", f"if [ -e {marker} ]; then mv {marker} {MARKER_AWAY}; fi")
    yield
    node_state("spark3", f"if [ -e {MARKER_AWAY} ]; then mv {MARKER_AWAY} {marker}; fi")


def test_site_refuses_a_weights_directory_holding_other_data_before_changing_anything(tmp_path, foreign_weights_dir,
                                                                                      spark3_without_its_marker):
    result = run_playbook("site.yml", *host_override_args(tmp_path, "spark2:\n      model_weights_dir: %s\n" % foreign_weights_dir))
    output = flat(result.stdout)
    assert result.returncode != 0, output[-3000:]
    assert ("spark2: model_weights_dir %s holds 2 entries that are not the collection's (no marker, no manifest): "
            "notes.txt, runs/run.log; expected the weights' own directory" % foreign_weights_dir) in output, output[-3000:]
    assert "mark it as the weights' own: sudo touch %s%s." % (foreign_weights_dir, MARKER) in output, output[-3000:]
    # Only spark2: the other nodes' directories (spark3's without its marker) are the weights' own.
    assert not re.search(r"spark[134]: model_weights_dir", output), output[-3000:]
    assert "PLAY [Preflight" in result.stdout and "PLAY [Node software" not in result.stdout
    assert_nothing_changed(result)
    assert node_state("spark2", f"cat {foreign_weights_dir}/notes.txt {foreign_weights_dir}/runs/run.log") == "mine\n1\n"
