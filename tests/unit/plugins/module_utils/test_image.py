# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Engine image references and the one-call read of what a node holds: the read runs here
under sh with a stand-in docker on PATH, and is parsed back into what the engine_image
module returns with state=inspect."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import _image
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_state import parse_read, read_command

DIGEST = "sha256:" + "ab" * 32
REF = "registry.example:5000/vllm/dspark:v0.21@" + DIGEST
IMAGE_ID = "sha256:" + "cd" * 32


def test_refs_give_the_local_tag_and_the_reference_to_pull():
    assert _image.refs(REF) == {"local_ref": "dgxspark/engine:" + "ab" * 6, "pull_ref": REF}
    assert _image.refs(REF, "site/engine", "mirror.local:5000/proxy") == {
        "local_ref": "site/engine:" + "ab" * 6,
        "pull_ref": "mirror.local:5000/proxy/vllm/dspark@" + DIGEST,
    }


@pytest.mark.parametrize(
    "ref, mirror, message",
    [
        ("vllm/dspark:v0.21", None, "is not pinned by digest"),
        ("vllm/dspark@sha256:abc", None, "is not sha256: followed by 64"),
        (REF, "https://mirror.local", "without a scheme"),
    ],
)
def test_a_reference_that_cannot_be_pinned_is_refused(ref, mirror, message):
    with pytest.raises(ValueError, match=message):
        _image.refs(ref, mirror=mirror)


def stand_in_docker(bin_dir, images, root="/var/lib/docker", info_rc=0):
    """A docker that knows O(images) (name -> Id) and prints the daemon's root directory."""
    table = json.dumps(images)
    script = """#!/usr/bin/env python3
import json, sys
images = json.loads(%r)
args = sys.argv[1:]
if args[:2] == ["image", "inspect"]:
    name = args[2]
    if name not in images:
        print("Error response from daemon: No such image: " + name, file=sys.stderr)
        sys.exit(1)
    print(json.dumps([{"Id": images[name], "Size": 1234, "RepoTags": [name], "RootFS": {"Layers": ["sha256:1"]}}]))
elif args[:1] == ["info"]:
    if %d:
        print("Cannot connect to the Docker daemon", file=sys.stderr)
        sys.exit(%d)
    print(%r)
""" % (table, info_rc, info_rc, root)
    path = bin_dir / "docker"
    path.write_text(script)
    path.chmod(0o755)


def read(tmp_path, spec):
    path = str(tmp_path) + os.pathsep + "/usr/bin:/bin"
    done = subprocess.run(["sh", "-c", read_command(spec)], capture_output=True, text=True,
                          env=dict(os.environ, PATH=path), check=False)
    assert done.returncode == 0, done.stderr
    return parse_read({"stdout": done.stdout.rstrip("\n"), "stderr": done.stderr.rstrip("\n")}, spec)


def test_a_node_holding_the_image_under_both_names(tmp_path):
    found = _image.refs(REF)
    stand_in_docker(tmp_path, {found["local_ref"]: IMAGE_ID, found["pull_ref"]: IMAGE_ID}, root="/srv/docker")
    result = _image.inspect_from_read(read(tmp_path, _image.read_spec(found)), found)
    assert result == {
        "changed": False, "pulled": False, "seconds": 0.0,
        "local_ref": found["local_ref"], "pull_ref": REF, "docker": str(tmp_path / "docker"),
        "previous_id": IMAGE_ID, "image_id": IMAGE_ID, "ref_id": IMAGE_ID, "size": 1234,
        "docker_root_dir": "/srv/docker",
    }


def test_a_node_without_the_image(tmp_path):
    found = _image.refs(REF)
    stand_in_docker(tmp_path, {})
    result = _image.inspect_from_read(read(tmp_path, _image.read_spec(found)), found)
    assert result["image_id"] is None and result["ref_id"] is None and result["previous_id"] is None
    assert result["size"] == 0 and result["docker_root_dir"] == "/var/lib/docker"


def test_a_daemon_that_does_not_answer_is_refused(tmp_path):
    found = _image.refs(REF)
    stand_in_docker(tmp_path, {}, info_rc=1)
    with pytest.raises(RuntimeError, match="'docker info' exited 1: Cannot connect to the Docker daemon"):
        _image.inspect_from_read(read(tmp_path, _image.read_spec(found)), found)


def test_a_node_without_docker_is_refused():
    # What the read parses on a node where `command -v docker` finds nothing.
    missing = {"rc": 127, "stdout": "", "stderr": "docker: not found"}
    state = {"commands": {"docker": {"rc": 1, "stdout": "", "stderr": ""}, "local": missing, "ref": missing, "root": missing}}
    with pytest.raises(RuntimeError, match="docker is not installed on this node"):
        _image.inspect_from_read(state, _image.refs(REF))


def test_the_module_and_the_read_return_the_same_shape():
    local = {"id": IMAGE_ID, "size": 7}
    result = _image.inspect_result(_image.refs(REF), "/usr/bin/docker", local, None, "/var/lib/docker")
    assert result["image_id"] == result["previous_id"] == IMAGE_ID and result["ref_id"] is None
    assert result["size"] == 7
