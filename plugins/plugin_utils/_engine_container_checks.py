# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rules for a rank's container and environment (engine_container_problems): docker run
options the collection owns or refuses, devices, capabilities, ulimits, mounts and the
environment's names and values. They may differ from host to host.

Also the one secret detector (a name like a secret's, or a value shaped like a credential)
behind argv_secret_problems and env_secret_problems, which playbooks/inventory_check.yml
applies per host (_inventory_values.py VALUE_RULES) before any host is contacted.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import (
    EngineConfigError,
    _is_int,
    _is_positive_int,
    _kind,
    _variable,
)

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
    "DGXSPARK_METRICS_CLIENTS": "the hosts the API guard serves /metrics to, engine_service_metrics_clients",
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

# The same homes for the names a command line gives them (--api-key, --hf-token).
_SECRET_HOMES.update({
    "API_KEY": _SECRET_HOMES["VLLM_API_KEY"],
    "OPENAI_API_KEY": _SECRET_HOMES["VLLM_API_KEY"],
    "HF_API_TOKEN": _SECRET_HOMES["HF_TOKEN"],
    "HUGGINGFACE_TOKEN": _SECRET_HOMES["HF_TOKEN"],
    "HUGGINGFACEHUB_API_TOKEN": _SECRET_HOMES["HF_TOKEN"],
})

_SECRET_LAST_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "APIKEY",
                      "AUTHKEY")

_SECRET_LAST_PAIRS = ("API_KEY", "ACCESS_KEY", "SECRET_KEY", "PRIVATE_KEY", "AUTH_KEY", "SIGNING_KEY")

# The first word of names whose every key is a secret: NGC_API_KEY, NGC_CLI_API_KEY, NGC_KEY.
_SECRET_FIRST_WORDS = ("NGC",)

# Names that look like secrets and are not.
_NOT_SECRETS = ("HF_HUB_DISABLE_IMPLICIT_TOKEN",)

# A command line's flags that give a secret (vLLM's --api-key, --hf-token; --token,
# --password of any tool), compared as names: --api-key reads API_KEY.
_FLAG_NAME = re.compile(r"^--?([A-Za-z][A-Za-z0-9_-]*)$")

