# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine's command lines: the vLLM argv of every rank, the C(docker run) argv
around it and the env files it reads.

Every rank runs ``vllm serve <model>`` on its own node with the same engine
settings; ranks above a replica's head add ``--headless``. The JSON
arguments are rendered here, once, so that they reach vLLM exactly as
rendered (quoted for systemd by _engine_systemd), with no shell in between.
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_container_checks import (
    DEFAULT_ALLOWED_DEVICES,
    _container_extra_args_problems,
    _env_entry_problem,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import (
    _TUNING_OPTIONS,
    SETTINGS_BY_NAME,
    EngineConfigError,
    _is_int,
    _is_positive_int,
    _present,
    _render_json,
    _speculative_tokens,
    _variable,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_validation import (
    _capture_size_problems,
    _settings_problems,
)

API_HOST = "0.0.0.0"

# The guard every replica head's API runs behind (plugins/module_utils/
# _engine_api_guard.py): the key on every path but /health, /metrics to the
# metrics readers. container_argv mounts the node's copy as GUARD_MODULE.py in
# GUARD_PYTHON_DIR, which its wrapper puts first on PYTHONPATH.
GUARD_MODULE = "dgxspark_api_guard"
GUARD_MIDDLEWARE = GUARD_MODULE + ".ApiGuard"
GUARD_PYTHON_DIR = "/opt/dgxspark/python"


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


def _option_arguments(setting, value):
    if setting.render == "switch":
        return [setting.flag if value else "--no-" + setting.flag[2:]]
    if setting.render == "json":
        return [setting.flag, _render_json(value)]
    return [setting.flag, str(value)]


def _flag(name):
    return SETTINGS_BY_NAME[name].flag


def rank_argv(settings, rank, master_address):
    """The arguments after the C(vllm) program for global O(rank).

    Starts with C(["serve", model]). The replica's head (node rank 0) serves
    the API on all addresses behind the collection's guard (C(--middleware
    GUARD_MIDDLEWARE)); the other ranks run headless. Options whose
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
        argv += [_flag("served_model_name"), settings["served_model_name"]]
    argv += [
        _flag("tensor_parallel_size"), str(tensor_parallel),
        "--nnodes", str(tensor_parallel),
        "--node-rank", str(layout["node_rank"]),
        "--master-addr", master_address,
        _flag("master_port"), str(settings["master_port"]),
    ]
    if layout["node_rank"]:
        argv.append("--headless")
    else:
        argv += ["--host", API_HOST, _flag("api_port"), str(settings["api_port"]), "--middleware", GUARD_MIDDLEWARE]

    values = dict(settings, max_cudagraph_capture_size=effective_cudagraph_capture_size(settings))
    for setting in _TUNING_OPTIONS:
        value = values.get(setting.name)
        # An empty JSON mapping is left out like null.
        if value is not None and not (setting.render == "json" and not value):
            argv += _option_arguments(setting, value)
    argv += list(settings.get("extra_args") or [])
    return argv


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
# evaluation of its content. The same wrapper puts the collection's Python
# directory (the API guard) ahead of the image's own PYTHONPATH.
SECRETS_TARGET = "/run/secrets/dgxspark-engine.env"

SECRETS_READ = (
    'while IFS= read -r line || [ -n "$line" ]; do case $line in VLLM_API_KEY=*) '
    'VLLM_API_KEY=${line#VLLM_API_KEY=}; export VLLM_API_KEY;; esac; done < %s' % SECRETS_TARGET
)


def container_wrapper(python_dir, secrets):
    """The C(sh -c) script the rank's command runs under, or None when it needs none.

    O(python_dir) is prepended to C(PYTHONPATH) (keeping the image's), and with
    O(secrets) the key is read from C(SECRETS_TARGET); then the command is
    exec'd, so it stays the container's main process.
    """
    steps = []
    if python_dir:
        if not isinstance(python_dir, str) or not re.match(r"^/[A-Za-z0-9_./-]*$", python_dir):
            raise EngineConfigError("the Python directory %r is not an absolute path of plain characters" % (python_dir,))
        steps.append('PYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH' % python_dir)
    if secrets:
        steps.append(SECRETS_READ)
    if not steps:
        return None
    return " && ".join(steps + ['exec "$@"'])


def container_argv(container, image, command):
    """The C(docker run) command line of one rank, program first.

    O(container) holds C(docker) (the client's path), C(name), C(gpus),
    C(devices), C(capabilities), C(ulimits) (name to C(soft:hard)),
    C(shm_size), C(env_files), C(mounts) (C(src), C(dest), C(readonly)) and
    C(secrets_file) (the node's root-only file holding C(VLLM_API_KEY=...), mounted
    read-only at C(SECRETS_TARGET) and exported to the engine by a C(sh) wrapper)
    and C(api_guard) (the node's copy of the API guard, mounted read-only as
    C(GUARD_MODULE) in C(GUARD_PYTHON_DIR), which the same wrapper puts first on
    C(PYTHONPATH));
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
    api_guard = container.get("api_guard")
    if api_guard:
        if not isinstance(api_guard, str) or not posixpath.isabs(api_guard) or "," in api_guard:
            raise EngineConfigError("the API guard %r is not an absolute path without commas" % (api_guard,))
        argv += ["--mount", "type=bind,source=%s,target=%s/%s.py,readonly" % (api_guard, GUARD_PYTHON_DIR, GUARD_MODULE)]
    # The preflight refuses these first (engine_container_problems); this
    # guards a command line rendered without that check.
    problems = _container_extra_args_problems(container.get("extra_args"), DEFAULT_ALLOWED_DEVICES)
    if problems:
        raise EngineConfigError("; ".join(problems))
    argv += list(container.get("extra_args") or [])
    argv.append(image)
    wrapper = container_wrapper(GUARD_PYTHON_DIR if api_guard else None, bool(secrets_file))
    if wrapper:
        argv += ["sh", "-c", wrapper, "dgxspark-engine"]
    argv += list(command)
    return argv
