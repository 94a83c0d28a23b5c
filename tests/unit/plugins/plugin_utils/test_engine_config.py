# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_argv import (
    SECRETS_TARGET,
    container_argv,
    container_wrapper,
    effective_cudagraph_capture_size,
    env_file_text,
    rank_argv,
    replica_layout,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_container_checks import (
    CONTAINER_SETTINGS,
    engine_container_problems,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import (
    MANAGED_FLAGS,
    EngineConfigError,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_systemd import (
    parse_systemd_exec_line,
    systemd_exec_line,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_validation import engine_config_problems
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_values import value_problems

DIGEST = "sha256:" + "3f" * 32
PATCH_SHA256 = "9c" * 32

# The four-node DeepSeek-V4-Flash deployment: TP 4, one rank per node,
# DSpark speculation with 3 tokens and 16 sequences.
REFERENCE_SETTINGS = {
    "tensor_parallel_size": 4,
    "replicas": 1,
    "model": "deepseek-ai/DeepSeek-V4-Flash-0731",
    "served_model_name": "deepseek-v4-flash",
    "image": "registry.example/vllm-dspark@" + DIGEST,
    "max_model_len": 1048576,
    "kv_cache_dtype": "fp8",
    "block_size": 256,
    "enable_prefix_caching": True,
    "max_num_seqs": 16,
    "max_num_batched_tokens": 8192,
    "gpu_memory_utilization": 0.85,
    "attention_backend": "FLASHINFER_MLA_SPARSE_DSV4",
    "moe_backend": "b12x",
    "async_scheduling": True,
    "enable_chunked_prefill": True,
    "compilation_config": {"cudagraph_mode": "FULL_AND_PIECEWISE", "custom_ops": ["all"]},
    "speculative_config": {"method": "dspark", "num_speculative_tokens": 3, "draft_sample_method": "probabilistic"},
    "max_cudagraph_capture_size": None,
    "allow_small_cudagraph_capture_size": False,
    "master_port": 29501,
    "api_port": 8000,
    "extra_args": ["--disable-custom-all-reduce", "--no-scheduler-reserve-full-isl"],
    "patches": [
        {
            "src": "files/dspark.py",
            "dest": "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/dspark.py",
            "sha256": PATCH_SHA256,
        }
    ],
}

REFERENCE_HOSTS = {"spark%d" % i: {"rank": i - 1, "fabric_address": "192.168.100.%d" % (10 + i)} for i in range(1, 5)}

HEAD_ADDRESS = "192.168.100.11"

# Everything after the parallel layout is the same on every rank.
SHARED_TAIL = [
    "--max-model-len", "1048576",
    "--kv-cache-dtype", "fp8",
    "--block-size", "256",
    "--enable-prefix-caching",
    "--max-num-seqs", "16",
    "--max-num-batched-tokens", "8192",
    "--max-cudagraph-capture-size", "64",
    "--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}',
    "--speculative-config", '{"draft_sample_method":"probabilistic","method":"dspark","num_speculative_tokens":3}',
    "--attention-backend", "FLASHINFER_MLA_SPARSE_DSV4",
    "--moe-backend", "b12x",
    "--gpu-memory-utilization", "0.85",
    "--async-scheduling",
    "--enable-chunked-prefill",
    "--disable-custom-all-reduce",
    "--no-scheduler-reserve-full-isl",
]

EXPECTED_RANK_0 = [
    "serve", "deepseek-ai/DeepSeek-V4-Flash-0731",
    "--served-model-name", "deepseek-v4-flash",
    "--tensor-parallel-size", "4",
    "--nnodes", "4",
    "--node-rank", "0",
    "--master-addr", "192.168.100.11",
    "--master-port", "29501",
    "--host", "0.0.0.0",
    "--port", "8000",
    "--middleware", "dgxspark_api_guard.ApiGuard",
] + SHARED_TAIL

EXPECTED_RANK_2 = [
    "serve", "deepseek-ai/DeepSeek-V4-Flash-0731",
    "--served-model-name", "deepseek-v4-flash",
    "--tensor-parallel-size", "4",
    "--nnodes", "4",
    "--node-rank", "2",
    "--master-addr", "192.168.100.11",
    "--master-port", "29501",
    "--headless",
] + SHARED_TAIL


def settings(**changes):
    changed = copy.deepcopy(REFERENCE_SETTINGS)
    changed.update(changes)
    return changed


def cluster(hosts=None, **changes):
    return {"hosts": copy.deepcopy(REFERENCE_HOSTS if hosts is None else hosts), "settings": settings(**changes)}


def with_host(host, **changes):
    hosts = copy.deepcopy(REFERENCE_HOSTS)
    hosts[host].update(changes)
    return hosts


def with_ranks(*ranks):
    return {host: {"rank": rank, "fabric_address": REFERENCE_HOSTS[host]["fabric_address"]}
            for host, rank in zip(sorted(REFERENCE_HOSTS), ranks)}


def test_reference_cluster_is_sound():
    assert engine_config_problems(cluster()) == []


@pytest.mark.parametrize("rank, expected", [(0, EXPECTED_RANK_0), (2, EXPECTED_RANK_2)])
def test_reference_flag_set_renders_each_rank(rank, expected):
    assert rank_argv(REFERENCE_SETTINGS, rank, HEAD_ADDRESS) == expected


def test_headless_ranks_get_no_api_address():
    for rank in (1, 2, 3):
        argv = rank_argv(REFERENCE_SETTINGS, rank, HEAD_ADDRESS)
        assert "--headless" in argv
        assert "--host" not in argv and "--port" not in argv
    head = rank_argv(REFERENCE_SETTINGS, 0, HEAD_ADDRESS)
    assert "--headless" not in head


def test_json_options_do_not_depend_on_key_order():
    reordered = settings(
        compilation_config=dict(reversed(list(REFERENCE_SETTINGS["compilation_config"].items()))),
        speculative_config=dict(reversed(list(REFERENCE_SETTINGS["speculative_config"].items()))),
    )
    assert rank_argv(reordered, 0, HEAD_ADDRESS) == rank_argv(REFERENCE_SETTINGS, 0, HEAD_ADDRESS)


def test_json_options_decode_to_the_given_mappings():
    argv = rank_argv(REFERENCE_SETTINGS, 0, HEAD_ADDRESS)
    for flag, key in (("--compilation-config", "compilation_config"), ("--speculative-config", "speculative_config")):
        assert json.loads(argv[argv.index(flag) + 1]) == REFERENCE_SETTINGS[key]


def test_unset_options_are_left_out_for_a_cpu_engine():
    cpu = settings(
        served_model_name=None, kv_cache_dtype=None, block_size=None, enable_prefix_caching=None,
        max_num_batched_tokens=None, gpu_memory_utilization=None, attention_backend=None, moe_backend=None,
        async_scheduling=None, enable_chunked_prefill=None, compilation_config=None, speculative_config=None,
        max_model_len=256, max_num_seqs=4, extra_args=["--dtype", "float32", "--enforce-eager"], patches=[],
    )
    assert engine_config_problems({"hosts": REFERENCE_HOSTS, "settings": cpu}) == []
    assert rank_argv(cpu, 3, HEAD_ADDRESS) == [
        "serve", "deepseek-ai/DeepSeek-V4-Flash-0731",
        "--tensor-parallel-size", "4", "--nnodes", "4", "--node-rank", "3",
        "--master-addr", "192.168.100.11", "--master-port", "29501", "--headless",
        "--max-model-len", "256", "--max-num-seqs", "4", "--max-cudagraph-capture-size", "4",
        "--dtype", "float32", "--enforce-eager",
    ]


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("enable_prefix_caching", False, "--no-enable-prefix-caching"),
        ("async_scheduling", False, "--no-async-scheduling"),
        ("enable_chunked_prefill", False, "--no-enable-chunked-prefill"),
    ],
)
def test_a_switch_set_false_renders_its_no_form(key, value, expected):
    argv = rank_argv(settings(**{key: value}), 0, HEAD_ADDRESS)
    assert expected in argv
    assert expected.replace("--no-", "--") not in argv


def test_empty_json_mappings_are_left_out():
    argv = rank_argv(settings(compilation_config={}, speculative_config={}), 0, HEAD_ADDRESS)
    assert "--compilation-config" not in argv and "--speculative-config" not in argv
    assert argv[argv.index("--max-cudagraph-capture-size") + 1] == "16"


def test_every_rendered_flag_is_guarded_against_extra_args():
    argv = rank_argv(settings(extra_args=[]), 0, HEAD_ADDRESS) + rank_argv(settings(extra_args=[]), 1, HEAD_ADDRESS)
    rendered = {argument for argument in argv if argument.startswith("--")}
    assert rendered - set(MANAGED_FLAGS) == set()


@pytest.mark.parametrize(
    "rank, expected_layout, expected_flags",
    [
        (0, {"replica": 0, "node_rank": 0, "head_rank": 0}, ["--node-rank", "0", "--master-addr", "192.168.100.11"]),
        (1, {"replica": 0, "node_rank": 1, "head_rank": 0}, ["--node-rank", "1", "--master-addr", "192.168.100.11"]),
        (2, {"replica": 1, "node_rank": 0, "head_rank": 2}, ["--node-rank", "0", "--master-addr", "192.168.100.11"]),
        (3, {"replica": 1, "node_rank": 1, "head_rank": 2}, ["--node-rank", "1", "--master-addr", "192.168.100.11"]),
    ],
)
def test_two_replicas_of_two_nodes_each(rank, expected_layout, expected_flags):
    fleet = settings(tensor_parallel_size=2, replicas=2)
    assert engine_config_problems({"hosts": REFERENCE_HOSTS, "settings": fleet}) == []
    assert replica_layout(fleet, rank) == expected_layout
    argv = rank_argv(fleet, rank, HEAD_ADDRESS)
    assert argv[argv.index("--nnodes") + 1] == "2"
    position = argv.index("--node-rank")
    assert argv[position:position + 4] == expected_flags
    assert ("--headless" in argv) == bool(expected_layout["node_rank"])


@pytest.mark.parametrize("rank", [-1, 4, "0", None, True])
def test_replica_layout_refuses_ranks_outside_the_cluster(rank):
    with pytest.raises(EngineConfigError, match="outside 0-3"):
        replica_layout(REFERENCE_SETTINGS, rank)


BAD_INVENTORIES = [
    (
        "image by tag",
        cluster(image="registry.example/vllm-dspark:v0.21"),
        ["engine_service_image 'registry.example/vllm-dspark:v0.21' is not pinned by digest; "
         "pin it as name@sha256:<64 hex digits> so every node runs the same build"],
    ),
    (
        "image with a short digest",
        cluster(image="registry.example/vllm-dspark@sha256:abc"),
        ["engine_service_image 'registry.example/vllm-dspark@sha256:abc' is not pinned by digest; "
         "pin it as name@sha256:<64 hex digits> so every node runs the same build"],
    ),
    (
        "tensor parallel size does not fill the hosts",
        cluster(tensor_parallel_size=2),
        ["engine_service_tensor_parallel_size 2 x engine_service_replicas 1 = 2 ranks, but the engine group has "
         "4 hosts; one rank runs per host, so change the sizes or the hosts in the group"],
    ),
    (
        "replicas ask for more hosts than there are",
        cluster(replicas=2),
        ["engine_service_tensor_parallel_size 4 x engine_service_replicas 2 = 8 ranks, but the engine group has "
         "4 hosts; one rank runs per host, so change the sizes or the hosts in the group"],
    ),
    (
        "duplicate rank",
        cluster(hosts=with_ranks(0, 1, 2, 2)),
        ["engine_service_rank 2 is given to spark3 and spark4; every engine host needs its own rank",
         "engine_service_rank leaves rank 3 without a host; ranks run from 0 to 3 without gaps"],
    ),
    (
        "ranks counted from 1",
        cluster(hosts=with_ranks(1, 2, 3, 4)),
        ["spark4: engine_service_rank 4 is outside 0-3; the 4 engine hosts take ranks 0 to 3",
         "engine_service_rank leaves rank 0 without a host; ranks run from 0 to 3 without gaps"],
    ),
    (
        "two ranks missing",
        cluster(hosts=with_ranks(0, 0, 0, 3)),
        ["engine_service_rank 0 is given to spark1 and spark2 and spark3; every engine host needs its own rank",
         "engine_service_rank leaves ranks 1, 2 without a host; ranks run from 0 to 3 without gaps"],
    ),
    (
        "rank not set",
        cluster(hosts=with_host("spark4", rank=None)),
        ["spark4: engine_service_rank is not set; give every engine host its rank (0 is the head)"],
    ),
    (
        "rank as a string",
        cluster(hosts=with_host("spark4", rank="3")),
        ["spark4: engine_service_rank '3' is not an integer"],
    ),
    (
        "host without a fabric address",
        cluster(hosts=with_host("spark2", fabric_address=None)),
        ["spark2: the fabric address (roce_fabric_address, or the first of roce_fabric_links) is not set; "
         "every engine rank reaches the others at its fabric address"],
    ),
    (
        "fabric address that is no address",
        cluster(hosts=with_host("spark2", fabric_address="spark2.fabric")),
        ["spark2: the fabric address (roce_fabric_address, or the first of roce_fabric_links) 'spark2.fabric' is not an IP address"],
    ),
    (
        # Refused once, by the fabric plan check (roce_fabric validate.yml), which runs first.
        "two hosts on one fabric address are the fabric plan check's",
        cluster(hosts=with_host("spark2", fabric_address="192.168.100.11")),
        [],
    ),
    (
        "capture size below the decode batch",
        cluster(max_cudagraph_capture_size=8),
        ["engine_service_max_cudagraph_capture_size 8 is below the full decode batch of engine_service_max_num_seqs 16 "
         "x (1 + 3 speculative tokens) = 64: CUDA graphs then cover only 2 of 16 concurrent requests, and every "
         "decode step beyond them falls out of CUDA graphs into eager mode, losing most of its speed; leave it "
         "unset (default 64) or set engine_service_allow_small_cudagraph_capture_size: true to accept that"],
    ),
    (
        "capture size not a multiple of 1 + k",
        cluster(max_cudagraph_capture_size=42, allow_small_cudagraph_capture_size=True),
        ["engine_service_max_cudagraph_capture_size 42 is not a multiple of 1 + 3 speculative tokens = 4; "
         "vLLM would silently round it down to 40; use 40 or 44"],
    ),
    (
        "capture sizes set inside the compilation config",
        cluster(compilation_config={"cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2, 4]}),
        ["engine_service_compilation_config sets cudagraph_capture_sizes; remove it and set "
         "engine_service_max_cudagraph_capture_size, which the collection checks against the decode batch"],
    ),
    (
        "compilation config as pre-quoted JSON",
        cluster(compilation_config='{"cudagraph_mode":"FULL_AND_PIECEWISE"}'),
        ["engine_service_compilation_config is a string; give it as YAML, the collection renders the JSON"],
    ),
    (
        "speculative config as pre-quoted JSON",
        cluster(speculative_config='{"method":"dspark","num_speculative_tokens":3}'),
        ["engine_service_speculative_config is a string; give it as YAML, the collection renders the JSON"],
    ),
    (
        "speculation without a token count",
        cluster(speculative_config={"method": "dspark"}),
        ["engine_service_speculative_config has no num_speculative_tokens; set it (an integer, 1 or more): "
         "the capture size depends on it"],
    ),
    (
        "zero speculative tokens",
        cluster(speculative_config={"method": "dspark", "num_speculative_tokens": 0}),
        ["engine_service_speculative_config num_speculative_tokens 0 is not an integer of 1 or more"],
    ),
    (
        "API port out of range",
        cluster(api_port=80000),
        ["engine_service_api_port 80000 is not an integer from 1 to 65535"],
    ),
    (
        "rendezvous and API on one port",
        cluster(api_port=29501),
        ["engine_service_master_port and engine_service_api_port are both 29501; "
         "the rendezvous and the API need different ports"],
    ),
    (
        "memory utilization above 1",
        cluster(gpu_memory_utilization=1.5),
        ["engine_service_gpu_memory_utilization 1.5 is not a number above 0 and at most 1; leave it unset to omit the option"],
    ),
    (
        "memory utilization of 0",
        cluster(gpu_memory_utilization=0),
        ["engine_service_gpu_memory_utilization 0 is not a number above 0 and at most 1; leave it unset to omit the option"],
    ),
    (
        "extra_args repeat a rendered flag with a value",
        cluster(extra_args=["--max-num-seqs=32"]),
        ["engine_service_extra_args[0] '--max-num-seqs=32' repeats --max-num-seqs, which the collection renders "
         "from engine_service_max_num_seqs; set that variable instead"],
    ),
    (
        "extra_args repeat a switch in underscore form",
        cluster(extra_args=["--disable-custom-all-reduce", "--no_enable_prefix_caching"]),
        ["engine_service_extra_args[1] '--no_enable_prefix_caching' repeats --no-enable-prefix-caching, which the "
         "collection renders from engine_service_enable_prefix_caching; set that variable instead"],
    ),
    (
        "extra_args use the short tensor parallel alias",
        cluster(extra_args=["-tp", "4"]),
        ["engine_service_extra_args[0] '-tp' repeats -tp, which the collection renders from "
         "engine_service_tensor_parallel_size; set that variable instead"],
    ),
    (
        "extra_args set one key of the compilation config",
        cluster(extra_args=["--compilation-config.cudagraph_mode=FULL"]),
        ["engine_service_extra_args[0] '--compilation-config.cudagraph_mode=FULL' repeats --compilation-config, "
         "which the collection renders from engine_service_compilation_config; set that variable instead"],
    ),
    (
        "extra_args set the API port",
        cluster(extra_args=["--port", "9000"]),
        ["engine_service_extra_args[0] '--port' repeats --port, which the collection renders from "
         "engine_service_api_port; set that variable instead"],
    ),
    (
        "extra_args add a middleware beside the API guard",
        cluster(extra_args=["--middleware=my.Auth"]),
        ["engine_service_extra_args[0] '--middleware=my.Auth': --middleware is the collection's; it loads the API "
         "guard every replica head runs (the key on every path but /health, /metrics to "
         "engine_service_metrics_clients); remove it"],
    ),
    (
        "extra_args given as one string",
        cluster(extra_args="--disable-custom-all-reduce --enforce-eager"),
        ["engine_service_extra_args must be a list of strings, one argument per item"],
    ),
    (
        "patch with a short digest",
        cluster(patches=[dict(REFERENCE_SETTINGS["patches"][0], sha256="deadbeef")]),
        ["engine_service_patches[0] sha256 'deadbeef' is not a sha256 digest; give the 64 lowercase hex digits "
         "sha256sum prints for src"],
    ),
    (
        "patch with a relative destination",
        cluster(patches=[dict(REFERENCE_SETTINGS["patches"][0], dest="vllm/model_executor/models/dspark.py")]),
        ["engine_service_patches[0] dest 'vllm/model_executor/models/dspark.py' is not an absolute path inside "
         "the container"],
    ),
    (
        "two patches onto one file",
        cluster(patches=REFERENCE_SETTINGS["patches"] * 2),
        ["engine_service_patches [0] and [1] all mount onto "
         "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/dspark.py; "
         "give each destination one patch"],
    ),
    (
        "model not set",
        cluster(model=None),
        ["engine_service_model is not set"],
    ),
    (
        "max_num_seqs not set",
        cluster(max_num_seqs=None),
        ["engine_service_max_num_seqs is not set; it bounds the decode batch and the CUDA graph capture size"],
    ),
    (
        "a boolean where a count belongs",
        cluster(block_size=True),
        ["engine_service_block_size True is not a positive integer; leave it unset to omit the option"],
    ),
    (
        "override flag as a string",
        cluster(allow_small_cudagraph_capture_size="yes"),
        ["engine_service_allow_small_cudagraph_capture_size 'yes' is not true or false"],
    ),
    (
        "no engine hosts",
        cluster(hosts={}),
        ["the engine group has no hosts; add the nodes that run the engine ranks"],
    ),
]


@pytest.mark.parametrize("inventory, expected", [case[1:] for case in BAD_INVENTORIES], ids=[case[0] for case in BAD_INVENTORIES])
def test_bad_inventory_gives_the_expected_problems(inventory, expected):
    assert engine_config_problems(inventory) == expected


def test_bad_inventories_are_distinct():
    assert len({json.dumps(case[1], sort_keys=True) for case in BAD_INVENTORIES}) == len(BAD_INVENTORIES) >= 12


@pytest.mark.parametrize(
    "inventory",
    [None, [], {"hosts": [], "settings": {}}, {"hosts": {"spark1": "0"}, "settings": {}}],
)
def test_malformed_cluster_shape_raises(inventory):
    with pytest.raises(EngineConfigError):
        engine_config_problems(inventory)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({}, 64),
        ({"max_num_seqs": 12}, 48),
        ({"speculative_config": None}, 16),
        ({"speculative_config": {"method": "dspark", "num_speculative_tokens": 1}}, 32),
        ({"max_cudagraph_capture_size": 64}, 64),
        ({"max_cudagraph_capture_size": 128}, 128),
        ({"max_cudagraph_capture_size": 8, "allow_small_cudagraph_capture_size": True}, 8),
        ({"speculative_config": None, "max_cudagraph_capture_size": 7, "allow_small_cudagraph_capture_size": True}, 7),
    ],
)
def test_capture_size_arithmetic(changes, expected):
    sound = settings(**changes)
    assert effective_cudagraph_capture_size(sound) == expected
    assert engine_config_problems({"hosts": REFERENCE_HOSTS, "settings": sound}) == []
    argv = rank_argv(sound, 0, HEAD_ADDRESS)
    assert argv[argv.index("--max-cudagraph-capture-size") + 1] == str(expected)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"max_cudagraph_capture_size": 8}, "8 is below the full decode batch of engine_service_max_num_seqs 16 x (1 + 3 speculative tokens) = 64"),
        ({"max_num_seqs": 12, "max_cudagraph_capture_size": 40},
         "40 is below the full decode batch of engine_service_max_num_seqs 12 x (1 + 3 speculative tokens) = 48"),
        ({"speculative_config": None, "max_cudagraph_capture_size": 8}, "8 is below the full decode batch of engine_service_max_num_seqs 16 (no speculation)"),
        ({"max_cudagraph_capture_size": 42}, "42 is not a multiple of 1 + 3 speculative tokens = 4; vLLM would silently round it down to 40"),
        ({"max_cudagraph_capture_size": 66}, "66 is not a multiple of 1 + 3 speculative tokens = 4; vLLM would silently round it down to 64; use 64 or 68"),
        ({"max_cudagraph_capture_size": 2, "allow_small_cudagraph_capture_size": True}, "vLLM would silently round it down to 0; use 4"),
        ({"max_cudagraph_capture_size": 0}, "engine_service_max_cudagraph_capture_size 0 is not a positive integer"),
    ],
)
def test_refused_capture_sizes(changes, expected):
    refused = settings(**changes)
    problems = engine_config_problems({"hosts": REFERENCE_HOSTS, "settings": refused})
    assert any(expected in problem for problem in problems), problems
    with pytest.raises(EngineConfigError) as raised:
        effective_cudagraph_capture_size(refused)
    assert expected in str(raised.value)
    with pytest.raises(EngineConfigError):
        rank_argv(refused, 0, HEAD_ADDRESS)


