# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine configuration: checks of the inventory, the vLLM command line
of every rank, and its quoting for a systemd ExecStart= line.

Every rank runs ``vllm serve <model>`` on its own node with the same engine
settings; ranks above a replica's head add ``--headless``. The JSON
arguments are rendered here, once, and quoted for systemd so that they reach
vLLM exactly as rendered, with no shell in between.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import posixpath
import re

VARIABLE_PREFIX = "engine_service_"
RANK_VARIABLE = "engine_service_rank"
ADDRESS_VARIABLE = "roce_fabric_address"

API_HOST = "0.0.0.0"
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


def _json_setting_problems(settings, key):
    value = settings.get(key)
    name = _variable(key)
    if value is None:
        return []
    if isinstance(value, str):
        return ["%s is a string; give it as YAML, the collection renders the JSON" % name]
    if not isinstance(value, dict):
        return ["%s must be a mapping, not %s; give it as YAML" % (name, type(value).__name__)]
    try:
        _render_json(value)
    except (TypeError, ValueError) as exc:
        return ["%s cannot be rendered as JSON (%s); give plain YAML values" % (name, exc)]
    return []


def _capture_size_problems(settings):
    problems = []
    arithmetic_possible = True
    seqs = settings.get("max_num_seqs")
    if seqs is None:
        problems.append("%s is not set; it bounds the decode batch and the CUDA graph capture size" % _variable("max_num_seqs"))
        arithmetic_possible = False
    elif not _is_positive_int(seqs):
        problems.append("%s %r is not a positive integer" % (_variable("max_num_seqs"), seqs))
        arithmetic_possible = False

    speculative_problems = _json_setting_problems(settings, "speculative_config")
    problems.extend(speculative_problems)
    speculative = settings.get("speculative_config")
    if speculative_problems:
        arithmetic_possible = False
    elif speculative:
        tokens = speculative.get("num_speculative_tokens")
        if tokens is None:
            problems.append(
                "%s has no num_speculative_tokens; set it (an integer, 1 or more): the capture size depends on it"
                % _variable("speculative_config")
            )
            arithmetic_possible = False
        elif not _is_positive_int(tokens):
            problems.append(
                "%s num_speculative_tokens %r is not an integer of 1 or more" % (_variable("speculative_config"), tokens)
            )
            arithmetic_possible = False

    compilation = settings.get("compilation_config")
    if isinstance(compilation, dict):
        for key in _CAPTURE_SIZE_KEYS:
            if key in compilation:
                problems.append(
                    "%s sets %s; remove it and set %s, which the collection checks against the decode batch"
                    % (_variable("compilation_config"), key, _variable("max_cudagraph_capture_size"))
                )

    allow_small = settings.get("allow_small_cudagraph_capture_size")
    if allow_small is not None and not isinstance(allow_small, bool):
        problems.append("%s %r is not true or false" % (_variable("allow_small_cudagraph_capture_size"), allow_small))

    explicit = settings.get("max_cudagraph_capture_size")
    if explicit is None:
        return problems
    name = _variable("max_cudagraph_capture_size")
    if not _is_positive_int(explicit):
        problems.append("%s %r is not a positive integer; leave it unset for the default" % (name, explicit))
        return problems
    if not arithmetic_possible:
        return problems

    tokens = _speculative_tokens(settings)
    step = 1 + tokens
    full_batch = seqs * step
    if explicit < full_batch and allow_small is not True:
        if tokens:
            arithmetic = "%s %d x (1 + %d speculative tokens) = %d" % (_variable("max_num_seqs"), seqs, tokens, full_batch)
        else:
            arithmetic = "%s %d (no speculation)" % (_variable("max_num_seqs"), seqs)
        problems.append(
            "%s %d is below the full decode batch of %s: CUDA graphs then cover only %d of %d concurrent requests, "
            "and every decode step beyond them falls out of CUDA graphs into eager mode, losing most of its speed; "
            "leave it unset (default %d) or set %s: true to accept that"
            % (name, explicit, arithmetic, explicit // step, seqs, full_batch, _variable("allow_small_cudagraph_capture_size"))
        )
    if explicit % step:
        lower = explicit // step * step
        choices = "%d or %d" % (lower, lower + step) if lower else "%d" % (lower + step)
        problems.append(
            "%s %d is not a multiple of 1 + %d speculative tokens = %d; vLLM would silently round it down to %d; use %s"
            % (name, explicit, tokens, step, lower, choices)
        )
    return problems


def _port_problems(settings):
    problems = []
    ports = {}
    for key in ("master_port", "api_port"):
        value = settings.get(key)
        if value is None:
            continue
        if not _is_int(value) or not MIN_PORT <= value <= MAX_PORT:
            problems.append("%s %r is not a port (%d-%d)" % (_variable(key), value, MIN_PORT, MAX_PORT))
        else:
            ports[key] = value
    if len(ports) == 2 and ports["master_port"] == ports["api_port"]:
        problems.append(
            "%s and %s are both %d; the rendezvous and the API need different ports"
            % (_variable("master_port"), _variable("api_port"), ports["api_port"])
        )
    return problems


def _flag_name(argument):
    if not argument.startswith("-") or argument == "-" or _looks_numeric(argument):
        return None
    name = argument.split("=", 1)[0]
    dashes = "--" if name.startswith("--") else "-"
    name = dashes + name[len(dashes):].replace("_", "-")
    # Dotted forms (--compilation-config.mode=3, -O.mode=3) set one key of a JSON option.
    base = name.split(".", 1)[0]
    if dashes == "-" and base.startswith("-O"):
        return "-O"
    return base


def _looks_numeric(argument):
    try:
        float(argument)
    except ValueError:
        return False
    return True


def _extra_args_problems(settings):
    extra = settings.get("extra_args")
    name = _variable("extra_args")
    if extra is None:
        return []
    if not isinstance(extra, list):
        return ["%s must be a list of strings, one argument per item" % name]
    problems = []
    for position, argument in enumerate(extra):
        if not isinstance(argument, str):
            problems.append("%s[%d] %r is not a string; quote it in YAML" % (name, position, argument))
            continue
        flag = _flag_name(argument)
        if flag in MANAGED_FLAGS:
            owner = MANAGED_FLAGS[flag]
            problems.append(
                "%s[%d] %r repeats %s, which the collection renders from %s; set that variable instead"
                % (name, position, argument, flag, _variable(owner))
            )
    return problems


def _patch_problems(settings):
    patches = settings.get("patches")
    name = _variable("patches")
    if patches is None:
        return []
    if not isinstance(patches, list):
        return ["%s must be a list of {src, dest, sha256}" % name]
    problems = []
    destinations = {}
    for position, patch in enumerate(patches):
        where = "%s[%d]" % (name, position)
        if not isinstance(patch, dict):
            problems.append("%s is not a mapping of src, dest and sha256" % where)
            continue
        src, dest, digest = patch.get("src"), patch.get("dest"), patch.get("sha256")
        if not isinstance(src, str) or not src:
            problems.append("%s has no src; give the patched file on the controller" % where)
        if not isinstance(dest, str) or not posixpath.isabs(dest):
            problems.append("%s dest %r is not an absolute path inside the container" % (where, dest))
        else:
            destinations.setdefault(posixpath.normpath(dest), []).append(position)
        if not isinstance(digest, str) or not _SHA256.match(digest):
            problems.append(
                "%s sha256 %r is not a sha256 digest; give the 64 lowercase hex digits sha256sum prints for src"
                % (where, digest)
            )
    for dest, positions in sorted(destinations.items()):
        if len(positions) > 1:
            problems.append(
                "%s %s all mount onto %s; give each destination one patch"
                % (name, " and ".join("[%d]" % p for p in positions), dest)
            )
    return problems


def _settings_problems(settings):
    problems = []
    for key in _REQUIRED:
        if key != "max_num_seqs" and not _present(settings, key):
            problems.append("%s is not set" % _variable(key))

    for key in ("tensor_parallel_size", "replicas"):
        value = settings.get(key)
        if value is not None and not _is_positive_int(value):
            problems.append("%s %r is not a positive integer" % (_variable(key), value))

    model = settings.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        problems.append("%s %r is not a Hugging Face model id or a path inside the container" % (_variable("model"), model))

    image = settings.get("image")
    if image is not None and (not isinstance(image, str) or not _DIGEST_PINNED.match(image)):
        problems.append(
            "%s %r is not pinned by digest; pin it as name@sha256:<64 hex digits> so every node runs the same build"
            % (_variable("image"), image)
        )

    for key in ("served_model_name", "kv_cache_dtype", "attention_backend", "moe_backend"):
        value = settings.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            problems.append("%s %r is not a non-empty string; leave it unset to omit the option" % (_variable(key), value))

    for key in ("max_model_len", "block_size", "max_num_batched_tokens"):
        value = settings.get(key)
        if value is not None and not _is_positive_int(value):
            problems.append("%s %r is not a positive integer; leave it unset to omit the option" % (_variable(key), value))

    for key in ("enable_prefix_caching", "async_scheduling", "enable_chunked_prefill"):
        value = settings.get(key)
        if value is not None and not isinstance(value, bool):
            problems.append("%s %r is not true or false; leave it unset for vLLM's default" % (_variable(key), value))

    utilization = settings.get("gpu_memory_utilization")
    if utilization is not None and (
        isinstance(utilization, bool) or not isinstance(utilization, (int, float)) or not 0 < utilization <= 1
    ):
        problems.append(
            "%s %r is not a fraction above 0 and at most 1" % (_variable("gpu_memory_utilization"), utilization)
        )

    problems.extend(_json_setting_problems(settings, "compilation_config"))
    problems.extend(_capture_size_problems(settings))
    problems.extend(_port_problems(settings))
    problems.extend(_extra_args_problems(settings))
    problems.extend(_patch_problems(settings))
    return problems


def _rank_problems(hosts, ranks_expected):
    problems = []
    holders = {}
    for host in sorted(hosts):
        rank = hosts[host].get("rank")
        if rank is None:
            problems.append("%s: %s is not set; give every engine host its rank (0 is the head)" % (host, RANK_VARIABLE))
        elif not _is_int(rank):
            problems.append("%s: %s %r is not an integer" % (host, RANK_VARIABLE, rank))
        elif not 0 <= rank < ranks_expected:
            problems.append(
                "%s: %s %d is outside 0-%d; the %d engine hosts take ranks 0 to %d"
                % (host, RANK_VARIABLE, rank, ranks_expected - 1, ranks_expected, ranks_expected - 1)
            )
            holders.setdefault(rank, []).append(host)
        else:
            holders.setdefault(rank, []).append(host)
    for rank, owners in sorted(holders.items()):
        if len(owners) > 1:
            problems.append(
                "%s %d is given to %s; every engine host needs its own rank" % (RANK_VARIABLE, rank, " and ".join(owners))
            )
    if not any(hosts[host].get("rank") is None or not _is_int(hosts[host].get("rank")) for host in hosts):
        missing = sorted(set(range(ranks_expected)) - set(holders))
        if missing:
            problems.append(
                "%s leaves rank%s %s without a host; ranks run from 0 to %d without gaps"
                % (RANK_VARIABLE, "s" if len(missing) > 1 else "", ", ".join(str(r) for r in missing), ranks_expected - 1)
            )
    return problems


def _address_problems(hosts):
    problems = []
    owners = {}
    for host in sorted(hosts):
        address = hosts[host].get("fabric_address")
        if address in (None, ""):
            problems.append(
                "%s: %s is not set; every engine rank reaches the others at its fabric address" % (host, ADDRESS_VARIABLE)
            )
            continue
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            problems.append("%s: %s %r is not an IP address" % (host, ADDRESS_VARIABLE, address))
            continue
        owners.setdefault(parsed, []).append(host)
    for address, users in sorted(owners.items()):
        if len(users) > 1:
            problems.append(
                "%s %s is used by %s; every engine host needs its own address" % (ADDRESS_VARIABLE, address, " and ".join(users))
            )
    return problems


def engine_config_problems(cluster):
    """Return readable problems with the engine configuration, empty when sound.

    O(cluster) is C({"hosts": {name: {"rank": int, "fabric_address": str}},
    "settings": {...}}) where the settings are the role variables without
    their C(engine_service_) prefix. Each problem names the host (when it is
    about one host) and the inventory variable, and says the fix.

    The container and environment settings (CONTAINER_SETTINGS) can differ
    from host to host: a host's C(container_problems), what
    engine_container_problems() found in that host's own settings, stands for
    them; a host without it is judged on the container settings of
    O(cluster.settings). Each such problem is named once, after the hosts that
    have it.
    """
    if not isinstance(cluster, dict):
        raise EngineConfigError("engine_config_problems needs a mapping with hosts and settings")
    hosts = {} if cluster.get("hosts") is None else cluster["hosts"]
    settings = {} if cluster.get("settings") is None else cluster["settings"]
    if not isinstance(hosts, dict) or not isinstance(settings, dict):
        raise EngineConfigError("engine_config_problems needs hosts and settings as mappings")
    for host, facts in hosts.items():
        if not isinstance(facts, dict):
            raise EngineConfigError("engine host %s needs a mapping of rank and fabric_address" % host)

    problems = _settings_problems(settings)
    problems.extend(_hosts_container_problems(hosts, settings))
    if not hosts:
        return problems + ["the engine group has no hosts; add the nodes that run the engine ranks"]

    tensor_parallel = settings.get("tensor_parallel_size")
    replicas = 1 if settings.get("replicas") is None else settings.get("replicas")
    if _is_positive_int(tensor_parallel) and _is_positive_int(replicas) and tensor_parallel * replicas != len(hosts):
        problems.append(
            "%s %d x %s %d = %d ranks, but the engine group has %d host%s; one rank runs per host, "
            "so change the sizes or the hosts in the group"
            % (
                _variable("tensor_parallel_size"), tensor_parallel, _variable("replicas"), replicas,
                tensor_parallel * replicas, len(hosts), "" if len(hosts) == 1 else "s",
            )
        )
    problems.extend(_rank_problems(hosts, len(hosts)))
    problems.extend(_address_problems(hosts))
    return problems


def effective_cudagraph_capture_size(settings):
    """The capture size to render: the explicit setting, else the full decode batch.

    The full decode batch is C(max_num_seqs × (1 + num_speculative_tokens)),
    C(max_num_seqs) without speculation.
    """
    if not isinstance(settings, dict):
        raise EngineConfigError("the engine settings must be a mapping")
    problems = _capture_size_problems(settings)
    if problems:
        raise EngineConfigError("; ".join(problems))
    explicit = settings.get("max_cudagraph_capture_size")
    if explicit is not None:
        return explicit
    return settings["max_num_seqs"] * (1 + _speculative_tokens(settings))


def replica_layout(settings, rank):
    """Where global O(rank) sits: its C(replica), C(node_rank) inside it and the replica's C(head_rank).

    Ranks run over all engine hosts; each replica takes
    C(tensor_parallel_size) consecutive ranks, one per node.
    """
    if not isinstance(settings, dict):
        raise EngineConfigError("the engine settings must be a mapping")
    tensor_parallel = settings.get("tensor_parallel_size")
    replicas = 1 if settings.get("replicas") is None else settings.get("replicas")
    if not _is_positive_int(tensor_parallel) or not _is_positive_int(replicas):
        raise EngineConfigError(
            "%s and %s must be positive integers" % (_variable("tensor_parallel_size"), _variable("replicas"))
        )
    if not _is_int(rank) or not 0 <= rank < tensor_parallel * replicas:
        raise EngineConfigError(
            "rank %r is outside 0-%d (%s x %s)"
            % (rank, tensor_parallel * replicas - 1, _variable("tensor_parallel_size"), _variable("replicas"))
        )
    replica, node_rank = divmod(rank, tensor_parallel)
    return {"replica": replica, "node_rank": node_rank, "head_rank": replica * tensor_parallel}


def _option_arguments(flag, kind, value):
    if kind == "switch":
        return [flag if value else "--no-" + flag[2:]]
    if kind == "json":
        return [flag, _render_json(value)]
    return [flag, str(value)]


def rank_argv(settings, rank, master_address):
    """The arguments after the C(vllm) program for global O(rank).

    Starts with C(["serve", model]). The replica's head (node rank 0) serves
    the API on all addresses; the other ranks run headless. Options whose
    setting is C(None) are left out; JSON options are compact with sorted keys
    so the rendered unit only changes when a setting does.
    """
    if not isinstance(settings, dict):
        raise EngineConfigError("the engine settings must be a mapping")
    problems = _settings_problems(settings)
    if problems:
        raise EngineConfigError("; ".join(problems))
    if not isinstance(master_address, str) or not master_address.strip():
        raise EngineConfigError("the master address %r is not an address" % (master_address,))
    layout = replica_layout(settings, rank)
    tensor_parallel = settings["tensor_parallel_size"]

    argv = ["serve", settings["model"]]
    if _present(settings, "served_model_name"):
        argv += ["--served-model-name", settings["served_model_name"]]
    argv += [
        "--tensor-parallel-size", str(tensor_parallel),
        "--nnodes", str(tensor_parallel),
        "--node-rank", str(layout["node_rank"]),
        "--master-addr", master_address,
        "--master-port", str(settings["master_port"]),
    ]
    if layout["node_rank"]:
        argv.append("--headless")
    else:
        argv += ["--host", API_HOST, "--port", str(settings["api_port"])]

    values = dict(settings, max_cudagraph_capture_size=effective_cudagraph_capture_size(settings))
    for key in ("compilation_config", "speculative_config"):
        if not values.get(key):
            values[key] = None
    for key, flag, kind in _TUNING_OPTIONS:
        if values.get(key) is not None:
            argv += _option_arguments(flag, kind, values[key])
    argv += list(settings.get("extra_args") or [])
    return argv


# systemd unquotes an ExecStart= word with C escapes, then expands "%"
# specifiers, then "$" variables at start; these undo all three.
_SYSTEMD_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "%": "%%",
    "$": "$$",
}
_SYSTEMD_UNESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
                      "\\": "\\", '"': '"', "'": "'", "s": " "}
