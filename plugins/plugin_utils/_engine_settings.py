# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine settings' vocabulary, shared by the checks and the command lines: the
inventory variable of each setting, the vLLM flags the collection renders and owns
(MANAGED_FLAGS), and the error the filters raise.
"""

from __future__ import annotations

import json
import re

VARIABLE_PREFIX = "engine_service_"

RANK_VARIABLE = "engine_service_rank"

# A rank's fabric address is the first link the fabric role plans for the host:
# roce_fabric_address, or the first of roce_fabric_links when those are given.
ADDRESS_VARIABLE = "the fabric address (roce_fabric_address, or the first of roce_fabric_links)"

MIN_PORT = 1

MAX_PORT = 65535

_DIGEST_PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# Options rendered from a setting, in argv order after the parallel layout.
# (setting, flag, kind): "value" renders "flag value", "json" renders compact
# JSON, "switch" renders the flag or its --no- form.
_TUNING_OPTIONS = (
    ("max_model_len", "--max-model-len", "value"),
    ("kv_cache_dtype", "--kv-cache-dtype", "value"),
    ("block_size", "--block-size", "value"),
    ("enable_prefix_caching", "--enable-prefix-caching", "switch"),
    ("max_num_seqs", "--max-num-seqs", "value"),
    ("max_num_batched_tokens", "--max-num-batched-tokens", "value"),
    ("max_cudagraph_capture_size", "--max-cudagraph-capture-size", "value"),
    ("compilation_config", "--compilation-config", "json"),
    ("speculative_config", "--speculative-config", "json"),
    ("attention_backend", "--attention-backend", "value"),
    ("moe_backend", "--moe-backend", "value"),
    ("gpu_memory_utilization", "--gpu-memory-utilization", "value"),
    ("async_scheduling", "--async-scheduling", "switch"),
    ("enable_chunked_prefill", "--enable-chunked-prefill", "switch"),
)

# Every flag the collection renders or decides on, with the variable that
# owns it. vLLM reads "_" in flag names as "-", knows "--no-" forms of its
# switches and short aliases, so extra_args are compared in that form.
MANAGED_FLAGS = {
    "--model": "model",
    "--served-model-name": "served_model_name",
    "--tensor-parallel-size": "tensor_parallel_size",
    "-tp": "tensor_parallel_size",
    "--nnodes": "tensor_parallel_size",
    "--node-rank": "rank",
    "--master-addr": "rank",
    "--master-port": "master_port",
    "--headless": "rank",
    "--host": "api_port",
    "--port": "api_port",
    "--cudagraph-capture-sizes": "max_cudagraph_capture_size",
    "--cuda-graph-sizes": "max_cudagraph_capture_size",
    "-O": "compilation_config",
    "-cc": "compilation_config",
}

for _setting, _flag, _kind in _TUNING_OPTIONS:
    MANAGED_FLAGS[_flag] = _setting
    if _kind == "switch":
        MANAGED_FLAGS["--no-" + _flag[2:]] = _setting

# Keys of compilation_config that would fight the capture size this
# collection computes and renders as its own flag.
_CAPTURE_SIZE_KEYS = ("max_cudagraph_capture_size", "cudagraph_capture_sizes")

_REQUIRED = ("tensor_parallel_size", "model", "image", "max_num_seqs", "master_port", "api_port")


class EngineConfigError(ValueError):
    """Raised when an argv or exec line cannot be rendered from the input."""


# Settings checked here that another role owns or that are not prefixed.
_OTHER_VARIABLES = {"rank": RANK_VARIABLE, "nccl_extra_env": "roce_fabric_nccl_extra_env"}


def _variable(setting):
    return _OTHER_VARIABLES.get(setting, VARIABLE_PREFIX + setting)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_positive_int(value):
    return _is_int(value) and value >= 1


def _present(settings, key):
    return settings.get(key) is not None


def _speculative_tokens(settings):
    """Number of speculative tokens, 0 without speculation, None when unreadable."""
    config = settings.get("speculative_config")
    if not config:
        return 0
    if not isinstance(config, dict):
        return None
    tokens = config.get("num_speculative_tokens")
    return tokens if _is_positive_int(tokens) else None


def _render_json(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)


def _kind(value):
    """What a value is, in the words of a message (never the value itself)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return "a %s" % type(value).__name__