def test_below_and_not_a_multiple_are_both_reported():
    problems = engine_config_problems(cluster(max_cudagraph_capture_size=42))
    assert [p.split(" is ", 1)[1][:20] for p in problems] == ["below the full decod", "not a multiple of 1 "]


@pytest.mark.parametrize(
    "arguments, expected",
    [
        ((REFERENCE_SETTINGS, 0, ""), "the master address '' is not an address"),
        ((REFERENCE_SETTINGS, 0, None), "the master address None is not an address"),
        ((REFERENCE_SETTINGS, 4, HEAD_ADDRESS), "rank 4 is outside 0-3"),
        ((settings(image="vllm:latest"), 0, HEAD_ADDRESS), "engine_service_image 'vllm:latest' is not pinned by digest"),
        (("settings", 0, HEAD_ADDRESS), "the engine settings must be a mapping"),
    ],
)
def test_rank_argv_refuses_what_it_cannot_render(arguments, expected):
    with pytest.raises(EngineConfigError) as raised:
        rank_argv(*arguments)
    assert expected in str(raised.value)


def test_ordinary_extra_args_pass():
    extra = ["--disable-custom-all-reduce", "--seed", "-1", "--dtype=bfloat16", "-q", "fp8", "--trust-remote-code"]
    assert engine_config_problems(cluster(extra_args=extra)) == []
    assert rank_argv(settings(extra_args=extra), 0, HEAD_ADDRESS)[-len(extra):] == extra