# Values shaped like a credential, whatever the name they come under: (pattern, what the
# message calls it, the name whose home in _SECRET_HOMES it belongs to, or None).
_SECRET_VALUES = (
    (re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}"), "a Hugging Face token (hf_...)", "HF_TOKEN"),
    (re.compile(r"(?<![A-Za-z0-9])nvapi-[A-Za-z0-9_-]{20,}"), "an NGC API key (nvapi-...)", None),
    (re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{16,}"), "an API key (sk-...)", None),
    (re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"), "a GitHub token",
     None),
    (re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"), "an AWS access key", None),
    (re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"), "a Slack token", None),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"), "a private key", None),
    # scheme://user:password@host: a proxy or a mirror with its password in the URL.
    (re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"), "a URL with a password (user:password@host)",
     None),
)


def _hosts_phrase(hosts):
    if len(hosts) == 1:
        return hosts[0]
    return "%s and %s" % (", ".join(hosts[:-1]), hosts[-1])


def _is_secret_name(name):
    upper = name.upper().replace("-", "_")
    if upper in _NOT_SECRETS:
        return False
    words = upper.split("_")
    return (words[-1] in _SECRET_LAST_WORDS or "_".join(words[-2:]) in _SECRET_LAST_PAIRS
            or (words[0] in _SECRET_FIRST_WORDS and words[-1] == "KEY"))


def _secret_value_kind(value):
    """(what the message calls it, the name of its home or None) when O(value) is shaped like
    a credential (a Hub token, an NGC key, a URL with a password...), else None."""
    if not isinstance(value, str):
        return None
    for pattern, label, home in _SECRET_VALUES:
        if pattern.search(value):
            return label, home
    return None


def _known_home(name):
    """Where the secret named O(name) (a flag's or a variable's name, or None) belongs, or None
    when the collection has no place for it."""
    return _SECRET_HOMES.get((name or "").upper().replace("-", "_"))


def _secret_home(name):
    return _known_home(name) or ("no secret here (the collection's secrets are engine_service_api_key and "
                                 "model_weights_hf_token, vault-encrypted)")


def _argv_secret(argument):
    """(the secret an argv item gives, as the message names it: a flag, NAME of NAME=value,
    -eNAME=value, --env=NAME=value, or a value shaped like a credential; the name of its
    home) or None. Never the value."""
    text = argument.strip()
    flag, separator, rest = text.partition("=")
    if flag in ("-e", "--env") and separator:
        text = rest
    elif text.startswith("-e") and not text.startswith("--"):
        # docker's -eNAME=value.
        text = text[2:]
    else:
        match = _FLAG_NAME.match(flag)
        if match and _is_secret_name(match.group(1)):
            return flag, flag.lstrip("-")
    name = text.partition("=")[0]
    if "=" in text and _ENV_NAME.match(name) and _is_secret_name(name):
        return name, name
    kind = _secret_value_kind(text)
    if kind is not None:
        return "a value shaped like %s" % kind[0], kind[1]
    return None


def argv_secret_problems(variable, argv):
    """One message per secret O(argv) (a free-form argument list, O(variable)'s) gives on
    the command line: a flag named like a secret (--api-key, --hf-token, --password), an
    environment entry (NAME=value, -e NAME=value) whose name is one, or any other item
    shaped like a credential (a Hub token, an NGC key, a URL with a password). The message
    names the flag, the name or the kind of value and where the secret belongs, never the
    value; an argv that is no list is left to the role's spec."""
    if not isinstance(argv, list):
        return []
    problems = []
    value_of_flag = False
    for position, argument in enumerate(argv):
        # The value after a secret flag given as two items (--api-key VALUE) is that flag's.
        if value_of_flag or not isinstance(argument, str):
            value_of_flag = False
            continue
        found = _argv_secret(argument)
        if found is None:
            continue
        secret, home = found
        value_of_flag = secret.startswith("-") and "=" not in argument
        problems.append(
            "%s[%d] holds %s, a secret, on a command line (its value is not repeated here): a command line is written "
            "into the node's unit and shown by ps and ansible-playbook -v; expected: %s. %s"
            % (variable, position, secret, _secret_home(home),
               "Remove it and its value, and set it there." if _known_home(home) else "Remove it and its value.")
        )
    return problems


def env_secret_problems(variable, env):
    """One message per entry of O(env) (an environment mapping, O(variable)'s) whose name is
    a secret's (the names argv_secret_problems reads: ending in TOKEN, SECRET, PASSWORD,
    API_KEY..., NGC keys) or whose value is shaped like a credential (a Hub token, an NGC
    key, a URL with a password...). The message names the entry and where the secret
    belongs, never the value; an environment that is no mapping is left to the role's checks."""
    if not isinstance(env, dict):
        return []
    problems = []
    for key in sorted(env, key=str):
        if not isinstance(key, str):
            continue
        if _is_secret_name(key):
            found, home = key, key.upper()
        else:
            kind = _secret_value_kind(env[key])
            if kind is None:
                continue
            found, home = "%s, whose value is shaped like %s" % (key, kind[0]), kind[1]
        problems.append(
            "%s holds %s, a secret, in plain environment: the environment is written into every rank's version "
            "and shown by ansible-playbook -v; expected: %s. %s"
            % (variable, found, _known_home(home) or ("no secret in the environment (the engine's only secret is "
                                                      "engine_service_api_key, vault-encrypted)"),
               "Move it there." if _known_home(home) else "Remove it.")
        )
    return problems


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
        # A secret (its name or its value) is refused by the inventory check, before any host is
        # contacted (env_secret_problems in _inventory_values.py VALUE_RULES): judged there alone.
        if isinstance(key, str) and _is_secret_name(key):
            continue
        if key in _ENV_SET_BY_COLLECTION:
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
        if flag in ("-e", "--env") and value is not None:
            # The variable's name only: its value may be a secret (argv_secret_problems names where it belongs).
            found = "%s %s" % (flag, value.partition("=")[0])
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
    the Docker or containerd socket; environment variables the collection sets,
    names and values an env file cannot carry; and every setting of the wrong
    type. Both C(--flag=value) and C(--flag value) are read. Messages name the
    variable, what was found, what is expected and the fix; they never show an
    environment value. A secret in the environment is not judged here: the
    inventory check refuses it (env_secret_problems), before any host is contacted.
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
