# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine_service role reads each host's fabric address from the one fact the fabric
role exports (roce_fabric_node_address; its validate entry point runs first), whether the
inventory gives roce_fabric_address or roce_fabric_links; its settings map holds every
engine setting's row, read from its variable, and renders the argv of the sample and
simulated inventories as before."""

from __future__ import annotations

import pytest
import yaml

from unit_support import REPO_ROOT, template_role_vars

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import (
    SETTINGS,
    EngineConfigError,
    read_settings,
)


def link(address):
    return {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": address, "prefix": 24}


def test_engine_hosts_take_each_hosts_fabric_fact():
    hostvars = {
        # The fabric role read the links: the second half has carrier, the first not.
        "spark1": {"engine_service_rank": 0, "roce_fabric_links": [link("192.168.201.11"), link("192.168.200.11")],
                   "roce_fabric_node_address": "192.168.200.11"},
        # A raw roce_fabric_address is not read where the fact is there.
        "spark2": {"engine_service_rank": 1, "roce_fabric_address": "10.9.9.9", "roce_fabric_node_address": "192.168.201.12"},
        # No fact and no address in the inventory: none, which the engine check refuses.
        "spark3": {"engine_service_rank": 2},
    }
    variables = {"groups": {"dgxspark_cluster": list(hostvars)}, "hostvars": hostvars}
    (result,) = template_role_vars("engine_service", [(variables, {"hosts": "{{ engine_service_hosts }}"})])
    assert result["hosts"] == {
        "spark1": {"rank": 0, "fabric_address": "192.168.200.11"},
        "spark2": {"rank": 1, "fabric_address": "192.168.201.12"},
        "spark3": {"rank": 2, "fabric_address": None},
    }


# --- The settings map: every row, from its variable ----------------------------------

HEAD = "192.168.200.11"

SIMULATED_TAIL = [
    "--max-model-len", "256", "--block-size", "32", "--max-num-seqs", "4", "--max-num-batched-tokens", "32",
    "--max-cudagraph-capture-size", "4", "--compilation-config", '{"mode":0}', "--dtype", "float32", "--enforce-eager",
]

SAMPLE_TAIL = [
    "--max-model-len", "1048576", "--kv-cache-dtype", "fp8", "--block-size", "256", "--enable-prefix-caching",
    "--max-num-seqs", "16", "--max-num-batched-tokens", "8192", "--max-cudagraph-capture-size", "64",
    "--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}',
    "--speculative-config", '{"draft_sample_method":"probabilistic","method":"dspark","num_speculative_tokens":3}',
    "--attention-backend", "FLASHINFER_MLA_SPARSE_DSV4", "--moe-backend", "b12x", "--gpu-memory-utilization", "0.85",
    "--async-scheduling", "--enable-chunked-prefill", "--disable-custom-all-reduce", "--no-scheduler-reserve-full-isl",
]


def _layout(model, name, tensor_parallel, node_rank):
    argv = ["serve", model, "--served-model-name", name, "--tensor-parallel-size", str(tensor_parallel),
            "--nnodes", str(tensor_parallel), "--node-rank", str(node_rank), "--master-addr", HEAD,
            "--master-port", "29501"]
    head = ["--host", "0.0.0.0", "--port", "8000", "--middleware", "dgxspark_api_guard.ApiGuard"]
    return argv + (["--headless"] if node_rank else head)


class _InventoryLoader(yaml.SafeLoader):
    """Reads a vaulted value as null: no setting of the map is a secret."""


_InventoryLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def inventory_vars(name, **changes):
    """The engine variables of inventory/<name>, with the templated ones (sim_checkout_dir) left to the defaults."""
    variables = {}
    for path in sorted((REPO_ROOT / "inventory" / name / "group_vars" / "dgxspark_cluster").glob("*.yml")):
        variables.update(yaml.load(path.read_text(encoding="utf-8"), Loader=_InventoryLoader) or {})
    variables = {key: value for key, value in variables.items()
                 if key.startswith("engine_service_") and not (isinstance(value, str) and "{{" in value)}
    variables["engine_image_ref"] = "registry.example/vllm@sha256:" + "ab" * 32
    variables.update(changes)
    return variables


def _argv_cases(variables, ranks):
    expressions = {"argv%d" % rank: "{{ engine_service_settings | dgxspark.cluster.engine_rank_argv(%d, '%s') }}"
                   % (rank, HEAD) for rank in ranks}
    return (variables, expressions)


def test_the_inventories_render_the_same_argv_through_the_role():
    fleet = {"engine_service_tensor_parallel_size": 2, "engine_service_replicas": 2}
    cases = [
        _argv_cases(inventory_vars("sample"), (0, 1, 3)),
        _argv_cases(inventory_vars("simulated"), (0, 2)),
        _argv_cases(inventory_vars("simulated", **fleet), (2, 3)),
    ]
    sample, simulated, simulated_fleet = template_role_vars("engine_service", cases)
    deepseek = ("/models/DeepSeek-V4-Flash-0731", "deepseek-v4-flash")
    assert sample == {"argv%d" % rank: _layout(*deepseek, 4, rank) + SAMPLE_TAIL for rank in (0, 1, 3)}
    assert simulated == {"argv%d" % rank: _layout("/models/tiny", "tiny", 4, rank) + SIMULATED_TAIL for rank in (0, 2)}
    assert simulated_fleet == {"argv2": _layout("/models/tiny", "tiny", 2, 0) + SIMULATED_TAIL,
                               "argv3": _layout("/models/tiny", "tiny", 2, 1) + SIMULATED_TAIL}


def test_the_settings_map_holds_every_row_from_its_variable():
    changes = {"engine_service_" + setting.name: "changed-%s" % setting.name for setting in SETTINGS}
    (default, changed, omitted) = template_role_vars("engine_service", [
        ({"engine_image_ref": "registry.example/vllm@sha256:" + "ab" * 32}, {"settings": "{{ engine_service_settings }}"}),
        (changes, {"settings": "{{ engine_service_settings }}"}),
        ({}, {"settings": "{{ engine_service_settings }}"}),
    ])
    assert set(default["settings"]) == {setting.name for setting in SETTINGS}
    for setting in SETTINGS:
        if setting.name != "image":
            assert default["settings"][setting.name] == setting.default, setting.name
    assert changed["settings"] == {setting.name: "changed-%s" % setting.name for setting in SETTINGS}
    # No engine_image_ref: the image's default is omit, which leaves the setting out (the check says "not set").
    assert "image" not in omitted["settings"]


def _plain(value):
    return value


def test_a_setting_without_a_variable_fails_naming_it():
    variables = {"engine_service_" + setting.name: setting.default for setting in SETTINGS}
    assert read_settings(variables, _plain) == {setting.name: setting.default for setting in SETTINGS}
    del variables["engine_service_block_size"]
    del variables["engine_service_moe_backend"]
    with pytest.raises(EngineConfigError, match="engine_service_block_size and engine_service_moe_backend are not defined"):
        read_settings(variables, _plain)
    (result,) = template_role_vars("engine_service", [({}, {"error": "{{ lookup('dgxspark.cluster.engine_settings', 'x') }}"})])
    assert "engine_settings takes no terms" in result["error"]


def test_another_role_reads_a_hosts_settings_with_the_rows_defaults():
    names = ["tensor_parallel_size", "api_port", "max_num_seqs"]
    assert read_settings({}, None, host_vars={"engine_service_api_port": 9000}, names=names) == {
        "tensor_parallel_size": 4, "api_port": 9000, "max_num_seqs": 16}
    assert read_settings({}, None, host_vars={}, names=["replicas"]) == {"replicas": 1}
    with pytest.raises(EngineConfigError, match="engine_service_image is not set for the host and its default is a template"):
        read_settings({}, None, host_vars={}, names=["image"])
    with pytest.raises(EngineConfigError, match="max_num_sequences is not an engine setting"):
        read_settings({}, None, host_vars={}, names=["max_num_sequences"])