DOCKER_PREFIX = ["/usr/bin/docker", "run", "--rm", "--network", "host", "registry.example/vllm-dspark@" + DIGEST, "vllm"]

NASTY_ARGUMENTS = [
    "",
    " ",
    "two words",
    '"',
    "'",
    "\\",
    "ends in a backslash\\",
    '\\"',
    "50%",
    "%n",
    "%%",
    "$HOME",
    "${HOME}",
    "$$",
    "$",
    ";",
    "\\;",
    "tab\there",
    "line\nbreak",
    "carriage\rreturn",
    "bell\a and \x01 and \x7f",
    "ümlaut and 日本",
    '{"a":"b c","d":["%s","$x"],"e":"\\\\n"}',
    "\\x41 \\101 \\u0041",
    "--flag=value with spaces",
    "#not a comment",
]


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_exec_line_round_trips_the_real_flag_set(rank):
    argv = DOCKER_PREFIX + rank_argv(REFERENCE_SETTINGS, rank, HEAD_ADDRESS)
    line = systemd_exec_line(argv)
    assert "\n" not in line
    assert parse_systemd_exec_line(line) == argv


@pytest.mark.parametrize("argument", NASTY_ARGUMENTS)
def test_exec_line_round_trips_nasty_arguments(argument):
    argv = ["/usr/bin/printf", "%s\n", argument, "tail"]
    line = systemd_exec_line(argv)
    assert "\n" not in line and "\r" not in line
    assert parse_systemd_exec_line(line) == argv