_SYSTEMD_WHITESPACE = " \t\n\r"
_PROGRAM_PREFIXES = "-@:+!|"


def _systemd_word(argument, position):
    if not isinstance(argument, str):
        raise EngineConfigError("argument %d (%r) is not a string" % (position, argument))
    if "\0" in argument:
        raise EngineConfigError("argument %d contains a NUL character, which no command line can carry" % position)
    try:
        argument.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EngineConfigError("argument %d is not valid UTF-8 text (%s)" % (position, exc)) from exc
    quoted = []
    for char in argument:
        if char in _SYSTEMD_ESCAPES:
            quoted.append(_SYSTEMD_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            quoted.append("\\x%02x" % ord(char))
        else:
            quoted.append(char)
    return '"%s"' % "".join(quoted)


def systemd_exec_line(argv):
    """Quote O(argv) (program first) as the value of a systemd C(ExecStart=) line.

    Every argument is double-quoted with C(\\) and C(") backslash-escaped,
    control characters as C escapes, C(%) doubled against specifier expansion
    and C($) doubled against variable expansion, so systemd hands the process
    exactly O(argv).
    """
    if not isinstance(argv, (list, tuple)) or not argv:
        raise EngineConfigError("the command line must be a non-empty list of arguments")
    program = argv[0]
    if not isinstance(program, str) or not posixpath.isabs(program):
        raise EngineConfigError("the program %r is not an absolute path" % (program,))
    return " ".join(_systemd_word(argument, position) for position, argument in enumerate(argv))


def _unescape(line, index):
    """Decode the C escape whose letter is at O(index); return (text, next index)."""
    if index >= len(line):
        raise EngineConfigError("the line ends in a backslash")
    letter = line[index]
    if letter in _SYSTEMD_UNESCAPES:
        return _SYSTEMD_UNESCAPES[letter], index + 1
    digits = {"x": (16, 2), "u": (16, 4), "U": (16, 8)}.get(letter)
    start = index + 1
    if digits is None and letter in "01234567":
        digits, start = (8, 3), index
    if digits is None:
        raise EngineConfigError("unknown escape \\%s at column %d" % (letter, index))
    base, count = digits
    text = line[start:start + count]
    try:
        value = int(text, base) if len(text) == count else -1
    except ValueError:
        value = -1
    if value <= 0 or value > 0x10FFFF:
        raise EngineConfigError("bad escape \\%s%s at column %d" % (letter, text, index))
    return chr(value), start + count


def _expand_specifiers(word):
    out = []
    index = 0
    while index < len(word):
        char = word[index]
        if char != "%":
            out.append(char)
            index += 1
        elif word[index + 1:index + 2] == "%":
            out.append("%")
            index += 2
        else:
            raise EngineConfigError("%r holds a specifier systemd would expand" % word)
    return "".join(out)


def _expand_variables(word):
    out = []
    index = 0
    while index < len(word):
        char = word[index]
        if char != "$":
            out.append(char)
            index += 1
        elif word[index + 1:index + 2] == "$":
            out.append("$")
            index += 2
        else:
            raise EngineConfigError("%r holds a variable systemd would expand" % word)
    return "".join(out)


def parse_systemd_exec_line(line):
    """Split an C(ExecStart=) value the way systemd does, into the argv it runs.

    The inverse of systemd_exec_line(): words split on whitespace, single and
    double quotes, C escapes, C(%%) and C($$). A specifier, a variable, a
    lone C(;) (a command separator) or bad quoting raises EngineConfigError
    rather than being guessed at.
    """
    words = []
    index = 0
    while True:
        while index < len(line) and line[index] in _SYSTEMD_WHITESPACE:
            index += 1
        if index >= len(line):
            break
        rest_end = index + 1
        if line[index] == ";" and (rest_end == len(line) or line[rest_end] in _SYSTEMD_WHITESPACE):
            raise EngineConfigError("a lone ; at column %d separates commands" % index)
        if line.startswith("\\;", index) and (index + 2 == len(line) or line[index + 2] in _SYSTEMD_WHITESPACE):
            words.append(";")
            index += 2
            continue
        word = []
        quote = None
        while index < len(line):
            char = line[index]
            if quote is None and char in _SYSTEMD_WHITESPACE:
                break
            if char == "\\":
                text, index = _unescape(line, index + 1)
                word.append(text)
                continue
            if quote is None and char in "\"'":
                quote = char
            elif char == quote:
                quote = None
            else:
                word.append(char)
            index += 1
        if quote is not None:
            raise EngineConfigError("unbalanced %s quote in the line" % quote)
        words.append("".join(word))
    if not words:
        raise EngineConfigError("the line is empty")
    return [_expand_variables(_expand_specifiers(word)) for word in words]


# --- The rank's container and environment ------------------------------------

# The settings of the rank's container and environment, without their
# engine_service_ prefix (nccl_extra_env is roce_fabric_nccl_extra_env). They
# may differ from host to host, so they are judged per host.
CONTAINER_SETTINGS = (
    "container_gpus", "container_devices", "container_allowed_devices", "container_capabilities",
    "container_ulimits", "container_shm_size", "container_extra_args", "extra_mounts", "env", "nccl_extra_env",
)

# Node devices a rank may be given when engine_service_container_allowed_devices
# is not set: the RDMA devices of the ConnectX-7 (the collection passes the
# whole /dev/infiniband; uverbs* and rdma_cm are in it). The GPU comes through
# --gpus and the NVIDIA runtime, not --device.
DEFAULT_ALLOWED_DEVICES = ("/dev/infiniband", "/dev/infiniband/*")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CAPABILITY = re.compile(r"^[A-Za-z_]+$")
_ULIMIT_NAME = re.compile(r"^[a-z]+$")
_ULIMIT_VALUE = re.compile(r"^-?[0-9]+(:-?[0-9]+)?$")
_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)? ?[kKmMgGtTpP]?[iI]?[bB]?$")

