# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine configuration's rules (engine_config_problems): the cluster's settings,
every rank and fabric address, and each host's container rules (_engine_container_checks),
as sentences that name the variable, what was found and what is expected.
"""

from __future__ import annotations

import ipaddress
import posixpath

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_container_checks import _hosts_container_problems
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import (
    _CAPTURE_SIZE_KEYS,
    _DIGEST_PINNED,
    _SHA256,
    ADDRESS_VARIABLE,
    GUARD_OWNER,
    MANAGED_FLAGS,
    RANK_VARIABLE,
    SETTINGS,
    SETTINGS_BY_NAME,
    EngineConfigError,
    _is_int,
    _is_positive_int,
    _render_json,
    _speculative_tokens,
    _variable,
    setting_problem,
)

# The settings the capture size rule reads; it checks them itself, so that
# the capture size filter refuses what the preflight refuses.
_CAPTURE_SIZE_SETTINGS = ("max_num_seqs", "speculative_config", "allow_small_cudagraph_capture_size",
                          "max_cudagraph_capture_size")

# The ports that must differ from each other.
_PORT_SETTINGS = ("master_port", "api_port")


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
    elif setting_problem(SETTINGS_BY_NAME["max_num_seqs"], seqs):
        problems.append(setting_problem(SETTINGS_BY_NAME["max_num_seqs"], seqs))
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
    problem = setting_problem(SETTINGS_BY_NAME["allow_small_cudagraph_capture_size"], allow_small)
    if problem:
        problems.append(problem)

    explicit = settings.get("max_cudagraph_capture_size")
    if explicit is None:
        return problems
    name = _variable("max_cudagraph_capture_size")
    problem = setting_problem(SETTINGS_BY_NAME["max_cudagraph_capture_size"], explicit)
    if problem:
        problems.append(problem)
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
    """The rendezvous and the API on one port; each port's own range is its row's."""
    ports = [settings.get(key) for key in _PORT_SETTINGS]
    if any(port is None or setting_problem(SETTINGS_BY_NAME[key], port) for key, port in zip(_PORT_SETTINGS, ports)):
        return []
    if ports[0] == ports[1]:
        return [
            "%s and %s are both %d; the rendezvous and the API need different ports"
            % (_variable("master_port"), _variable("api_port"), ports[1])
        ]
    return []


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
        if MANAGED_FLAGS.get(flag) == GUARD_OWNER:
            problems.append(
                "%s[%d] %r: --middleware is the collection's; it loads the API guard every replica head runs (the "
                "key on every path but /health, /metrics to engine_service_metrics_clients); remove it"
                % (name, position, argument)
            )
        elif flag in MANAGED_FLAGS:
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


def _row_problems(settings):
    """The generic checks of every setting by its row, but the capture size rule's own."""
    problems = []
    for setting in SETTINGS:
        if setting.name in _CAPTURE_SIZE_SETTINGS or setting.kind == "list":
            continue
        if setting.kind == "json":
            if setting.required and settings.get(setting.name) is None:
                problems.append("%s is not set" % _variable(setting.name))
            problems.extend(_json_setting_problems(settings, setting.name))
            continue
        problem = setting_problem(setting, settings.get(setting.name))
        if problem:
            problems.append(problem)
    return problems


def _settings_problems(settings):
    problems = _row_problems(settings)

    image = settings.get("image")
    if isinstance(image, str) and image.strip() and not _DIGEST_PINNED.match(image):
        problems.append(
            "%s %r is not pinned by digest; pin it as name@sha256:<64 hex digits> so every node runs the same build"
            % (_variable("image"), image)
        )

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
    # Each rank needs an address; that no two nodes share one is the fabric plan
    # check's (roce_fabric validate.yml, which runs before this check and plans
    # every address, not only the one each rank is reached at).
    problems = []
    for host in sorted(hosts):
        address = hosts[host].get("fabric_address")
        if address in (None, ""):
            problems.append(
                "%s: %s is not set; every engine rank reaches the others at its fabric address" % (host, ADDRESS_VARIABLE)
            )
            continue
        try:
            ipaddress.ip_address(address)
        except ValueError:
            problems.append("%s: %s %r is not an IP address" % (host, ADDRESS_VARIABLE, address))
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