def test_exec_line_round_trips_all_nasty_arguments_at_once():
    argv = ["/bin/echo"] + NASTY_ARGUMENTS
    assert parse_systemd_exec_line(systemd_exec_line(argv)) == argv


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["/usr/bin/vllm", "serve"], '"/usr/bin/vllm" "serve"'),
        (["/bin/echo", '{"k":3}'], '"/bin/echo" "{\\"k\\":3}"'),
        (["/bin/echo", "50%", "$HOME"], '"/bin/echo" "50%%" "$$HOME"'),
        (["/bin/echo", "a\\b", "x\ny", "\x01"], '"/bin/echo" "a\\\\b" "x\\ny" "\\x01"'),
        (["/bin/echo", ""], '"/bin/echo" ""'),
    ],
)
def test_exec_line_quoting(argv, expected):
    assert systemd_exec_line(argv) == expected


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], "non-empty list"),
        ("/bin/echo", "non-empty list"),
        (["docker", "run"], "'docker' is not an absolute path"),
        (["-/bin/echo"], "is not an absolute path"),
        (["/bin/echo", "a\0b"], "argument 1 contains a NUL character"),
        (["/bin/echo", 3], "argument 1 (3) is not a string"),
        (["/bin/echo", "\udcff"], "argument 1 is not valid UTF-8 text"),
    ],
)
def test_exec_line_refuses_what_systemd_cannot_carry(argv, expected):
    with pytest.raises(EngineConfigError) as raised:
        systemd_exec_line(argv)
    assert expected in str(raised.value)


# Lines as systemd reads them (checked against systemd 252's unit dump).
@pytest.mark.parametrize(
    "line, expected",
    [
        ("/bin/echo a  b\tc", ["/bin/echo", "a", "b", "c"]),
        ("/bin/echo 'a b' \"c d\"", ["/bin/echo", "a b", "c d"]),
        ("/bin/echo x\"y z\"w", ["/bin/echo", "xy zw"]),
        ("/bin/echo \"a\\\"b\" 'it\\'s'", ["/bin/echo", 'a"b', "it's"]),
        ("/bin/echo \\; \";\"", ["/bin/echo", ";", ";"]),
        ("/bin/echo 50%% $$HOME \"$${X}\"", ["/bin/echo", "50%", "$HOME", "${X}"]),
        ("/bin/echo \"\\x41\\101\\u00fc\\s\\t\"", ["/bin/echo", "AAü \t"]),
        ("/bin/echo \"\" ''", ["/bin/echo", "", ""]),
    ],
)
def test_parse_follows_systemd_splitting(line, expected):
    assert parse_systemd_exec_line(line) == expected


@pytest.mark.parametrize(
    "line, expected",
    [
        ("/bin/echo %n", "specifier"),
        ("/bin/echo $HOME", "variable"),
        ("/bin/echo \"${HOME}\"", "variable"),
        ("/bin/echo a ; /bin/true", "separates commands"),
        ("/bin/echo \"open", "unbalanced"),
        ("/bin/echo 'open", "unbalanced"),
        ("/bin/echo tail\\", "ends in a backslash"),
        ("/bin/echo \\q", "unknown escape"),
        ("/bin/echo \\x0", "bad escape"),
        ("/bin/echo \\x00", "bad escape"),
        ("   ", "empty"),
    ],
)
def test_parse_refuses_what_it_would_have_to_guess(line, expected):
    with pytest.raises(EngineConfigError) as raised:
        parse_systemd_exec_line(line)
    assert expected in str(raised.value)


RANK_CONTAINER = {
    "docker": "/usr/bin/docker",
    "name": "dgxspark-engine",
    "gpus": "all",
    "devices": ["/dev/infiniband"],
    "capabilities": ["IPC_LOCK"],
    "ulimits": {"stack": "67108864:67108864", "memlock": "-1:-1"},
    "env_files": ["/etc/dgxspark/engine/versions/v1/engine.env", "/run/dgxspark-engine/fabric-gid.env"],
    "mounts": [
        {"src": "/var/lib/dgxspark/models/ds4", "dest": "/models/ds4"},
        {"src": "/var/lib/dgxspark/engine/cache", "dest": "/root/.cache", "readonly": False},
    ],
}


def test_container_argv_renders_the_rank_container():
    argv = container_argv(RANK_CONTAINER, "sha256:" + "ab" * 32, ["vllm", "serve", "/models/ds4"])
    assert argv == [
        "/usr/bin/docker", "run", "--rm", "--name", "dgxspark-engine", "--init", "--network", "host", "--ipc", "host",
        "--gpus", "all", "--device", "/dev/infiniband", "--cap-add", "IPC_LOCK",
        "--ulimit", "memlock=-1:-1", "--ulimit", "stack=67108864:67108864",
        "--env-file", "/etc/dgxspark/engine/versions/v1/engine.env", "--env-file", "/run/dgxspark-engine/fabric-gid.env",
        "--mount", "type=bind,source=/var/lib/dgxspark/models/ds4,target=/models/ds4,readonly",
        "--mount", "type=bind,source=/var/lib/dgxspark/engine/cache,target=/root/.cache",
        "sha256:" + "ab" * 32, "vllm", "serve", "/models/ds4",
    ]
    assert "--privileged" not in argv


