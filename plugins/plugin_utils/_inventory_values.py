# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""What an input's value must look like (VALUE_RULES), and which inputs every host of the
cluster must give the same value (cluster_wide_inputs).

Judged per host, on each host's own value (a host_vars override of one host counts): by
playbooks/inventory_check.yml on the controller before any host is contacted, and by the
roles' validate.yml on the values the role resolves (its defaults among them) in the
preflight play. A check that reads a value once, on the first host, misses the host that
overrides it; the agreement rule is what lets the engine's own checks read the cluster's
settings once.

Standard library only (and the collection's image grammar and secret detector), so it is
unit-tested without Ansible.
"""

from __future__ import annotations

import numbers
import posixpath
import re
from collections import namedtuple
from urllib import parse as urlparse

from ansible_collections.dgxspark.cluster.plugins.module_utils._image import parse_ref
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_container_checks import (
    _hosts_phrase,
    argv_secret_problems,
    env_secret_problems,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import SETTINGS, _variable

# The weights sync runs rsync with --delete: whatever else the weights directory holds is
# deleted on every peer. A directory at least this many levels below / names the model's
# own directory (/srv/models/<name>, /data/models/<name>, /home/<user>/models), not a
# shared root (/srv, /home/<user>, /data/models).
WEIGHTS_DIR_MIN_DEPTH = 3

# Trees that hold the system, the kernel's views, Docker's state or files the system cleans:
# a weights directory anywhere under them is refused, however deep.
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys",
    "/tmp", "/usr", "/var/tmp", "/var/run", "/var/log", "/var/lib/docker", "/var/lib/containerd", "/lost+found",
)

# A Hub repository id: namespace/name.
_HUB_REPO = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")

# One rule of an input's value. judge: the variable's name and its value
# (never None) to the sentences that refuse it, each "<variable> is <found>;
# <expected>. <fix>." without the host, empty when it is sound; a judge of a
# free-form input names what it found there, never a secret's value.
ValueRule = namedtuple("ValueRule", "judge")


def _refusal(variable, found, expected, fix):
    return ["%s is %s; %s. %s" % (variable, found, expected, fix)]


def _text(value):
    if value == "":
        return "empty"
    return value if isinstance(value, str) else repr(value)


def weights_dir_problems(variable, value):
    """Why O(value) cannot be the weights directory that the sync empties of everything else."""
    expected = ("expected the model's own directory, an absolute normalised path at least %d levels deep "
                "(/srv/models/<name>), since the weights sync (rsync --delete) deletes whatever else it holds"
                % WEIGHTS_DIR_MIN_DEPTH)
    fix = "Set %s to a directory only the weights live in." % variable
    if not isinstance(value, str) or not value.startswith("/"):
        return _refusal(variable, _text(value), expected, fix)
    normal = posixpath.normpath(value)
    if normal.startswith("//"):
        normal = normal[1:]
    if normal != value:
        return _refusal(variable, value, expected + " (%s is how it is spelt normalised)" % normal, fix)
    depth = len([part for part in normal.split("/") if part])
    tree = next((tree for tree in SYSTEM_TREES if normal == tree or normal.startswith(tree + "/")), None)
    if tree is not None:
        return _refusal(variable, value, expected + ", outside the system tree %s" % tree, fix)
    if depth < WEIGHTS_DIR_MIN_DEPTH:
        return _refusal(variable, value, expected + "; %s is %s" % (
            value, "the root" if depth == 0 else "%d level%s deep, a shared directory" % (depth, "" if depth == 1 else "s")),
            fix)
    return []


def hub_repo_problems(variable, value):
    """Why O(value) is no Hub repository id (namespace/name)."""
    if isinstance(value, str) and _HUB_REPO.match(value):
        return []
    return _refusal(variable, _text(value), "expected a Hub repository id, namespace/name",
                    "Set %s to the repository the weights come from." % variable)


def http_url_problems(variable, value):
    """Why O(value) is no http(s) URL with a host."""
    try:
        parts = urlparse.urlsplit(value) if isinstance(value, str) else None
    except ValueError:
        parts = None
    if parts is not None and parts.scheme in ("http", "https") and parts.hostname:
        return []
    return _refusal(variable, _text(value), "expected an http(s) URL (https://huggingface.co or a Hub mirror)",
                    "Set %s to the URL the nodes download from." % variable)


def image_ref_problems(variable, value):
    """Why O(value) does not follow Docker's reference grammar in its digest-pinned form
    (plugins/module_utils/_image.py parse_ref, the grammar the image play pulls by)."""
    try:
        parse_ref(value)
    except ValueError as exc:
        # parse_ref's reason starts with the reference, which the message already shows.
        reason = str(exc).removeprefix("%r: " % (value,))
        return _refusal(variable, _text(value), "expected a digest-pinned reference, registry/repo@sha256:<64 hex> or "
                        "registry/repo:tag@sha256:<64 hex>, in Docker's grammar: %s" % reason,
                        "Set %s to the RepoDigests entry of the image you tested "
                        "(docker image inspect --format '{{index .RepoDigests 0}}' IMAGE)." % variable)
    return []


# The inputs whose value a rule judges, on every host that sets them. Secrets in
# free-form argv (an API key after --api-key) and in the free-form environments
# (a name or a value like a secret's) are judged here alone, by the one detector
# of _engine_container_checks.py: the preflight's engine_container_problems leaves
# the environments' secrets to this check.
VALUE_RULES = {
    "model_weights_dir": ValueRule(weights_dir_problems),
    "model_weights_hf_repo_id": ValueRule(hub_repo_problems),
    "model_weights_hf_endpoint": ValueRule(http_url_problems),
    "engine_image_ref": ValueRule(image_ref_problems),
    "engine_service_extra_args": ValueRule(argv_secret_problems),
    "engine_service_container_extra_args": ValueRule(argv_secret_problems),
    "bench_community_extra_args": ValueRule(argv_secret_problems),
    "host_hardening_earlyoom_extra_args": ValueRule(argv_secret_problems),
    "engine_service_env": ValueRule(env_secret_problems),
    "roce_fabric_nccl_base_env": ValueRule(env_secret_problems),
    "roce_fabric_nccl_extra_env": ValueRule(env_secret_problems),
}

# Inputs that are one thing for the whole cluster besides the engine settings: the image
# the ranks run and how it reaches the nodes, the weights they load and where from.
CLUSTER_WIDE = (
    "engine_image_ref", "engine_image_strategy", "engine_image_source_host", "engine_image_registry_mirror",
    "model_weights_hf_repo_id", "model_weights_hf_revision", "model_weights_hf_endpoint", "model_weights_source_host",
    "engine_service_group",
)


def cluster_wide_inputs():
    """Every input all hosts of the cluster must share: CLUSTER_WIDE and every engine setting
    (_engine_settings.py's rows: one engine's ranks run one command line)."""
    return tuple(CLUSTER_WIDE) + tuple(_variable(setting.name) for setting in SETTINGS)


def value_problems(host, values, rules=None):
    """One message per problem of a value of O(values) (variable to value; None or absent
    is not set) that its rule in O(rules) (VALUE_RULES by default) finds."""
    problems = []
    for name, rule in sorted((rules or VALUE_RULES).items()):
        if values.get(name) is not None:
            problems.extend("%s: %s" % (host, problem) for problem in rule.judge(name, values[name]))
    return problems


# What a host that leaves a variable without a plain default out is compared as.
UNSET = object()


def _is_scalar(value):
    return value is None or value is UNSET or isinstance(value, (bool, numbers.Number, str))


def agreement_problems(hosts_values, variables, defaults, group):
    """One message per group of hosts of O(hosts_values) (host, in inventory order, to the
    values it sets) whose value of a variable of O(variables) differs from the most hosts'.

    A host that does not set a variable has its default from O(defaults) (variable to a
    plain default; absent when the default is a template or there is none), else UNSET.
    """
    problems = []
    hosts = list(hosts_values)
    for name in variables:
        if not any(name in values for values in hosts_values.values()):
            continue
        by_value = []
        for host in hosts:
            values = hosts_values[host]
            value = values[name] if name in values else defaults.get(name, UNSET)
            for entry in by_value:
                if entry[0] == value and type(entry[0]) is type(value):
                    entry[1].append(host)
                    break
            else:
                by_value.append((value, [host]))
        if len(by_value) < 2:
            continue
        # The value most hosts have is the cluster's; a tie goes to the first host's.
        common = max(by_value, key=lambda entry: len(entry[1]))
        for value, owners in by_value:
            if owners is common[1]:
                continue
            if _is_scalar(value) and _is_scalar(common[0]):
                found = "is %s, but %s on %s" % (_described(value, name, defaults), _described(common[0], name, defaults),
                                                 _hosts_phrase(common[1]))
            else:
                # A list or mapping can be long, or hold what a free-form rule refuses without showing it.
                found = "differs from its value on %s (not repeated here)" % _hosts_phrase(common[1])
            problems.append(
                "%s: %s %s; expected one value on every host of %s (one engine runs one image, model and command "
                "line). Set it once for the group in group_vars, or the same on every host."
                % (_hosts_phrase(owners), name, found, group))
    return problems


def _described(value, name, defaults):
    if value is UNSET:
        return "not set"
    shown = "null" if value is None else value if isinstance(value, str) else repr(value)
    if name in defaults and value == defaults[name] and type(value) is type(defaults[name]):
        return "%s (the default)" % shown
    return shown