# docker run options the collection renders for every rank: the variable each
# comes from, or what it always is.
_CONTAINER_OWNED_FLAGS = {
    "--name": "engine_service_container_name",
    "--gpus": "engine_service_container_gpus",
    "--device": "engine_service_container_devices",
    "--cap-add": "engine_service_container_capabilities",
    "--ulimit": "engine_service_container_ulimits",
    "--shm-size": "engine_service_container_shm_size",
    "--env-file": "engine_service_env",
    "--env": "engine_service_env",
    "-e": "engine_service_env",
    "--mount": "engine_service_extra_mounts",
    "--volume": "engine_service_extra_mounts",
    "-v": "engine_service_extra_mounts",
}
_CONTAINER_FIXED_FLAGS = {
    "--rm": "--rm on every rank",
    "--init": "--init on every rank",
    "--network": "--network host on every rank",
    "--net": "--network host on every rank",
    "--ipc": "--ipc host on every rank: vLLM's processes share the node's /dev/shm",
}
# Namespaces a rank must not share with the node: flag -> (name, what sharing does).
_HOST_NAMESPACE_FLAGS = {
    "--pid": ("PID", "it puts the container in the node's PID namespace, where it sees every process of the node "
                     "and can signal them"),
    "--uts": ("UTS", "it puts the container in the node's UTS namespace, where it can change the node's hostname"),
    "--userns": ("user", "it takes the container out of the daemon's user namespace remapping, so its root is the "
                         "node's root"),
    "--cgroupns": ("cgroup", "it puts the container in the node's cgroup namespace, where it sees the node's whole "
                             "cgroup tree"),
}
# --security-opt settings that lift the container's confinement.
_UNCONFINED = {
    ("seccomp", "unconfined"): "it turns off the container's seccomp filter, so every system call reaches the "
                               "node's kernel",
    ("apparmor", "unconfined"): "it runs the container without its AppArmor profile",
    ("label", "disable"): "it turns off the container's SELinux labels",
    ("systempaths", "unconfined"): "it unmasks the kernel paths under /proc and /sys that Docker hides from "
                                   "containers",
}
# Options followed by their value as the next argument when not given as --flag=value.
_VALUE_FLAGS = frozenset(
    set(_CONTAINER_OWNED_FLAGS) | {"--network", "--net", "--ipc", "--security-opt", "--device-cgroup-rule"}
    | set(_HOST_NAMESPACE_FLAGS)
)
_FALSE_WORDS = ("0", "f", "false")
# Bind-mount sources that hand the container the node itself.
_ROOT_EQUIVALENT_SOURCES = {
    "/": "the node's whole filesystem",
    "/var/run/docker.sock": "the node's Docker daemon, as good as root on the node",
    "/run/docker.sock": "the node's Docker daemon, as good as root on the node",
    "/run/containerd/containerd.sock": "the node's containerd, as good as root on the node",
    "/var/run/containerd/containerd.sock": "the node's containerd, as good as root on the node",
    "/run": "the node's /run, with the Docker and containerd sockets in it, as good as root on the node",
    "/var/run": "the node's /run, with the Docker and containerd sockets in it, as good as root on the node",
}
_MOUNT_KEYS = ("src", "dest", "readonly")