def test_the_api_key_reaches_the_engine_from_a_mounted_file_only(tmp_path):
    secrets = "/etc/dgxspark/engine/versions/v1/secrets.env"
    argv = container_argv(dict(RANK_CONTAINER, secrets_file=secrets), "img", ["vllm", "serve", "/m"])
    assert "--mount" in argv and "type=bind,source=%s,target=%s,readonly" % (secrets, SECRETS_TARGET) in argv
    assert secrets not in [argv[i + 1] for i, word in enumerate(argv) if word == "--env-file"]
    assert argv[argv.index("img") + 1:] == ["sh", "-c", container_wrapper(None, True), "dgxspark-engine", "vllm", "serve", "/m"]
    # The wrapper as the container runs it: the key (with characters a shell would
    # expand) reaches the engine's environment verbatim, nothing else of the file does.
    key = "sk-$(touch /tmp/x)`id` \\ 'q' \"d\" *"
    secrets_path = tmp_path / "secrets.env"
    secrets_path.write_text("OTHER=1\nVLLM_API_KEY=%s" % key)
    script = container_wrapper(None, True).replace(SECRETS_TARGET, str(secrets_path))
    done = subprocess.run(["sh", "-c", script, "dgxspark-engine", "sh", "-c", 'printf %s "$VLLM_API_KEY"; printf "|%s" "${OTHER-unset}"'],
                          capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    assert done.stdout == key + "|unset"


def test_a_missing_secrets_file_stops_the_engine_before_it_starts(tmp_path):
    script = container_wrapper(None, True).replace(SECRETS_TARGET, str(tmp_path / "absent.env"))
    done = subprocess.run(["sh", "-c", script, "dgxspark-engine", "echo", "started"], capture_output=True, text=True,
                          check=False)
    assert done.returncode != 0 and "started" not in done.stdout


def test_the_api_guard_is_mounted_first_on_the_images_pythonpath_and_the_key_is_still_read(tmp_path):
    argv = container_argv(dict(RANK_CONTAINER, api_guard="/etc/v1/dgxspark_api_guard.py", secrets_file="/s/secrets.env"),
                          "img", ["vllm", "serve", "/m"])
    assert ("type=bind,source=/etc/v1/dgxspark_api_guard.py,target=/opt/dgxspark/python/dgxspark_api_guard.py,readonly"
            in argv)
    wrapper = argv[argv.index("img") + 3]
    assert argv[argv.index("img") + 1:] == ["sh", "-c", wrapper, "dgxspark-engine", "vllm", "serve", "/m"]
    secrets_path = tmp_path / "secrets.env"
    secrets_path.write_text("VLLM_API_KEY=k1\n")
    script = wrapper.replace(SECRETS_TARGET, str(secrets_path))
    show = ["sh", "-c", 'printf "%s|%s" "$PYTHONPATH" "$VLLM_API_KEY"']
    for image_path, expected in (({}, "/opt/dgxspark/python|k1"),
                                 ({"PYTHONPATH": "/usr/lib/image"}, "/opt/dgxspark/python:/usr/lib/image|k1")):
        done = subprocess.run(["sh", "-c", script, "dgxspark-engine"] + show, capture_output=True, text=True,
                              check=True, env=dict(image_path, PATH=os.environ["PATH"]))
        assert done.stdout == expected


def test_a_rank_without_key_or_guard_directory_runs_its_command_unwrapped():
    assert container_wrapper(None, False) is None
    argv = container_argv(RANK_CONTAINER, "img", ["vllm", "serve", "/m"])
    assert argv[argv.index("img") + 1:] == ["vllm", "serve", "/m"]


@pytest.mark.parametrize("python_dir", ["relative/dir", "/a b", "/x;rm", 7])
def test_a_guard_directory_a_shell_would_split_is_refused(python_dir):
    with pytest.raises(EngineConfigError, match="Python directory"):
        container_wrapper(python_dir, False)


@pytest.mark.parametrize("api_guard", ["relative/guard.py", "/a,b/guard.py", 7])
def test_an_api_guard_that_cannot_be_mounted_is_refused(api_guard):
    with pytest.raises(EngineConfigError, match="API guard"):
        container_argv(dict(RANK_CONTAINER, api_guard=api_guard), "img", ["vllm"])


@pytest.mark.parametrize("secrets_file", ["relative/secrets.env", "/a,b/secrets.env", 7])
def test_a_secrets_file_that_cannot_be_mounted_is_refused(secrets_file):
    with pytest.raises(EngineConfigError, match="secrets file"):
        container_argv(dict(RANK_CONTAINER, secrets_file=secrets_file), "img", ["vllm"])


def test_container_argv_survives_the_systemd_round_trip():
    argv = container_argv(RANK_CONTAINER, "img@sha256:" + "cd" * 32,
                          ["vllm", "serve", "/m", "--speculative-config", '{"method":"dspark","num_speculative_tokens":3}'])
    assert parse_systemd_exec_line(systemd_exec_line(argv)) == argv


@pytest.mark.parametrize("argument, message", [
    ("--privileged", "holds --privileged: it gives the container every device and capability of the node"),
    ("--network=bridge", "holds --network=bridge, which the collection sets itself"),
    ("-v", "holds -v, which the collection renders from engine_service_extra_mounts"),
    ("--mount=type=bind", "holds --mount=type=bind, which the collection renders from engine_service_extra_mounts"),
    ("--ipc=private", "holds --ipc=private, which the collection sets itself"),
    ("--pid=host", "holds --pid=host: it puts the container in the node's PID namespace"),
])
def test_container_argv_refuses_what_the_preflight_refuses(argument, message):
    # The preflight refuses these first; the render guards a command line made without it.
    with pytest.raises(EngineConfigError) as raised:
        container_argv(dict(RANK_CONTAINER, extra_args=[argument]), "img", ["vllm"])
    assert message in str(raised.value)
    assert str(raised.value) == "; ".join(engine_container_problems({"container_extra_args": [argument]}))


def test_container_argv_passes_ordinary_extra_options():
    argv = container_argv(dict(RANK_CONTAINER, extra_args=["--stop-signal", "SIGINT", "--label=rank 0"]), "img", ["vllm"])
    assert argv[argv.index("img") - 3:argv.index("img")] == ["--stop-signal", "SIGINT", "--label=rank 0"]


@pytest.mark.parametrize("mount, message", [
    ({"src": "relative/path", "dest": "/m"}, "src 'relative/path' is not an absolute path"),
    ({"src": "/a,b", "dest": "/m"}, "without commas"),
    ("not-a-mapping", "is not a mapping"),
])
def test_container_argv_refuses_bad_mounts(mount, message):
    with pytest.raises(EngineConfigError, match=message):
        container_argv(dict(RANK_CONTAINER, mounts=[mount]), "img", ["vllm"])


def test_container_argv_needs_a_name_image_and_command():
    with pytest.raises(EngineConfigError, match="container name"):
        container_argv(dict(RANK_CONTAINER, name="bad name"), "img", ["vllm"])
    with pytest.raises(EngineConfigError, match="image"):
        container_argv(RANK_CONTAINER, "", ["vllm"])
    with pytest.raises(EngineConfigError, match="command"):
        container_argv(RANK_CONTAINER, "img", [])


def test_env_file_text_is_sorted_and_verbatim():
    text = env_file_text({"VLLM_HOST_IP": "192.168.100.11", "NCCL_IB_HCA": "roceP2p1s0f1:1", "A_NUMBER": 3})
    assert text == "A_NUMBER=3\nNCCL_IB_HCA=roceP2p1s0f1:1\nVLLM_HOST_IP=192.168.100.11\n"


@pytest.mark.parametrize("env, message", [
    ({"BAD NAME": "x"}, "not a valid variable name"),
    ({"X": "line\nbreak"}, "line break"),
    ({"X": True}, "give a string"),
    ({"X": ["a"]}, "give a string"),
])
def test_env_file_text_refuses_what_an_env_file_cannot_carry(env, message):
    with pytest.raises(EngineConfigError, match=message):
        env_file_text(env)


# --- The rank's container and environment -------------------------------------

ROLES = Path(__file__).resolve().parents[4] / "roles"
REPOSITORY = ROLES.parent


def role_defaults(role):
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())


def container_defaults():
    """The container settings as the roles' defaults give them."""
    engine = role_defaults("engine_service")
    fabric = role_defaults("roce_fabric")
    settings = {key: engine["engine_service_" + key] for key in CONTAINER_SETTINGS if key != "nccl_extra_env"}
    settings["nccl_extra_env"] = fabric["roce_fabric_nccl_extra_env"]
    return settings


