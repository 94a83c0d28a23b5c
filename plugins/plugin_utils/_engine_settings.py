# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine settings, one declared row each (SETTINGS), and the vocabulary the checks
and the command lines share: the inventory variable of each setting, the vLLM flags the
collection renders and owns (MANAGED_FLAGS), and the error the filters raise.

Everything else about a setting is derived from its row: the generic type, range and
choice checks (setting_problem), the argv order and flags (_engine_argv), the settings
map of the role (the engine_settings lookup), and the engine settings blocks of the
role's defaults/main.yml and meta/argument_specs.yml (tools/engine-settings writes them,
a unit test keeps them equal).
"""

from __future__ import annotations

import copy
import json
import re
from collections import namedtuple

VARIABLE_PREFIX = "engine_service_"

RANK_VARIABLE = "engine_service_rank"

# A rank's fabric address is the one the fabric role exports for the host
# (roce_fabric_node_address, _fabric_address.py); messages name the inventory
# variables it comes from, which are what a person sets.
ADDRESS_VARIABLE = "the fabric address (roce_fabric_address, or the first of roce_fabric_links)"

MIN_PORT = 1

MAX_PORT = 65535

_DIGEST_PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# One engine setting. kind: "int", "float", "str", "bool", "json" (a mapping
# rendered as compact JSON) or "list" (checked by its own rule). render: how
# rank_argv renders it: "value" ("flag value"), "switch" (the flag or its
# --no- form), "json" (flag and compact JSON), in the order of the rows after
# the parallel layout; "layout" for the flags of the parallel layout, which
# rank_argv places itself; None for a setting without a flag. minimum,
# maximum (inclusive) and above (exclusive) bound a number; choices list the
# values a setting takes. required: null is refused. unset: what null does,
# for a setting that may be null ("to omit the option"). aliases: other
# flags vLLM reads for the same setting, refused in extra_args. spec: further
# keys of the argument spec (elements, options, no_log). doc: the argument
# spec's description, one string or a list of paragraphs.
Setting = namedtuple(
    "Setting",
    "name kind default doc flag render minimum maximum above choices required unset aliases spec",
    defaults=(None, None, None, None, None, None, False, None, (), None),
)

OMIT = "to omit the option"

VLLM_DEFAULT = "for vLLM's default"

SETTINGS = (
    Setting("tensor_parallel_size", "int", 4, flag="--tensor-parallel-size", render="layout", minimum=1, required=True,
            aliases=("-tp", "--nnodes"),
            doc="Tensor-parallel size (a positive integer); times O(engine_service_replicas) it must equal the number of "
                "engine hosts."),
    Setting("replicas", "int", 1, minimum=1, doc="Replicas of the tensor-parallel group (a positive integer)."),
    Setting("master_port", "int", 29501, flag="--master-port", render="layout", minimum=MIN_PORT, maximum=MAX_PORT,
            required=True, doc="TCP port of the rendezvous on the head, 1-65535, not O(engine_service_api_port)."),
    Setting("api_port", "int", 8000, flag="--port", render="layout", minimum=MIN_PORT, maximum=MAX_PORT, required=True,
            aliases=("--host",), doc="TCP port of the OpenAI-compatible API on the head, 1-65535."),
    Setting("image", "str", "{{ engine_image_ref | default(omit) }}", required=True,
            doc=["The digest-pinned reference the ranks' image came from (V(name@sha256:<64 hex>)); the units run the "
                 "image the engine_image role put on the node (C(engine_image_id))."]),
    Setting("model", "str", "/models/DeepSeek-V4-Flash-0731", render="layout", required=True, aliases=("--model",),
            doc="The model vLLM serves, as an absolute path inside the container (where O(engine_service_model_source) "
                "is mounted)."),
    Setting("served_model_name", "str", "deepseek-v4-flash", flag="--served-model-name", render="layout", unset=OMIT,
            doc="Model name the API serves and the smoke completion asks for."),
    Setting("max_model_len", "int", 1048576, flag="--max-model-len", render="value", minimum=1, unset=OMIT,
            doc="C(--max-model-len), a positive integer; null leaves the flag out."),
    Setting("kv_cache_dtype", "str", "fp8", flag="--kv-cache-dtype", render="value", unset=OMIT,
            doc="C(--kv-cache-dtype); null leaves the flag out."),
    Setting("block_size", "int", 256, flag="--block-size", render="value", minimum=1, unset=OMIT,
            doc="C(--block-size), a positive integer; null leaves the flag out."),
    Setting("enable_prefix_caching", "bool", True, flag="--enable-prefix-caching", render="switch", unset=VLLM_DEFAULT,
            doc="C(--enable-prefix-caching) (true) or C(--no-enable-prefix-caching) (false); null leaves the flag out."),
    Setting("max_num_seqs", "int", 16, flag="--max-num-seqs", render="value", minimum=1, maximum=1024, required=True,
            doc="C(--max-num-seqs), 1-1024; it bounds the decode batch and the CUDA graph capture size."),
    Setting("max_num_batched_tokens", "int", 8192, flag="--max-num-batched-tokens", render="value", minimum=1,
            unset=OMIT, doc="C(--max-num-batched-tokens), a positive integer; null leaves the flag out."),
    Setting("max_cudagraph_capture_size", "int", None, flag="--max-cudagraph-capture-size", render="value", minimum=1,
            unset="for the default", aliases=("--cudagraph-capture-sizes", "--cuda-graph-sizes"),
            doc=["C(--max-cudagraph-capture-size). Unset (null, the default), the full decode batch, "
                 "O(engine_service_max_num_seqs) x (1 + C(num_speculative_tokens)).",
                 "A smaller value is refused unless O(engine_service_allow_small_cudagraph_capture_size); a value that "
                 "is not a multiple of 1 + C(num_speculative_tokens) is refused."]),
    Setting("allow_small_cudagraph_capture_size", "bool", False,
            doc="Accept an O(engine_service_max_cudagraph_capture_size) below the full decode batch."),
    Setting("compilation_config", "json", {"cudagraph_mode": "FULL_AND_PIECEWISE", "custom_ops": ["all"]},
            flag="--compilation-config", render="json", unset=OMIT, aliases=("-O", "-cc"),
            doc=["C(--compilation-config), a mapping given as YAML and rendered to JSON (a JSON string is refused); "
                 "null leaves the flag out.",
                 "May not set C(max_cudagraph_capture_size) or C(cudagraph_capture_sizes); use "
                 "O(engine_service_max_cudagraph_capture_size)."]),
    Setting("speculative_config", "json",
            {"method": "dspark", "num_speculative_tokens": 3, "draft_sample_method": "probabilistic"},
            flag="--speculative-config", render="json", unset=OMIT,
            doc=["C(--speculative-config), a mapping given as YAML and rendered to JSON (a JSON string is refused), "
                 "with C(num_speculative_tokens) of 1 or more; empty or null for no speculation."]),
    Setting("attention_backend", "str", "FLASHINFER_MLA_SPARSE_DSV4", flag="--attention-backend", render="value",
            unset=OMIT, doc="C(--attention-backend); null leaves the flag out."),
    Setting("moe_backend", "str", "b12x", flag="--moe-backend", render="value", unset=OMIT,
            doc="C(--moe-backend); null leaves the flag out."),
    Setting("gpu_memory_utilization", "float", 0.85, flag="--gpu-memory-utilization", render="value", above=0,
            maximum=1, unset=OMIT,
            doc="C(--gpu-memory-utilization), a fraction above 0 and at most 1; null leaves the flag out."),
    Setting("async_scheduling", "bool", True, flag="--async-scheduling", render="switch", unset=VLLM_DEFAULT,
            doc="C(--async-scheduling) (true) or C(--no-async-scheduling) (false); null leaves the flag out."),
    Setting("enable_chunked_prefill", "bool", True, flag="--enable-chunked-prefill", render="switch",
            unset=VLLM_DEFAULT,
            doc="C(--enable-chunked-prefill) (true) or C(--no-enable-chunked-prefill) (false); null leaves the flag "
                "out."),
    Setting("extra_args", "list", ["--disable-custom-all-reduce", "--no-scheduler-reserve-full-isl"],
            spec={"elements": "str"},
            doc="Further vLLM arguments, one per item; a flag the role renders from a setting above is refused."),
    Setting("patches", "list", [],
            spec={"elements": "dict", "options": {
                "src": {"type": "str", "required": True,
                        "description": "The file on the controller, absolute or relative to the playbook."},
                "dest": {"type": "str", "required": True, "description": "Absolute path of the file inside the container."},
                "sha256": {"type": "str", "required": True,
                           "description": "sha256 of the file on the controller, 64 lowercase hex digits."},
            }},
            doc=["Files bind-mounted read-only over the image's, each checked by its sha256 on the controller before "
                 "anything changes and on the node before every start.",
                 "For example the DSpark shared_experts.gate_up_proj fix: C(src: files/dspark.py), C(dest: "
                 "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/dspark.py), C(sha256:) the "
                 "sha256sum of C(files/dspark.py)."]),
    # 300: below the fastest real start the field report measured (6 minutes), so a
    # shorter timeout would kill every start it waits for.
    Setting("start_timeout", "int", 1500, minimum=300,
            doc="Seconds from the coordinated start until the head must answer a checked completion (300 or "
                "more); a DeepSeek-V4-Flash TP=4 start takes 6 to 9 minutes."),
    # Its own bound: a new version may need longer than engine_service_start_timeout's
    # usual start (a first compile), the version that served before does not.
    Setting("rollback_timeout", "int", 900, minimum=300,
            doc="Seconds from the start of the rollback after a failed start until the version that served before "
                "must answer a checked completion again (300 or more), apart from O(engine_service_start_timeout)."),
    Setting("stop_timeout", "int", 10, minimum=0,
            doc="Seconds a rank gets to exit after SIGTERM before it is killed. A rank holds no state worth waiting "
                "for; the stop is part of every restart's serving gap."),
)

SETTINGS_BY_NAME = {setting.name: setting for setting in SETTINGS}

# Options rendered from a setting, in argv order after the parallel layout.
_TUNING_OPTIONS = tuple(setting for setting in SETTINGS if setting.render in ("value", "switch", "json"))

_REQUIRED = tuple(setting.name for setting in SETTINGS if setting.required)

# Flags of the parallel layout that come from the host's rank, not a setting.
_RANK_FLAGS = ("--node-rank", "--master-addr", "--headless")
# The head's API guard (_engine_argv.GUARD_MIDDLEWARE), always on.
GUARD_OWNER = "api_guard"


def _managed_flags():
    flags = {flag: "rank" for flag in _RANK_FLAGS}
    flags["--middleware"] = GUARD_OWNER
    for setting in SETTINGS:
        for flag in ((setting.flag,) if setting.flag else ()) + tuple(setting.aliases):
            flags[flag] = setting.name
        if setting.render == "switch":
            flags["--no-" + setting.flag[2:]] = setting.name
    return flags


# Every flag the collection renders or decides on, with the setting that
# owns it. vLLM reads "_" in flag names as "-", knows "--no-" forms of its
# switches and short aliases, so extra_args are compared in that form.
MANAGED_FLAGS = _managed_flags()

# Keys of compilation_config that would fight the capture size this
# collection computes and renders as its own flag.
_CAPTURE_SIZE_KEYS = ("max_cudagraph_capture_size", "cudagraph_capture_sizes")


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


def _number_text(number):
    return "%g" % number


def expectation(setting):
    """What a setting takes, in the words of a message and the settings table: C("a positive integer")."""
    if setting.choices:
        return "one of %s" % ", ".join(str(choice) for choice in setting.choices)
    if setting.kind == "bool":
        return "true or false"
    if setting.kind == "str":
        return "a non-empty string"
    if setting.kind == "json":
        return "a mapping"
    if setting.kind == "list":
        return "a list"
    noun = "an integer" if setting.kind == "int" else "a number"
    if setting.kind == "int" and setting.minimum == 1 and setting.maximum is None:
        return "a positive integer"
    if setting.minimum is not None and setting.maximum is not None:
        return "%s from %s to %s" % (noun, _number_text(setting.minimum), _number_text(setting.maximum))
    bounds = []
    if setting.above is not None:
        bounds.append("above %s" % _number_text(setting.above))
    if setting.minimum is not None:
        bounds.append("of %s or more" % _number_text(setting.minimum))
    if setting.maximum is not None:
        bounds.append("at most %s" % _number_text(setting.maximum))
    return " ".join([noun] + [" and ".join(bounds)] if bounds else [noun])


def _fits(setting, value):
    if setting.choices:
        return value in setting.choices and type(value) in (type(choice) for choice in setting.choices)
    if setting.kind == "bool":
        return isinstance(value, bool)
    if setting.kind == "str":
        return isinstance(value, str) and bool(value.strip())
    if setting.kind == "int":
        if not _is_int(value):
            return False
    elif setting.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
    else:
        raise ValueError("setting %s of kind %s has no scalar check" % (setting.name, setting.kind))
    return ((setting.minimum is None or value >= setting.minimum)
            and (setting.maximum is None or value <= setting.maximum)
            and (setting.above is None or value > setting.above))


def setting_problem(setting, value):
    """The problem of a scalar setting's O(value) by its row (type, range, choices), or None.

    Null is a problem only for a required setting ("is not set"); the
    message names the variable, the value found and what the row takes.
    """
    name = _variable(setting.name)
    if value is None:
        return "%s is not set" % name if setting.required else None
    if _fits(setting, value):
        return None
    fix = "; leave it unset %s" % setting.unset if setting.unset else ""
    return "%s %r is not %s%s" % (name, value, expectation(setting), fix)


def read_settings(variables, template, host_vars=None, names=None):
    """The settings O(names) (every row when None), without their prefix, as one mapping.

    Read from O(variables) (a play's, the role's defaults among them) through
    O(template), failing for a setting without a variable rather than leaving
    it out; or, given O(host_vars) (C(hostvars[host]), which templates what it
    returns), from a host's variables, a setting the host leaves out taking
    its row's default, which must then be a plain value.
    """
    unknown = [name for name in names or () if name not in SETTINGS_BY_NAME]
    if unknown:
        raise EngineConfigError("%s is not an engine setting" % ", ".join(unknown))
    settings = SETTINGS if names is None else [SETTINGS_BY_NAME[name] for name in names]
    if host_vars is not None:
        values = {}
        for setting in settings:
            name = VARIABLE_PREFIX + setting.name
            if name in host_vars:
                values[setting.name] = host_vars[name]
            elif isinstance(setting.default, str) and "{{" in setting.default:
                raise EngineConfigError(
                    "%s is not set for the host and its default is a template, which only the engine_service "
                    "role's play can template" % name
                )
            else:
                values[setting.name] = copy.deepcopy(setting.default)
        return values
    missing = [VARIABLE_PREFIX + setting.name for setting in settings if VARIABLE_PREFIX + setting.name not in variables]
    if missing:
        raise EngineConfigError(
            "%s %s not defined; every engine setting needs its variable (roles/engine_service/defaults/main.yml "
            "defines them all, written by tools/engine-settings)"
            % (" and ".join(missing), "is" if len(missing) == 1 else "are")
        )
    return template({setting.name: variables[VARIABLE_PREFIX + setting.name] for setting in settings})