# Environment variables the collection sets itself: the reason, or the
# variable they are set from.
_ENV_SET_BY_COLLECTION = {
    "VLLM_HOST_IP": "each rank's own fabric address, roce_fabric_address",
    "NCCL_IB_GID_INDEX": "resolved from the fabric address at every start of the rank",
    "NCCL_IB_HCA": "the HCAs of the fabric links with carrier, from roce_fabric_links",
    "NCCL_SOCKET_IFNAME": "the netdev of the first fabric link with carrier, from roce_fabric_links",
    "GLOO_SOCKET_IFNAME": "the netdev of the first fabric link with carrier, from roce_fabric_links",
}
_ENV_FROM_BASE = ("NCCL_NET", "NCCL_IB_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE")
# Secrets with a vaulted variable of their own: where they belong.
_SECRET_HOMES = {
    "VLLM_API_KEY": "the API key in engine_service_api_key, vault-encrypted (it reaches vLLM as VLLM_API_KEY "
                    "through a root-only file)",
    "HF_TOKEN": "the Hub token in model_weights_hf_token, vault-encrypted (the collection fetches the weights with "
                "it; the engine reads them from disk)",
    "HUGGING_FACE_HUB_TOKEN": "the Hub token in model_weights_hf_token, vault-encrypted (the collection fetches the "
                              "weights with it; the engine reads them from disk)",
}
_SECRET_LAST_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "APIKEY")
_SECRET_LAST_PAIRS = ("API_KEY", "ACCESS_KEY", "SECRET_KEY", "PRIVATE_KEY", "AUTH_KEY")
# Names that look like secrets and are not.
_NOT_SECRETS = ("HF_HUB_DISABLE_IMPLICIT_TOKEN",)


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