REFERENCE_CONTAINER = {
    "container_gpus": "all",
    "container_devices": ["/dev/infiniband"],
    "container_allowed_devices": ["/dev/infiniband", "/dev/infiniband/*"],
    "container_capabilities": ["IPC_LOCK"],
    "container_ulimits": {"memlock": "-1:-1", "stack": "67108864:67108864", "nofile": "1048576:1048576"},
    "container_shm_size": "",
    "container_extra_args": [],
    "extra_mounts": [],
    "env": {},
    "nccl_extra_env": {},
}

ALLOWED = "(/dev/infiniband, /dev/infiniband/*)"
EXTRA = "engine_service_container_extra_args"
PRIVILEGED = (
    "engine_service_container_extra_args holds --privileged: it gives the container every device and capability "
    "of the node and lifts its seccomp and AppArmor confinement; expected: no --privileged (the collection passes "
    "the GPU and the RDMA devices itself). Remove it."
)
NAMESPACE_EXPECTED = "(the collection shares only the node's network and IPC namespaces, which the ranks need). Remove it."
PID_HOST = (
    "holds {found}: it puts the container in the node's PID namespace, where it sees every process of the node and "
    "can signal them; expected: the container's own PID namespace " + NAMESPACE_EXPECTED
)
CONFINEMENT_EXPECTED = "; expected: Docker's default confinement (vLLM needs none of it lifted). Remove it."
SECCOMP = "it turns off the container's seccomp filter, so every system call reaches the node's kernel"
ALL_IN_EXTRA_ARGS = (
    "holds {found}: it gives the container every capability of the node, as good as root on it; expected: only the "
    "capabilities the engine needs, by name, in engine_service_container_capabilities (the collection adds "
    "IPC_LOCK). Remove it."
)
DEVICE = (
    "holds {found}: it gives the container a device of the node outside engine_service_container_allowed_devices "
    "{allowed}; expected: the RDMA devices only (the GPU comes through --gpus). Remove it, or add it to "
    "engine_service_container_allowed_devices if the engine needs it."
)


def owned(found, flag, owner):
    return "%s holds %s, which the collection renders from %s; expected: no %s here. Set %s instead." % (
        EXTRA, found, owner, flag, owner)


def fixed(found, flag, what):
    return "%s holds %s, which the collection sets itself (%s); expected: no %s here. Remove it." % (EXTRA, found, what, flag)


def secret(variable, name, expected, fix):
    return (
        "%s holds %s, a secret, in plain environment: the environment is written into every rank's version and shown "
        "by ansible-playbook -v; expected: %s. %s" % (variable, name, expected, fix)
    )


API_KEY_HOME = ("the API key in engine_service_api_key, vault-encrypted (it reaches vLLM as VLLM_API_KEY through a "
                "root-only file)")
HF_TOKEN_HOME = ("the Hub token in model_weights_hf_token, vault-encrypted (the collection fetches the weights with "
                 "it; the engine reads them from disk)")

