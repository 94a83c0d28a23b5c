# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unsound engine inventories are refused by site.yml in its preflight play,
each with a message naming the variable and the fix, before any node changes.
A secret given in plain text is refused there too, with a readable message
that does not show it. Several cases share a run, and the runs go side by side
(none changes a node)."""

from __future__ import annotations

import pytest

from helpers import (
    ROOT,
    assert_nothing_changed,
    batched_refusals,
    engine_container,
    flat,
    group_vars,
    inventory_hosts,
    node_file_digests,
    selected_cases,
)

testinfra_hosts = ["local://"]

HOSTS = sorted(inventory_hosts())
ENGINE_FILES = ["/etc/systemd/system/dgxspark-engine.service", "/etc/dgxspark/engine/current/version.json",
                "/etc/dgxspark/engine/current/engine.env"]
SPECULATIVE = {"engine_service_max_num_seqs": 16,
               "engine_service_speculative_config": {"method": "dspark", "num_speculative_tokens": 3}}
PATCH = group_vars()["engine_service_patches"][0]
DIGEST = "sha256:" + "0" * 64
ALL_HOSTS = "spark1, spark2, spark3 and spark4: "

REFUSALS = {
    "TP x replicas differs from the hosts": (
        {"engine_service_tensor_parallel_size": 3},
        "engine_service_tensor_parallel_size 3 x engine_service_replicas 1 = 3 ranks, but the engine group has 4 hosts",
    ),
    "one rank for every host": (
        {"engine_service_rank": 0},
        "engine_service_rank 0 is given to spark1 and spark2 and spark3 and spark4",
    ),
    "rank gap": (
        "spark4:\n      engine_service_rank: 5\n",
        "spark4: engine_service_rank 5 is outside 0-3",
    ),
    "capture size 8 inherited from a TP=2 config": (
        dict(SPECULATIVE, engine_service_max_cudagraph_capture_size=8),
        "engine_service_max_cudagraph_capture_size 8 is below the full decode batch of engine_service_max_num_seqs 16 x "
        "(1 + 3 speculative tokens) = 64",
    ),
    "capture size not a multiple of 1 + k": (
        dict(SPECULATIVE, engine_service_max_cudagraph_capture_size=66, engine_service_allow_small_cudagraph_capture_size=True),
        "engine_service_max_cudagraph_capture_size 66 is not a multiple of 1 + 3 speculative tokens = 4",
    ),
    "patch checksum differs": (
        {"engine_service_patches": [dict(PATCH, sha256="0" * 64)]},
        "not the " + "0" * 64 + " the inventory pins",
    ),
    "patch missing": (
        {"engine_service_patches": [dict(PATCH, src="/nonexistent/dspark.py")]},
        "engine_service_patches: /nonexistent/dspark.py does not exist on the controller",
    ),
    "JSON typed by hand": (
        {"engine_service_speculative_config": '{"method":"dspark","num_speculative_tokens":3}'},
        "engine_service_speculative_config is a string; give it as YAML, the collection renders the JSON",
    ),
    "extra_args repeating a managed flag": (
        {"engine_service_extra_args": ["--tensor-parallel-size", "2"]},
        "engine_service_extra_args[0] '--tensor-parallel-size' repeats --tensor-parallel-size, which the collection "
        "renders from engine_service_tensor_parallel_size",
    ),
    "API on the rendezvous port": (
        {"engine_service_api_port": 29501},
        "engine_service_master_port and engine_service_api_port are both 29501",
    ),
    "capture sizes inside compilation_config": (
        {"engine_service_compilation_config": {"cudagraph_capture_sizes": [1, 2, 4]}},
        "engine_service_compilation_config sets cudagraph_capture_sizes; remove it",
    ),
    # The rank's container and environment (engine_container_problems).
    "--privileged": (
        {"engine_service_container_extra_args": ["--privileged"]},
        ALL_HOSTS + "engine_service_container_extra_args holds --privileged: it gives the container every device and "
        "capability of the node and lifts its seccomp and AppArmor confinement; expected: no --privileged (the "
        "collection passes the GPU and the RDMA devices itself). Remove it.",
    ),
    "--privileged on one host only": (
        "spark3:\n      engine_service_container_extra_args: [--privileged]\n",
        "spark3: engine_service_container_extra_args holds --privileged: it gives the container every device",
    ),
    "--pid=host": (
        {"engine_service_container_extra_args": ["--pid=host"]},
        "engine_service_container_extra_args holds --pid=host: it puts the container in the node's PID namespace, "
        "where it sees every process of the node and can signal them; expected: the container's own PID namespace",
    ),
    "seccomp=unconfined": (
        {"engine_service_container_extra_args": ["--security-opt", "seccomp=unconfined"]},
        "engine_service_container_extra_args holds --security-opt seccomp=unconfined: it turns off the container's "
        "seccomp filter, so every system call reaches the node's kernel; expected: Docker's default confinement",
    ),
    "--cap-add ALL": (
        {"engine_service_container_extra_args": ["--cap-add", "ALL"]},
        "engine_service_container_extra_args holds --cap-add ALL: it gives the container every capability of the "
        "node, as good as root on it",
    ),
    "device outside the allow-list": (
        {"engine_service_container_devices": ["/dev/infiniband", "/dev/sda"]},
        "engine_service_container_devices holds /dev/sda: it gives the container a device of the node outside "
        "engine_service_container_allowed_devices (/dev/infiniband, /dev/infiniband/*); expected: the RDMA devices "
        "only",
    ),
    "env sets a variable the collection sets": (
        {"engine_service_env": {"HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": "192.168.100.99"}},
        "engine_service_env sets VLLM_HOST_IP, which the collection sets itself (each rank's own fabric address, "
        "roce_fabric_address); expected: no VLLM_HOST_IP here. Remove it.",
    ),
}

# Secrets in plain text: (extra vars, the secret, the message). Refused in the
# preflight play like the rest, readable (no no_log hides the message) and
# never shown. A secret in the plain engine environment is refused earlier, by
# the inventory check before any node is contacted (test_preflight_refusals.py).
SECRETS = {
    "plaintext API key": (
        {"engine_service_api_key": "sk-plaintext-api-key-0123"},
        "sk-plaintext-api-key-0123",
        "engine_service_api_key is set in plain text; secrets come only from vaulted variables: ansible-vault "
        "encrypt_string --name engine_service_api_key",
    ),
    "plaintext Hub token": (
        {"model_weights_hf_token": "hf_plaintextHubToken0123"},
        "hf_plaintextHubToken0123",
        "model_weights_hf_token is set in plain text; a Hub token must be vault-encrypted",
    ),
    # Judged on every host (it was once, on the first host): one host's override counts.
    "plaintext Hub token on one host only": (
        "spark3:\n      model_weights_hf_token: hf_plaintextHostToken0123\n",
        "hf_plaintextHostToken0123",
        "spark3: model_weights_hf_token is set in plain text; a Hub token must be vault-encrypted",
    ),
}


def readable(output):
    """Playbook output with line wrapping undone and YAML's doubled quotes
    (node''s) single again, for matching messages."""
    return flat(output).replace("''", "'")


def record(message):
    (ROOT / "reports").mkdir(exist_ok=True)
    with open(ROOT / "reports" / "refusals.txt", "a", encoding="utf-8") as refusals:
        refusals.write("%s\n" % message)


def engine_state():
    return node_file_digests(HOSTS, ENGINE_FILES), {host: engine_container(host) for host in HOSTS}


# Cases one run carries together (helpers.batched_refusals): the engine configuration check
# names every problem of the cluster at once, and the container checks every argument, so
# cases of different variables share a run. The cases of one variable (the capture size,
# the speculative configuration, the ranks, the patches, which must not share a destination)
# go to different runs, and so do the checks that stop a run before the next one looks (the
# patches, the API key, the Hub token).
BATCHES = (
    ("TP x replicas differs from the hosts", "rank gap", "capture size 8 inherited from a TP=2 config",
     "extra_args repeating a managed flag", "API on the rendezvous port", "--privileged", "--pid=host",
     "seccomp=unconfined", "--cap-add ALL", "device outside the allow-list", "env sets a variable the collection sets"),
    ("one rank for every host", "capture size not a multiple of 1 + k", "capture sizes inside compilation_config",
     "--privileged on one host only"),
)


@pytest.fixture(scope="module")
def refused(request, tmp_path_factory):
    """Every selected case's site.yml, several cases to a run and the runs side by side (each
    is refused in the preflight play, before any change): {case: CompletedProcess}. The
    engine's files and containers are read before and after the whole batch; a case that
    changed a node fails them all."""
    cases = selected_cases(request, "test_unsound_engine_inventory_is_refused_before_any_change",
                           "test_a_secret_in_plain_text_is_refused_readably_before_any_change")
    changes = {case: REFUSALS[case][0] if case in REFUSALS else SECRETS[case][0] for case in cases}
    before = engine_state()
    results = batched_refusals(changes, BATCHES, tmp_path_factory)
    assert engine_state() == before, "a refused run changed a node"
    return results


@pytest.mark.parametrize("case", list(REFUSALS))
def test_unsound_engine_inventory_is_refused_before_any_change(case, refused):
    message = REFUSALS[case][1]
    result = refused[case]
    out = readable(result.stdout)
    assert result.returncode != 0
    assert message in out, out[-3000:]
    assert "output has been hidden" not in out
    # Refused in the preflight play: no later play started.
    assert "PLAY [Node software" not in result.stdout
    assert_nothing_changed(result)
    record(message)


@pytest.mark.parametrize("case", list(SECRETS))
def test_a_secret_in_plain_text_is_refused_readably_before_any_change(case, refused):
    change, secret, message = SECRETS[case]
    result = refused[case]
    out = readable(result.stdout)
    assert result.returncode != 0
    assert message in out, out[-3000:]
    if isinstance(change, str):
        # Only the host that sets it.
        assert "spark1: model_weights_hf_token" not in out, out[-3000:]
    # The refusal is shown, not hidden by no_log, and the secret is not.
    assert "output has been hidden" not in out
    assert secret not in result.stdout + result.stderr
    # Refused in the preflight play, before the driver, runtime, fabric,
    # image and weights plays: no later play started.
    assert "PLAY [Preflight" in result.stdout
    assert "PLAY [Node software" not in result.stdout
    assert_nothing_changed(result)
    record(message)