def _hosts_phrase(hosts):
    if len(hosts) == 1:
        return hosts[0]
    return "%s and %s" % (", ".join(hosts[:-1]), hosts[-1])


def _is_secret_name(name):
    upper = name.upper()
    if upper in _NOT_SECRETS:
        return False
    words = upper.split("_")
    return words[-1] in _SECRET_LAST_WORDS or "_".join(words[-2:]) in _SECRET_LAST_PAIRS


def _env_entry_problem(name, value):
    """Why NAME=value cannot be a line of an env file, or None."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        return "name %r is not a valid variable name (letters, digits and _, not starting with a digit)" % (name,)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return "%s is %s, not a string; give a string (quote it in YAML)" % (name, _kind(value))
    text = str(value)
    if "\n" in text or "\r" in text or "\0" in text:
        return "%s holds a line break or NUL, which an env file cannot carry; give the value on one line" % name
    return None


def _env_problems(env, name):
    if env is None:
        return []
    if not isinstance(env, dict):
        return ["%s must be a mapping of variable names to values, not %s" % (name, _kind(env))]
    problems = []
    for key in sorted(env, key=str):
        if isinstance(key, str) and _is_secret_name(key):
            problems.append(
                "%s holds %s, a secret, in plain environment: the environment is written into every rank's version "
                "and shown by ansible-playbook -v; expected: %s. %s"
                % (name, key, _SECRET_HOMES.get(key.upper(), "no secret in the environment (the engine's only secret "
                                                             "is engine_service_api_key, vault-encrypted)"),
                   "Move it there." if key.upper() in _SECRET_HOMES else "Remove it.")
            )
        elif key in _ENV_SET_BY_COLLECTION:
            problems.append(
                "%s sets %s, which the collection sets itself (%s); expected: no %s here. Remove it."
                % (name, key, _ENV_SET_BY_COLLECTION[key], key)
            )
        elif key in _ENV_FROM_BASE:
            problems.append(
                "%s sets %s, which the collection sets from roce_fabric_nccl_base_env; expected: no %s here. "
                "Set it in roce_fabric_nccl_base_env instead." % (name, key, key)
            )
        else:
            problem = _env_entry_problem(key, env[key])
            if problem:
                problems.append("%s %s" % (name, problem))
    return problems


def _both_env_problems(engine_env, fabric_env):
    if not isinstance(engine_env, dict) or not isinstance(fabric_env, dict):
        return []
    refused = set(_ENV_SET_BY_COLLECTION) | set(_ENV_FROM_BASE)
    shared = sorted(key for key in engine_env if key in fabric_env and isinstance(key, str)
                    and key not in refused and not _is_secret_name(key))
    return [
        "%s and %s both set %s; expected: each variable in one of them (the engine would get %s's). "
        "Remove it from one." % (_variable("env"), _variable("nccl_extra_env"), key, _variable("env"))
        for key in shared
    ]


def _allowed_devices(settings):
    """(patterns, problems) of the device allow-list."""
    allowed = settings.get("container_allowed_devices")
    name = _variable("container_allowed_devices")
    if allowed is None:
        return list(DEFAULT_ALLOWED_DEVICES), []
    if not isinstance(allowed, list):
        return list(DEFAULT_ALLOWED_DEVICES), [
            "%s must be a list of device paths or patterns (/dev/infiniband/*), not %s" % (name, _kind(allowed))]
    problems = []
    patterns = []
    for position, pattern in enumerate(allowed):
        if not isinstance(pattern, str) or not posixpath.isabs(pattern):
            problems.append("%s[%d] %r is not an absolute device path or pattern" % (name, position, pattern))
        else:
            patterns.append(pattern)
    return patterns, problems


def _device_allowed(spec, allowed):
    """Whether the node side of a --device spec (PATH[:CONTAINER[:PERMISSIONS]]) is allowed."""
    path = spec.split(":", 1)[0]
    if not posixpath.isabs(path) or posixpath.normpath(path) != path:
        return False
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in allowed)


def _device_refusal(name, found, allowed):
    return (
        "%s holds %s: it gives the container a device of the node outside engine_service_container_allowed_devices "
        "(%s); expected: the RDMA devices only (the GPU comes through --gpus). Remove it, or add it to "
        "engine_service_container_allowed_devices if the engine needs it."
        % (name, found, ", ".join(allowed) or "empty")
    )


def _all_capabilities_refusal(name, found, in_extra_args):
    return (
        "%s holds %s: it gives the container every capability of the node, as good as root on it; expected: only "
        "the capabilities the engine needs, by name%s. %s"
        % (name, found,
           ", in engine_service_container_capabilities (the collection adds IPC_LOCK)" if in_extra_args
           else " (the default is IPC_LOCK, for RDMA memory registrations)",
           "Remove it." if in_extra_args else "Name them instead.")
    )


def _is_all_capability(value):
    return isinstance(value, str) and value.strip().upper() in ("ALL", "CAP_ALL")


def _docker_option_refusal(name, flag, value, found, allowed):
    """Why one docker run option of the extra args is refused, or None."""
    if flag == "--privileged":
        if value is not None and value.strip().lower() in _FALSE_WORDS:
            return ("%s holds %s, which the collection never needs (no rank runs privileged); expected: no "
                    "--privileged here. Remove it." % (name, found))
        return ("%s holds %s: it gives the container every device and capability of the node and lifts its seccomp "
                "and AppArmor confinement; expected: no --privileged (the collection passes the GPU and the RDMA "
                "devices itself). Remove it." % (name, found))
    if flag in _HOST_NAMESPACE_FLAGS and value is not None and value.strip() == "host":
        namespace, effect = _HOST_NAMESPACE_FLAGS[flag]
        return ("%s holds %s: %s; expected: the container's own %s namespace (the collection shares only the node's "
                "network and IPC namespaces, which the ranks need). Remove it." % (name, found, effect, namespace))
    if flag == "--security-opt" and value is not None:
        key, separator, setting = value.partition("=")
        if not separator:
            key, separator, setting = value.partition(":")
        effect = _UNCONFINED.get((key.strip().lower(), setting.strip().lower()))
        if effect:
            return ("%s holds %s: %s; expected: Docker's default confinement (vLLM needs none of it lifted). "
                    "Remove it." % (name, found, effect))
        return None
    if flag == "--cap-add" and _is_all_capability(value):
        return _all_capabilities_refusal(name, found, True)
    if flag == "--device" and value is not None and not _device_allowed(value, allowed):
        return _device_refusal(name, found, allowed)
    if flag == "--device-cgroup-rule":
        return ("%s holds %s: it lets the container open devices of the node by number, around "
                "engine_service_container_allowed_devices; expected: devices named in "
                "engine_service_container_devices. Remove it." % (name, found))
    if flag in _CONTAINER_FIXED_FLAGS:
        return ("%s holds %s, which the collection sets itself (%s); expected: no %s here. Remove it."
                % (name, found, _CONTAINER_FIXED_FLAGS[flag], flag))
    if flag in _CONTAINER_OWNED_FLAGS:
        owner = _CONTAINER_OWNED_FLAGS[flag]
        return ("%s holds %s, which the collection renders from %s; expected: no %s here. Set %s instead."
                % (name, found, owner, flag, owner))
    return None


def _container_extra_args_problems(extra, allowed):
    """Problems with extra docker run options: --flag=value, --flag value and -fVALUE forms alike."""
    name = _variable("container_extra_args")
    if extra is None:
        return []
    if not isinstance(extra, list):
        return ["%s must be a list of strings, one argument per item, not %s" % (name, _kind(extra))]
    problems = []
    position = 0
    while position < len(extra):
        argument = extra[position]
        where = position
        position += 1
        if not isinstance(argument, str):
            problems.append("%s[%d] %r is not a string; quote it in YAML" % (name, where, argument))
            continue
        text = argument.strip()
        if not text.startswith("-") or text == "-":
            continue
        head = text.split("=", 1)[0]
        if text != argument or any(char.isspace() for char in head):
            problems.append(
                "%s[%d] %r holds a space: docker reads the item as one unknown argument; expected: the flag and its "
                "value as two items, or --flag=value. Split it." % (name, where, argument)
            )
        if any(char.isspace() for char in head):
            words = text.split(None, 1)
            flag, value = words[0], words[1].strip() if len(words) > 1 else None
        elif text.startswith("--"):
            flag = head
            value = text[len(head) + 1:] if "=" in text else None
        else:
            flag, rest = text[:2], text[2:]
            value = (rest.removeprefix("=")) or None
        found = text
        if value is None and flag in _VALUE_FLAGS and position < len(extra) and isinstance(extra[position], str):
            value = extra[position]
            found = "%s %s" % (text, value)
            position += 1
        refusal = _docker_option_refusal(name, flag, value, found, allowed)
        if refusal:
            problems.append(refusal)
    return problems


def _device_problems(devices, allowed):
    name = _variable("container_devices")
    if devices is None:
        return []
    if not isinstance(devices, list):
        return ["%s must be a list of device paths of the node, one per item, not %s" % (name, _kind(devices))]
    problems = []
    for position, device in enumerate(devices):
        if not isinstance(device, str) or not device.strip():
            problems.append("%s[%d] %r is not a device path; give /dev/... as a string" % (name, position, device))
        elif not _device_allowed(device, allowed):
            problems.append(_device_refusal(name, device, allowed))
    return problems


def _capability_problems(capabilities):
    name = _variable("container_capabilities")
    if capabilities is None:
        return []
    if not isinstance(capabilities, list):
        return ["%s must be a list of capability names (IPC_LOCK), not %s" % (name, _kind(capabilities))]
    problems = []
    for position, capability in enumerate(capabilities):
        if _is_all_capability(capability):
            problems.append(_all_capabilities_refusal(name, capability, False))
        elif not isinstance(capability, str) or not _CAPABILITY.match(capability):
            problems.append("%s[%d] %r is not a capability name (IPC_LOCK, SYS_NICE)" % (name, position, capability))
    return problems


def _ulimit_problems(ulimits):
    name = _variable("container_ulimits")
    if ulimits is None:
        return []
    if not isinstance(ulimits, dict):
        return ['%s must map a limit name to soft:hard (memlock: "-1:-1"), not %s' % (name, _kind(ulimits))]
    problems = []
    for limit in sorted(ulimits, key=str):
        value = ulimits[limit]
        if not isinstance(limit, str) or not _ULIMIT_NAME.match(limit):
            problems.append("%s name %r is not a limit name (memlock, stack, nofile)" % (name, limit))
        elif isinstance(value, bool) or not (_is_int(value) or (isinstance(value, str) and _ULIMIT_VALUE.match(value))):
            problems.append("%s %s %r is not soft:hard or one number (-1 for unlimited)" % (name, limit, value))
    return problems


def _scalar_option_problems(settings):
    problems = []
    gpus = settings.get("container_gpus")
    if gpus not in (None, "") and (isinstance(gpus, bool) or not (
            _is_positive_int(gpus) or (isinstance(gpus, str) and gpus.strip() and not any(c.isspace() for c in gpus)))):
        problems.append("%s %r is not a GPU request (all, a count, device=...) or empty" % (_variable("container_gpus"), gpus))
    size = settings.get("container_shm_size")
    if size not in (None, "") and (isinstance(size, bool) or not (
            _is_positive_int(size) or (isinstance(size, str) and _SIZE.match(size)))):
        problems.append("%s %r is not a size (64m, 8g) or empty" % (_variable("container_shm_size"), size))
    return problems


def _mount_problems(mounts):
    name = _variable("extra_mounts")
    if mounts is None:
        return []
    if not isinstance(mounts, list):
        return ["%s must be a list of {src, dest, readonly} mappings, not %s" % (name, _kind(mounts))]
    problems = []
    for position, mount in enumerate(mounts):
        where = "%s[%d]" % (name, position)
        if not isinstance(mount, dict):
            problems.append("%s is not a mapping of src, dest and readonly" % where)
            continue
        unknown = sorted(str(key) for key in mount if key not in _MOUNT_KEYS)
        if unknown:
            problems.append("%s has %s, which a mount does not take; give src, dest and readonly"
                            % (where, ", ".join(unknown)))
        for label in ("src", "dest"):
            path = mount.get(label)
            if not isinstance(path, str) or not posixpath.isabs(path) or "," in path:
                problems.append("%s %s %r is not an absolute path without commas" % (where, label, path))
            elif label == "src" and posixpath.normpath(path).replace("//", "/") in _ROOT_EQUIVALENT_SOURCES:
                problems.append(
                    "%s holds src %s: it gives the container %s; expected: directories the engine reads. Remove it."
                    % (where, path, _ROOT_EQUIVALENT_SOURCES[posixpath.normpath(path).replace("//", "/")])
                )
        readonly = mount.get("readonly", True)
        if not isinstance(readonly, bool):
            problems.append("%s readonly %r is not true or false" % (where, readonly))
    return problems


def engine_container_problems(settings):
    """Return readable problems with one host's container and environment settings, empty when sound.

    O(settings) holds the CONTAINER_SETTINGS of one host, without the
    C(engine_service_) prefix (C(nccl_extra_env) is
    C(roce_fabric_nccl_extra_env)); a setting left out or C(None) is not
    checked. Refused: C(--privileged); the node's PID, UTS, user or cgroup
    namespace; C(--security-opt) seccomp, AppArmor or systempaths
    C(unconfined) and C(label=disable); the capability C(ALL); a device
    outside C(container_allowed_devices) and C(--device-cgroup-rule); an
    extra option the collection renders itself; mounts of C(/), C(/run) or
    the Docker or containerd socket; environment variables the collection sets, secrets in
    plain environment, names and values an env file cannot carry; and every
    setting of the wrong type. Both C(--flag=value) and C(--flag value) are
    read. Messages name the variable, what was found, what is expected and
    the fix; they never show an environment value.
    """
    if not isinstance(settings, dict):
        raise EngineConfigError("the container settings must be a mapping")
    allowed, problems = _allowed_devices(settings)
    problems.extend(_scalar_option_problems(settings))
    problems.extend(_device_problems(settings.get("container_devices"), allowed))
    problems.extend(_capability_problems(settings.get("container_capabilities")))
    problems.extend(_ulimit_problems(settings.get("container_ulimits")))
    problems.extend(_container_extra_args_problems(settings.get("container_extra_args"), allowed))
    problems.extend(_mount_problems(settings.get("extra_mounts")))
    problems.extend(_env_problems(settings.get("env"), _variable("env")))
    problems.extend(_env_problems(settings.get("nccl_extra_env"), _variable("nccl_extra_env")))
    problems.extend(_both_env_problems(settings.get("env"), settings.get("nccl_extra_env")))
    return problems


def _hosts_container_problems(hosts, settings):
    """Every host's container problems, each named once after the hosts that have it."""
    if not hosts:
        return engine_container_problems(settings)
    shared = None
    holders = {}
    for host in sorted(hosts):
        found = hosts[host].get("container_problems")
        if found is None:
            if shared is None:
                shared = engine_container_problems(settings)
            found = shared
        elif not isinstance(found, list) or not all(isinstance(problem, str) for problem in found):
            raise EngineConfigError("engine host %s needs container_problems as a list of sentences" % host)
        for problem in found:
            holders.setdefault(problem, []).append(host)
    return ["%s: %s" % (_hosts_phrase(names), problem) for problem, names in holders.items()]