# (case, changes to the reference container settings, the problems expected)
CONTAINER_REFUSALS = [
    ("privileged", {"container_extra_args": ["--privileged"]}, [PRIVILEGED]),
    ("privileged=true", {"container_extra_args": ["--privileged=true"]},
     [PRIVILEGED.replace("holds --privileged:", "holds --privileged=true:")]),
    ("privileged=false", {"container_extra_args": ["--privileged=false"]},
     [EXTRA + " holds --privileged=false, which the collection never needs (no rank runs privileged); expected: no "
              "--privileged here. Remove it."]),
    ("pid=host", {"container_extra_args": ["--pid=host"]}, [EXTRA + " " + PID_HOST.format(found="--pid=host")]),
    ("pid host as two items", {"container_extra_args": ["--init", "--pid", "host"]},
     [fixed("--init", "--init", "--init on every rank"), EXTRA + " " + PID_HOST.format(found="--pid host")]),
    ("pid host as one item", {"container_extra_args": ["--pid host"]},
     [EXTRA + "[0] '--pid host' holds a space: docker reads the item as one unknown argument; expected: the flag and "
              "its value as two items, or --flag=value. Split it.",
      EXTRA + " " + PID_HOST.format(found="--pid host")]),
    ("uts, userns and cgroupns of the node", {"container_extra_args": ["--uts=host", "--userns", "host", "--cgroupns=host"]},
     [EXTRA + " holds --uts=host: it puts the container in the node's UTS namespace, where it can change the node's "
              "hostname; expected: the container's own UTS namespace " + NAMESPACE_EXPECTED,
      EXTRA + " holds --userns host: it takes the container out of the daemon's user namespace remapping, so its root "
              "is the node's root; expected: the container's own user namespace " + NAMESPACE_EXPECTED,
      EXTRA + " holds --cgroupns=host: it puts the container in the node's cgroup namespace, where it sees the "
              "node's whole cgroup tree; expected: the container's own cgroup namespace " + NAMESPACE_EXPECTED]),
    ("seccomp unconfined", {"container_extra_args": ["--security-opt", "seccomp=unconfined"]},
     [EXTRA + " holds --security-opt seccomp=unconfined: " + SECCOMP + CONFINEMENT_EXPECTED]),
    ("seccomp unconfined, legacy colon form", {"container_extra_args": ["--security-opt=seccomp:unconfined"]},
     [EXTRA + " holds --security-opt=seccomp:unconfined: " + SECCOMP + CONFINEMENT_EXPECTED]),
    ("apparmor unconfined", {"container_extra_args": ["--security-opt=apparmor=unconfined"]},
     [EXTRA + " holds --security-opt=apparmor=unconfined: it runs the container without its AppArmor profile"
      + CONFINEMENT_EXPECTED]),
    ("SELinux labels off", {"container_extra_args": ["--security-opt", "label=disable"]},
     [EXTRA + " holds --security-opt label=disable: it turns off the container's SELinux labels" + CONFINEMENT_EXPECTED]),
    ("system paths unmasked", {"container_extra_args": ["--security-opt", "systempaths=unconfined"]},
     [EXTRA + " holds --security-opt systempaths=unconfined: it unmasks the kernel paths under /proc and /sys that "
              "Docker hides from containers" + CONFINEMENT_EXPECTED]),
    ("cap-add ALL", {"container_extra_args": ["--cap-add", "ALL"]}, [EXTRA + " " + ALL_IN_EXTRA_ARGS.format(found="--cap-add ALL")]),
    ("cap-add=all", {"container_extra_args": ["--cap-add=all"]}, [EXTRA + " " + ALL_IN_EXTRA_ARGS.format(found="--cap-add=all")]),
    ("capabilities holding ALL", {"container_capabilities": ["IPC_LOCK", "ALL"]},
     ["engine_service_container_capabilities holds ALL: it gives the container every capability of the node, as "
      "good as root on it; expected: only the capabilities the engine needs, by name (the default is IPC_LOCK, for "
      "RDMA memory registrations). Name them instead."]),
    ("device outside the allow-list", {"container_devices": ["/dev/infiniband", "/dev/sda"]},
     ["engine_service_container_devices " + DEVICE.format(found="/dev/sda", allowed=ALLOWED)]),
    ("device climbing out of /dev/infiniband", {"container_devices": ["/dev/infiniband/../sda"]},
     ["engine_service_container_devices " + DEVICE.format(found="/dev/infiniband/../sda", allowed=ALLOWED)]),
    ("device outside the allow-list in extra args", {"container_extra_args": ["--device", "/dev/nvme0n1"]},
     [EXTRA + " " + DEVICE.format(found="--device /dev/nvme0n1", allowed=ALLOWED)]),
    ("device outside a narrowed allow-list", {"container_allowed_devices": ["/dev/infiniband/uverbs*"]},
     ["engine_service_container_devices " + DEVICE.format(found="/dev/infiniband", allowed="(/dev/infiniband/uverbs*)")]),
    ("allowed device in extra args", {"container_extra_args": ["--device=/dev/infiniband/uverbs0"]},
     [owned("--device=/dev/infiniband/uverbs0", "--device", "engine_service_container_devices")]),
    ("device cgroup rule", {"container_extra_args": ["--device-cgroup-rule", "c *:* rwm"]},
     [EXTRA + " holds --device-cgroup-rule c *:* rwm: it lets the container open devices of the node by number, "
              "around engine_service_container_allowed_devices; expected: devices named in "
              "engine_service_container_devices. Remove it."]),
    ("ipc=host, which the collection sets", {"container_extra_args": ["--ipc=host"]},
     [fixed("--ipc=host", "--ipc", "--ipc host on every rank: vLLM's processes share the node's /dev/shm")]),
    ("network bridge", {"container_extra_args": ["--network", "bridge"]},
     [fixed("--network bridge", "--network", "--network host on every rank")]),
    ("options with their own variables", {"container_extra_args": [
        "--shm-size=8g", "--gpus", "all", "--cap-add", "SYS_NICE", "--ulimit", "nofile=1024", "-e", "A=1", "-eB=2",
        "--env-file=/x.env", "-v", "/a:/b", "--mount", "type=bind,source=/a,target=/b", "--name", "other"]},
     [owned("--shm-size=8g", "--shm-size", "engine_service_container_shm_size"),
      owned("--gpus all", "--gpus", "engine_service_container_gpus"),
      owned("--cap-add SYS_NICE", "--cap-add", "engine_service_container_capabilities"),
      owned("--ulimit nofile=1024", "--ulimit", "engine_service_container_ulimits"),
      # The variable's name only: an environment value may be a secret.
      owned("-e A", "-e", "engine_service_env"),
      owned("-e B", "-e", "engine_service_env"),
      owned("--env-file=/x.env", "--env-file", "engine_service_env"),
      owned("-v /a:/b", "-v", "engine_service_extra_mounts"),
      owned("--mount type=bind,source=/a,target=/b", "--mount", "engine_service_extra_mounts"),
      owned("--name other", "--name", "engine_service_container_name")]),
    ("extra args as one string", {"container_extra_args": "--privileged"},
     [EXTRA + " must be a list of strings, one argument per item, not a string"]),
    ("extra arg that is no string", {"container_extra_args": ["--cpus", 4]},
     [EXTRA + "[1] 4 is not a string; quote it in YAML"]),
    ("devices as one string", {"container_devices": "/dev/infiniband"},
     ["engine_service_container_devices must be a list of device paths of the node, one per item, not a string"]),
    ("allow-list as one string", {"container_allowed_devices": "/dev/infiniband"},
     ["engine_service_container_allowed_devices must be a list of device paths or patterns (/dev/infiniband/*), not "
      "a string"]),
    ("capabilities as one string", {"container_capabilities": "IPC_LOCK"},
     ["engine_service_container_capabilities must be a list of capability names (IPC_LOCK), not a string"]),
    ("capability that is no name", {"container_capabilities": ["IPC LOCK"]},
     ["engine_service_container_capabilities[0] 'IPC LOCK' is not a capability name (IPC_LOCK, SYS_NICE)"]),
    ("ulimits as a list", {"container_ulimits": ["memlock=-1"]},
     ['engine_service_container_ulimits must map a limit name to soft:hard (memlock: "-1:-1"), not a list']),
    ("ulimit that is no number", {"container_ulimits": {"memlock": "unlimited"}},
     ["engine_service_container_ulimits memlock 'unlimited' is not soft:hard or one number (-1 for unlimited)"]),
    ("shm size that is no size", {"container_shm_size": "lots"},
     ["engine_service_container_shm_size 'lots' is not a size (64m, 8g) or empty"]),
    ("GPUs as a list", {"container_gpus": ["all"]},
     ["engine_service_container_gpus ['all'] is not a GPU request (all, a count, device=...) or empty"]),
    ("mounts as one mapping", {"extra_mounts": {"src": "/a", "dest": "/b"}},
     ["engine_service_extra_mounts must be a list of {src, dest, readonly} mappings, not a mapping"]),
    ("mount with a relative source, a string readonly and a typo", {"extra_mounts": [
        {"src": "opt/runtime", "dest": "/opt/runtime", "readonly": "no", "ro": True}]},
     ["engine_service_extra_mounts[0] has ro, which a mount does not take; give src, dest and readonly",
      "engine_service_extra_mounts[0] src 'opt/runtime' is not an absolute path without commas",
      "engine_service_extra_mounts[0] readonly 'no' is not true or false"]),
    ("mount of the Docker socket", {"extra_mounts": [{"src": "/var/run/docker.sock", "dest": "/var/run/docker.sock"}]},
     ["engine_service_extra_mounts[0] holds src /var/run/docker.sock: it gives the container the node's Docker "
      "daemon, as good as root on the node; expected: directories the engine reads. Remove it."]),
    ("mount of the node's /run", {"extra_mounts": [{"src": "/var/run/", "dest": "/host-run"}]},
     ["engine_service_extra_mounts[0] holds src /var/run/: it gives the container the node's /run, with the Docker "
      "and containerd sockets in it, as good as root on the node; expected: directories the engine reads. "
      "Remove it."]),
    ("mount of the node's root", {"extra_mounts": [{"src": "/", "dest": "/host"}]},
     ["engine_service_extra_mounts[0] holds src /: it gives the container the node's whole filesystem; expected: "
      "directories the engine reads. Remove it."]),
    ("env sets VLLM_HOST_IP", {"env": {"VLLM_HOST_IP": "192.168.100.99"}},
     ["engine_service_env sets VLLM_HOST_IP, which the collection sets itself (each rank's own fabric address, "
      "roce_fabric_address); expected: no VLLM_HOST_IP here. Remove it."]),
    ("fabric env sets NCCL_IB_GID_INDEX", {"nccl_extra_env": {"NCCL_IB_GID_INDEX": "3"}},
     ["roce_fabric_nccl_extra_env sets NCCL_IB_GID_INDEX, which the collection sets itself (resolved from the fabric "
      "address at every start of the rank); expected: no NCCL_IB_GID_INDEX here. Remove it."]),
    ("fabric env sets NCCL_IB_HCA", {"nccl_extra_env": {"NCCL_IB_HCA": "rocep1s0f1:1"}},
     ["roce_fabric_nccl_extra_env sets NCCL_IB_HCA, which the collection sets itself (the HCAs of the fabric links "
      "with carrier, from roce_fabric_links); expected: no NCCL_IB_HCA here. Remove it."]),
    ("env sets a variable of the fabric's base environment", {"env": {"NCCL_NVLS_ENABLE": "1"}},
     ["engine_service_env sets NCCL_NVLS_ENABLE, which the collection sets from roce_fabric_nccl_base_env; expected: "
      "no NCCL_NVLS_ENABLE here. Set it in roce_fabric_nccl_base_env instead."]),
    ("env as a list", {"env": ["HF_HUB_OFFLINE=1"]},
     ["engine_service_env must be a mapping of variable names to values, not a list"]),
    ("fabric env as a string", {"nccl_extra_env": "NCCL_IB_TIMEOUT=22"},
     ["roce_fabric_nccl_extra_env must be a mapping of variable names to values, not a string"]),
    ("env name that is no variable name", {"env": {"HF HUB OFFLINE": "1"}},
     ["engine_service_env name 'HF HUB OFFLINE' is not a valid variable name (letters, digits and _, not starting "
      "with a digit)"]),
    ("env value that is a boolean", {"env": {"HF_HUB_OFFLINE": True}},
     ["engine_service_env HF_HUB_OFFLINE is a boolean, not a string; give a string (quote it in YAML)"]),
    ("env value that is a mapping", {"nccl_extra_env": {"NCCL_DEBUG": {"level": "INFO"}}},
     ["roce_fabric_nccl_extra_env NCCL_DEBUG is a mapping, not a string; give a string (quote it in YAML)"]),
    ("env value with a line break", {"env": {"VLLM_LOGGING_PREFIX": "rank\n0"}},
     ["engine_service_env VLLM_LOGGING_PREFIX holds a line break or NUL, which an env file cannot carry; give the "
      "value on one line"]),
    ("a variable in both environments", {"env": {"NCCL_IB_TIMEOUT": "20"}, "nccl_extra_env": {"NCCL_IB_TIMEOUT": "22"}},
     ["engine_service_env and roce_fabric_nccl_extra_env both set NCCL_IB_TIMEOUT; expected: each variable in one of "
      "them (the engine would get engine_service_env's). Remove it from one."]),
]


