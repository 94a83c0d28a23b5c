# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pinned engine image references, the local name a loaded image gets, and
reading ``docker image inspect``."""

from __future__ import annotations

import json
import re

# A reference as Docker parses it, restricted to the digest-pinned forms:
# [registry[:port]/]path[:tag]@sha256:<64 hex>.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
# Docker's tag is [\w][\w.-]{0,127} with ASCII \w; Python's \w would take any letter.
REF_PATTERN = re.compile(
    r"^(?:(?P<registry>%s)/)?(?P<path>%s(?:/%s)*)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"@(?P<digest>sha256:[0-9a-f]{64})$"
    % (_REGISTRY, _COMPONENT, _COMPONENT)
)
# Docker refuses a name (registry and path) longer than this.
NAME_MAX_LENGTH = 255
DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
DEFAULT_LOCAL_REPOSITORY = "dgxspark/engine"


def _is_registry(first):
    # Docker's rule: the first component names a registry only when it has a
    # dot or a port or is "localhost"; otherwise it is part of the path.
    return "." in first or ":" in first or first == "localhost"


def parse_ref(ref):
    """Split a digest-pinned reference; raise ValueError saying what is wrong."""
    if not isinstance(ref, str) or not ref:
        raise ValueError("expected a reference like registry/repo@sha256:<64 hex>, got %r" % (ref,))
    if "@" not in ref:
        raise ValueError(
            "%r is not pinned by digest: expected registry/repo@sha256:<64 hex> (or repo:tag@sha256:...); "
            "a tag alone can move" % ref
        )
    name, _sep, digest = ref.rpartition("@")
    if not DIGEST_PATTERN.fullmatch(digest):
        raise ValueError("%r: the digest %r is not sha256: followed by 64 lowercase hex digits" % (ref, digest))
    match = REF_PATTERN.match(ref)
    if not match:
        raise ValueError(
            "%r: %r is not a valid image name (lowercase path components, optional registry host[:port] "
            "and :tag)" % (ref, name)
        )
    tag = match.group("tag")
    if len(name[:-len(tag) - 1] if tag else name) > NAME_MAX_LENGTH:
        raise ValueError("%r: the name is longer than the %d characters Docker allows" % (ref, NAME_MAX_LENGTH))
    registry, path = match.group("registry"), match.group("path")
    if registry and not _is_registry(registry):
        if not re.fullmatch(_COMPONENT, registry):
            raise ValueError("%r: path component %r must be lowercase" % (ref, registry))
        path, registry = registry + "/" + path, None
    return {
        "ref": ref,
        "registry": registry,
        "path": path,
        "tag": tag,
        "digest": digest,
        "short": digest[len("sha256:"):][:12],
    }


def local_ref(ref, repository=DEFAULT_LOCAL_REPOSITORY):
    """The stable local name of the image of a pinned reference: a tag keeps a
    loaded image (which has no repo digest) out of ``docker image prune``."""
    return "%s:%s" % (repository, parse_ref(ref)["short"])


def mirror_ref(ref, mirror):
    """The same digest through a registry mirror that proxies the upstream
    registry: the upstream registry host is replaced by the mirror's."""
    if not mirror:
        return ref
    mirror = mirror.rstrip("/")
    if "://" in mirror:
        raise ValueError("registry mirror %r must be host[:port][/prefix], without a scheme" % mirror)
    parts = parse_ref(ref)
    return "%s/%s@%s" % (mirror, parts["path"], parts["digest"])


def parse_inspect(rc, stdout, stderr):
    """None when the image is absent, else its Id, Size, RepoTags and
    RepoDigests; raise RuntimeError when docker itself failed."""
    if rc != 0:
        if "no such image" in (stderr or "").lower() or "no such object" in (stderr or "").lower():
            return None
        raise RuntimeError("docker image inspect exited %d: %s" % (rc, (stderr or stdout or "").strip()))
    try:
        data = json.loads(stdout)
    except ValueError as exc:
        raise RuntimeError("docker image inspect printed no JSON (%s): %.200s" % (exc, stdout))
    if not data:
        return None
    image = data[0]
    return {
        "id": image.get("Id"),
        "size": int(image.get("Size") or 0),
        "repo_tags": list(image.get("RepoTags") or []),
        "repo_digests": list(image.get("RepoDigests") or []),
        "layers": list((image.get("RootFS") or {}).get("Layers") or []),
    }


def required_free_bytes(image_size, factor, headroom_bytes):
    """Space a ``docker load`` of an image needs: the daemon unpacks the
    archive into its temporary directory before it registers the layers."""
    return int(image_size * factor + headroom_bytes)


def refs(ref, repository=DEFAULT_LOCAL_REPOSITORY, mirror=None):
    """The local tag and the reference to pull of a pinned reference; ValueError names
    what is wrong with either."""
    return {"local_ref": local_ref(ref, repository or DEFAULT_LOCAL_REPOSITORY), "pull_ref": mirror_ref(ref, mirror)}


def inspect_result(found_refs, docker, local, ref_image, docker_root_dir):
    """What dgxspark.cluster.engine_image returns with state=inspect: the image under the
    local tag (O(local), as :func:`parse_inspect` returns it, None when absent) and under
    the pulled reference (O(ref_image)), and the daemon's root directory."""
    return {
        "changed": False,
        "local_ref": found_refs["local_ref"],
        "pull_ref": found_refs["pull_ref"],
        "pulled": False,
        "seconds": 0.0,
        "docker": docker,
        "previous_id": local["id"] if local else None,
        "image_id": local["id"] if local else None,
        "ref_id": ref_image["id"] if ref_image else None,
        "size": (local or ref_image or {}).get("size", 0),
        "docker_root_dir": docker_root_dir,
    }


def read_spec(found_refs):
    """The node state read (dgxspark.cluster.node_read) of state=inspect:
    where docker is, both images and the daemon's root directory, in one call."""
    return {
        "commands": {
            "docker": ["sh", "-c", "command -v docker"],
            "local": ["docker", "image", "inspect", found_refs["local_ref"]],
            "ref": ["docker", "image", "inspect", found_refs["pull_ref"]],
            "root": ["docker", "info", "--format", "{{.DockerRootDir}}"],
        }
    }


def inspect_from_read(state, found_refs):
    """:func:`inspect_result` from the parsed node state read of :func:`read_spec`;
    RuntimeError when docker is missing or failed."""
    commands = state["commands"]
    docker = commands["docker"]
    if docker["rc"] != 0 or not docker["stdout"].strip():
        raise RuntimeError("docker is not installed on this node (not on PATH); the container_runtime role installs it")
    local = parse_inspect(commands["local"]["rc"], commands["local"]["stdout"], commands["local"]["stderr"])
    ref_image = parse_inspect(commands["ref"]["rc"], commands["ref"]["stdout"], commands["ref"]["stderr"])
    root = commands["root"]
    if root["rc"] != 0:
        raise RuntimeError(
            "reading the daemon failed: 'docker info' exited %d: %s" % (root["rc"], (root["stderr"] or root["stdout"]).strip())
        )
    return inspect_result(found_refs, docker["stdout"].strip(), local, ref_image, root["stdout"].strip())