def env_file_text(env):
    """The text of a Docker C(--env-file) for the mapping O(env), sorted.

    Docker reads every line as C(NAME=value) verbatim, with no quoting, so a
    value cannot hold a newline and a name must be a shell identifier.
    """
    if not isinstance(env, dict):
        raise EngineConfigError("the environment must be a mapping of names to values")
    lines = []
    for name in sorted(env, key=str):
        problem = _env_entry_problem(name, env[name])
        if problem:
            raise EngineConfigError("environment %s" % problem)
        lines.append("%s=%s\n" % (name, env[name]))
    return "".join(lines)


# Where a rank's secrets file (VLLM_API_KEY=...) is mounted, read-only, and the
# wrapper that exports the key from it to the engine alone: the key never
# reaches Docker's configuration (docker inspect), the command line or an
# env file Docker reads. The file is read line by line, with no shell
# evaluation of its content.
SECRETS_TARGET = "/run/secrets/dgxspark-engine.env"
SECRETS_WRAPPER = (
    'while IFS= read -r line || [ -n "$line" ]; do case $line in VLLM_API_KEY=*) '
    'VLLM_API_KEY=${line#VLLM_API_KEY=}; export VLLM_API_KEY;; esac; done < %s && exec "$@"' % SECRETS_TARGET
)