# Secrets in the environments: judged in one place, the inventory check (env_secret_problems
# in _inventory_values.py VALUE_RULES), before any host is contacted; the preflight's
# container check leaves them alone.
ENV_SECRETS = [
    ("API key in plain env", "env", {"VLLM_API_KEY": "sk-plaintext-0123"},
     secret("engine_service_env", "VLLM_API_KEY", API_KEY_HOME, "Move it there.")),
    ("Hub token in plain env", "env", {"HF_TOKEN": "hf_plaintext0123"},
     secret("engine_service_env", "HF_TOKEN", HF_TOKEN_HOME, "Move it there.")),
    ("Hub token under its old name in the fabric env", "nccl_extra_env", {"HUGGING_FACE_HUB_TOKEN": "hf_plaintext0123"},
     secret("roce_fabric_nccl_extra_env", "HUGGING_FACE_HUB_TOKEN", HF_TOKEN_HOME, "Move it there.")),
    ("another secret in plain env", "env", {"WANDB_API_KEY": "0123abcd"},
     secret("engine_service_env", "WANDB_API_KEY",
            "no secret in the environment (the engine's only secret is engine_service_api_key, vault-encrypted)",
            "Remove it.")),
]


@pytest.mark.parametrize("setting, env, expected", [case[1:] for case in ENV_SECRETS], ids=[case[0] for case in ENV_SECRETS])
def test_a_secret_in_an_environment_is_judged_by_the_inventory_check_alone(setting, env, expected):
    assert engine_container_problems(container(**{setting: env})) == []
    variable = "engine_service_env" if setting == "env" else "roce_fabric_nccl_extra_env"
    assert value_problems("spark2", {variable: env}) == ["spark2: " + expected]
    assert not any(value in expected for value in env.values())


def container(**changes):
    changed = copy.deepcopy(REFERENCE_CONTAINER)
    changed.update(changes)
    return changed


def test_the_roles_default_container_settings_are_sound():
    assert container_defaults() == REFERENCE_CONTAINER
    assert engine_container_problems(container_defaults()) == []


def test_the_simulated_inventory_container_settings_are_sound():
    class VaultTolerantLoader(yaml.SafeLoader):
        """Reads a vaulted value as its ciphertext (the engine API key is vaulted)."""

    VaultTolerantLoader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))
    inventory = yaml.load((REPOSITORY / "inventory" / "simulated" / "group_vars" / "dgxspark_cluster"
                           / "engine.yml").read_text(), Loader=VaultTolerantLoader)  # a SafeLoader
    settings = container_defaults()
    settings.update({key: inventory["engine_service_" + key] for key in CONTAINER_SETTINGS
                     if "engine_service_" + key in inventory})
    assert settings["env"] and settings["extra_mounts"]
    assert engine_container_problems(settings) == []


@pytest.mark.parametrize("changes, expected", [case[1:] for case in CONTAINER_REFUSALS],
                         ids=[case[0] for case in CONTAINER_REFUSALS])
def test_container_settings_give_the_expected_problems(changes, expected):
    assert engine_container_problems(container(**changes)) == expected


def test_container_refusals_are_distinct():
    assert len({json.dumps(case[1], sort_keys=True) for case in CONTAINER_REFUSALS}) == len(CONTAINER_REFUSALS)


@pytest.mark.parametrize("changes", [case[1] for case in CONTAINER_REFUSALS if "env" in case[0]],
                         ids=[case[0] for case in CONTAINER_REFUSALS if "env" in case[0]])
def test_environment_problems_never_show_a_value(changes):
    text = " ".join(engine_container_problems(container(**changes)))
    for env in (changes.get("env"), changes.get("nccl_extra_env")):
        for value in (env.values() if isinstance(env, dict) else []):
            if isinstance(value, str):
                assert value not in text


@pytest.mark.parametrize("changes", [
    {"container_extra_args": ["--pid=container:sidecar", "--security-opt", "no-new-privileges",
                              "--security-opt=seccomp=/etc/docker/seccomp-vllm.json", "--cap-drop", "NET_RAW",
                              "--label=dgxspark rank", "--stop-signal", "SIGINT", "--user", "0"]},
    {"container_devices": ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm:/dev/infiniband/rdma_cm:rw"]},
    {"container_allowed_devices": ["/dev/infiniband", "/dev/nvidia-caps/*"],
     "container_devices": ["/dev/infiniband", "/dev/nvidia-caps/nvidia-cap1"]},
    {"container_capabilities": ["IPC_LOCK", "SYS_NICE"], "container_gpus": 1, "container_shm_size": "32g",
     "container_ulimits": {"memlock": -1, "nofile": "1048576"}},
    {"extra_mounts": [{"src": "/opt/dgxspark-sim/vllm-runtime", "dest": "/opt/vllm-runtime"},
                      {"src": "/srv/scratch", "dest": "/scratch", "readonly": False}]},
    {"env": {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": 1, "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
             "VLLM_MAX_TOKENS_PER_EXPERT": "64"},
     "nccl_extra_env": {"NCCL_IB_TIMEOUT": "22", "NCCL_IB_RETRY_CNT": 7, "UCX_NET_DEVICES": "rocep1s0f1:1"}},
    # Unset settings are not checked.
    {key: None for key in CONTAINER_SETTINGS},
], ids=["harmless options", "RDMA devices", "widened allow-list", "capabilities, GPUs and limits", "mounts",
        "environments", "unset"])
def test_sound_container_settings_pass(changes):
    assert engine_container_problems(container(**changes)) == []


def test_engine_config_names_each_container_problem_after_the_hosts_that_have_it():
    inventory = cluster(**container(container_extra_args=["--privileged"]))
    assert engine_config_problems(inventory) == ["spark1, spark2, spark3 and spark4: " + PRIVILEGED]


def test_engine_config_judges_each_host_on_its_own_container_problems():
    hosts = copy.deepcopy(REFERENCE_HOSTS)
    spark3 = engine_container_problems(container(container_extra_args=["--privileged", "--pid=host"]))
    spark4 = engine_container_problems(container(container_extra_args=["--privileged"]))
    hosts["spark1"]["container_problems"] = []
    hosts["spark3"]["container_problems"] = spark3
    hosts["spark4"]["container_problems"] = spark4
    # spark2 carries none: it is judged on the shared settings, which are sound.
    assert engine_config_problems(cluster(hosts=hosts)) == [
        "spark3 and spark4: " + PRIVILEGED,
        "spark3: " + EXTRA + " " + PID_HOST.format(found="--pid=host"),
    ]


def test_engine_config_without_hosts_still_judges_the_container_settings():
    assert engine_config_problems(cluster(hosts={}, **container(container_devices=["/dev/sda"]))) == [
        "engine_service_container_devices " + DEVICE.format(found="/dev/sda", allowed=ALLOWED),
        "the engine group has no hosts; add the nodes that run the engine ranks",
    ]


@pytest.mark.parametrize("problems", ["a sentence", [1], {"a": 1}])
def test_malformed_container_problems_of_a_host_raise(problems):
    with pytest.raises(EngineConfigError, match="container_problems"):
        engine_config_problems(cluster(hosts=with_host("spark2", container_problems=problems)))


@pytest.mark.parametrize("settings", [None, [], "container_extra_args"])
def test_container_problems_need_a_mapping(settings):
    with pytest.raises(EngineConfigError, match="must be a mapping"):
        engine_container_problems(settings)


def test_env_file_text_refuses_mixed_names_with_a_message():
    with pytest.raises(EngineConfigError, match="name 1 is not a valid variable name"):
        env_file_text({1: "a", "B": "b"})
