# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_config import (
    MANAGED_FLAGS,
    EngineConfigError,
    container_argv,
    effective_cudagraph_capture_size,
    engine_config_problems,
    env_file_text,
    parse_systemd_exec_line,
    rank_argv,
    replica_layout,
    systemd_exec_line,
)

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
        ["spark2: roce_fabric_address is not set; every engine rank reaches the others at its fabric address"],
    ),
    (
        "fabric address that is no address",
        cluster(hosts=with_host("spark2", fabric_address="spark2.fabric")),
        ["spark2: roce_fabric_address 'spark2.fabric' is not an IP address"],
    ),
    (
        "two hosts on one fabric address",
        cluster(hosts=with_host("spark2", fabric_address="192.168.100.11")),
        ["roce_fabric_address 192.168.100.11 is used by spark1 and spark2; every engine host needs its own address"],
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
        ["engine_service_api_port 80000 is not a port (1-65535)"],
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
        ["engine_service_gpu_memory_utilization 1.5 is not a fraction above 0 and at most 1"],
    ),
    (
        "memory utilization of 0",
        cluster(gpu_memory_utilization=0),
        ["engine_service_gpu_memory_utilization 0 is not a fraction above 0 and at most 1"],
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


def test_container_argv_survives_the_systemd_round_trip():
    argv = container_argv(RANK_CONTAINER, "img@sha256:" + "cd" * 32,
                          ["vllm", "serve", "/m", "--speculative-config", '{"method":"dspark","num_speculative_tokens":3}'])
    assert parse_systemd_exec_line(systemd_exec_line(argv)) == argv


@pytest.mark.parametrize("argument", ["--privileged", "--network=bridge", "-v", "--mount=type=bind", "--ipc=private"])
def test_container_argv_refuses_options_it_owns(argument):
    with pytest.raises(EngineConfigError, match="set by the collection or refused"):
        container_argv(dict(RANK_CONTAINER, extra_args=[argument]), "img", ["vllm"])


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