def container_argv(container, image, command):
    """The C(docker run) command line of one rank, program first.

    O(container) holds C(docker) (the client's path), C(name), C(gpus),
    C(devices), C(capabilities), C(ulimits) (name to C(soft:hard)),
    C(shm_size), C(env_files), C(mounts) (C(src), C(dest), C(readonly)) and
    C(secrets_file) (the node's root-only file holding C(VLLM_API_KEY=...), mounted
    read-only at C(SECRETS_TARGET) and exported to the engine by a C(sh) wrapper);
    O(command) is the engine's argv inside the image, e.g. C(["vllm", "serve", ...]).
    The rank always shares the node's network and IPC namespaces and runs
    under an init process; it is never privileged.
    """
    if not isinstance(container, dict):
        raise EngineConfigError("the container settings must be a mapping")
    if not isinstance(image, str) or not image.strip():
        raise EngineConfigError("the image %r is not an image reference or ID" % (image,))
    if not isinstance(command, (list, tuple)) or not command:
        raise EngineConfigError("the engine command must be a non-empty list")
    docker = container.get("docker", "/usr/bin/docker")
    name = container.get("name")
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", name):
        raise EngineConfigError("the container name %r is not a Docker container name" % (name,))
    argv = [docker, "run", "--rm", "--name", name, "--init", "--network", "host", "--ipc", "host"]
    if container.get("gpus"):
        argv += ["--gpus", str(container["gpus"])]
    for device in container.get("devices") or []:
        argv += ["--device", device]
    for capability in container.get("capabilities") or []:
        argv += ["--cap-add", capability]
    ulimits = container.get("ulimits") or {}
    if not isinstance(ulimits, dict):
        raise EngineConfigError("the ulimits must map a limit name to soft:hard")
    for limit in sorted(ulimits):
        argv += ["--ulimit", "%s=%s" % (limit, ulimits[limit])]
    if container.get("shm_size"):
        argv += ["--shm-size", str(container["shm_size"])]
    for env_file in container.get("env_files") or []:
        argv += ["--env-file", env_file]
    for position, mount in enumerate(container.get("mounts") or []):
        if not isinstance(mount, dict):
            raise EngineConfigError("mount %d is not a mapping of src, dest and readonly" % position)
        src, dest = mount.get("src"), mount.get("dest")
        for label, path in (("src", src), ("dest", dest)):
            if not isinstance(path, str) or not posixpath.isabs(path) or "," in path:
                raise EngineConfigError(
                    "mount %d %s %r is not an absolute path without commas" % (position, label, path))
        spec = "type=bind,source=%s,target=%s" % (src, dest)
        if mount.get("readonly", True):
            spec += ",readonly"
        argv += ["--mount", spec]
    secrets_file = container.get("secrets_file")
    if secrets_file:
        if not isinstance(secrets_file, str) or not posixpath.isabs(secrets_file) or "," in secrets_file:
            raise EngineConfigError("the secrets file %r is not an absolute path without commas" % (secrets_file,))
        argv += ["--mount", "type=bind,source=%s,target=%s,readonly" % (secrets_file, SECRETS_TARGET)]
    # The preflight refuses these first (engine_container_problems); this
    # guards a command line rendered without that check.
    problems = _container_extra_args_problems(container.get("extra_args"), DEFAULT_ALLOWED_DEVICES)
    if problems:
        raise EngineConfigError("; ".join(problems))
    argv += list(container.get("extra_args") or [])
    argv.append(image)
    if secrets_file:
        argv += ["sh", "-c", SECRETS_WRAPPER, "dgxspark-engine"]
    argv += list(command)
    return argv
