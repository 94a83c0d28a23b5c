# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine_image module against a stand-in docker on PATH.

The stand-in keeps its daemon's images in a JSON file beside it, answers
``image inspect`` with the inspect fixtures (tests/unit/fixtures/image), and
records every argv it was run with. ``state=received`` loads a real
``docker save``-shaped tar archive that _image_stream's sender streams over
127.0.0.1; the stand-in's ``load`` gives the image the ID the classic image
store gives it (the digest of its config), or with ``store: containerd`` the
digest of the archive's manifest, as the containerd image store does.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import sys
import tarfile
import threading
from contextlib import contextmanager

import pytest
from ansible.module_utils.testing import patch_module_args

from unit_support import FIXTURES

from ansible_collections.dgxspark.cluster.plugins.module_utils import _image_stream
from ansible_collections.dgxspark.cluster.plugins.modules import engine_image

IMAGE_FIXTURES = FIXTURES / "image"
HEAD = json.loads((IMAGE_FIXTURES / "vllm-head-overlay2.json").read_text(encoding="utf-8"))[0]
WORKER = json.loads((IMAGE_FIXTURES / "vllm-worker-containerd.json").read_text(encoding="utf-8"))[0]
MISSING = (IMAGE_FIXTURES / "missing.json").read_text(encoding="utf-8")
# The registry digest of the head fixture: the reference its pull was pinned by.
REF = HEAD["RepoDigests"][0]
LOCAL = "dgxspark/engine:5bcc38419168"
MIRROR = "mirror.local:5000"
MIRROR_REF = "mirror.local:5000/nvidia/vllm@" + REF.rpartition("@")[2]
ROOT_DIR = "/srv/docker"
INSPECT_LOCAL = ["image", "inspect", LOCAL]
INSPECT_REF = ["image", "inspect", REF]
INFO = ["info", "--format", "{{.DockerRootDir}}"]
DAEMON_DOWN = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"

STANDIN = r'''#!%(python)s
"""Stand-in docker of test_engine_image.py."""
import hashlib, io, json, os, sys, tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = os.path.join(HERE, "state.json")
with open(STATE) as handle:
    state = json.load(handle)
args = sys.argv[1:]
with open(os.path.join(HERE, "calls.jsonl"), "a") as handle:
    handle.write(json.dumps(args) + "\n")


def save():
    with open(STATE, "w") as handle:
        json.dump(state, handle)


def fail(message):
    sys.stderr.write(message + "\n")
    sys.exit(1)


if state.get("daemon_down"):
    fail(%(down)r)
if args[:2] == ["image", "inspect"]:
    image = state["images"].get(args[2])
    if image is None:
        sys.stdout.write(state["missing"])
        fail("Error response from daemon: No such image: " + args[2])
    print(json.dumps([image], indent=4))
elif args[:1] == ["info"]:
    if state.get("info_error"):
        fail(state["info_error"])
    print(state["root"])
elif args[:2] == ["pull", "--quiet"]:
    image = state["registry"].get(args[2])
    if image is None:
        fail("Error response from daemon: manifest for %%s not found: manifest unknown" %% args[2])
    if not state.get("pull_keeps_nothing"):
        state["images"][args[2]] = image
        save()
    print(args[2])
elif args[:1] == ["tag"]:
    image = state["images"].get(args[1])
    if image is None:
        fail("Error response from daemon: No such image: " + args[1])
    state["images"][args[2]] = dict(image, RepoTags=sorted(set(image.get("RepoTags") or []) | {args[2]}))
    save()
elif args[:2] == ["load", "--quiet"]:
    head = sys.stdin.buffer.read(512)
    if not head:
        fail("requested load from stdin, but stdin is empty")
    if len(head) < 512 or head[257:262] != b"ustar":
        fail("Error processing tar file(exit status 1): archive/tar: invalid tar header")
    data = head + sys.stdin.buffer.read()
    state["loaded"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    members = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            if member.isfile():
                members[member.name] = archive.extractfile(member).read()
    for entry in json.loads(members["manifest.json"]):
        if state.get("store") == "containerd":
            image_id = "sha256:" + hashlib.sha256(members["manifest.json"]).hexdigest()
        else:
            image_id = "sha256:" + hashlib.sha256(members[entry["Config"]]).hexdigest()
        image = {"Id": image_id, "RepoTags": entry["RepoTags"], "RepoDigests": [],
                 "Size": sum(len(members[layer]) for layer in entry["Layers"]),
                 "RootFS": {"Type": "layers", "Layers": []}}
        for tag in entry["RepoTags"]:
            state["images"][tag] = image
            print("Loaded image: " + tag)
    save()
else:
    fail("stand-in docker: unexpected arguments %%r" %% (args,))
'''


class Docker:
    """The stand-in docker in its own directory, first on PATH."""

    def __init__(self, directory, images=None, registry=None, **state):
        directory.mkdir()
        self.directory = directory
        self.path = str(directory / "docker")
        self.state_path = directory / "state.json"
        self.calls_path = directory / "calls.jsonl"
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write(STANDIN % {"python": sys.executable, "down": DAEMON_DOWN})
        os.chmod(self.path, 0o755)
        self.write(dict(state, images=dict(images or {}), registry=dict(registry or {}), missing=MISSING,
                        root=ROOT_DIR))

    def write(self, state):
        self.state_path.write_text(json.dumps(state), encoding="utf-8")

    def state(self):
        return json.loads(self.state_path.read_text(encoding="utf-8"))

    def images(self):
        return {name: image["Id"] for name, image in self.state()["images"].items()}

    def calls(self):
        if not self.calls_path.exists():
            return []
        return [json.loads(line) for line in self.calls_path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def docker_dir(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    monkeypatch.setenv("PATH", "%s%s%s" % (directory, os.pathsep, os.environ.get("PATH", "/usr/bin:/bin")))
    return directory


def run_captured(capsys, **params):
    """The module's result, and what was written to stderr meanwhile (the sender's log)."""
    params.setdefault("ref", REF)
    with patch_module_args(params), pytest.raises(SystemExit):
        engine_image.main()
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def run(capsys, **params):
    return run_captured(capsys, **params)[0]


def outcome(result):
    """The result without what AnsibleModule adds to every result."""
    return {key: value for key, value in result.items() if key not in ("invocation", "warnings")}


def warnings_of(result):
    return [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]


# --- state=inspect -------------------------------------------------------------


@pytest.mark.parametrize(
    "images, image_id, ref_id, size",
    [
        # Pulled and tagged on the head: both names are the overlay2 fixture.
        ({LOCAL: HEAD, REF: HEAD}, HEAD["Id"], HEAD["Id"], HEAD["Size"]),
        # Pulled, not tagged yet: the size is the pulled image's.
        ({REF: HEAD}, None, HEAD["Id"], HEAD["Size"]),
        # Loaded from a peer: only the local tag, without a repo digest.
        ({LOCAL: WORKER}, WORKER["Id"], None, WORKER["Size"]),
        ({}, None, None, 0),
    ],
    ids=["tagged-and-pulled", "pulled-only", "loaded-only", "absent"],
)
def test_inspect_reports_both_names_and_the_root_dir(capsys, docker_dir, images, image_id, ref_id, size):
    docker = Docker(docker_dir, images)
    result = run(capsys, state="inspect")
    assert outcome(result) == {
        "changed": False, "pulled": False, "seconds": 0.0, "docker": docker.path,
        "local_ref": LOCAL, "pull_ref": REF,
        "previous_id": image_id, "image_id": image_id, "ref_id": ref_id, "size": size,
        "docker_root_dir": ROOT_DIR,
    }
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF, INFO]
    assert docker.images() == {name: image["Id"] for name, image in images.items()}


def test_inspect_asks_for_the_mirror_form_of_the_reference(capsys, docker_dir):
    docker = Docker(docker_dir, {MIRROR_REF: HEAD})
    result = run(capsys, state="inspect", registry_mirror=MIRROR)
    assert (result["pull_ref"], result["ref_id"], result["image_id"]) == (MIRROR_REF, HEAD["Id"], None)
    assert docker.calls() == [INSPECT_LOCAL, ["image", "inspect", MIRROR_REF], INFO]


def test_inspect_uses_the_docker_it_is_given(capsys, tmp_path, monkeypatch):
    docker = Docker(tmp_path / "elsewhere", {LOCAL: HEAD})
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = run(capsys, state="inspect", docker=docker.path)
    assert not result.get("failed") and result["docker"] == docker.path and result["image_id"] == HEAD["Id"]


def test_a_daemon_that_does_not_answer_fails_naming_the_error(capsys, docker_dir):
    docker = Docker(docker_dir, {LOCAL: HEAD}, daemon_down=True)
    result = run(capsys, state="inspect")
    assert result["failed"] is True
    assert result["msg"] == ("cannot read the images of this node's Docker daemon: docker image inspect exited 1: "
                             + DAEMON_DOWN)
    assert docker.calls() == [INSPECT_LOCAL]


def test_a_failing_docker_info_fails_with_its_command_and_error(capsys, docker_dir):
    docker = Docker(docker_dir, {LOCAL: HEAD}, info_error="permission denied while trying to connect")
    result = run(capsys, state="inspect")
    assert result["failed"] is True and result["rc"] == 1
    assert result["msg"] == ("reading the daemon failed: 'docker info --format {{.DockerRootDir}}' exited 1: "
                             "permission denied while trying to connect")
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF, INFO]


def test_a_node_without_docker_fails(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run(capsys, state="inspect")
    assert result["failed"] is True and 'Failed to find required executable "docker"' in result["msg"]


@pytest.mark.parametrize("state", ["inspect", "pulled"])
def test_a_reference_not_pinned_by_digest_is_refused_before_docker_runs(capsys, docker_dir, state):
    docker = Docker(docker_dir, {LOCAL: HEAD})
    result = run(capsys, state=state, ref="nvcr.io/nvidia/vllm:25.11-py3")
    assert result["failed"] is True
    assert result["msg"].startswith("engine image reference refused: 'nvcr.io/nvidia/vllm:25.11-py3' is not pinned "
                                    "by digest")
    assert result["msg"].endswith("; set engine_image_ref to the pinned form")
    assert docker.calls() == []


# --- state=pulled --------------------------------------------------------------


@pytest.mark.parametrize("expected_id", [None, HEAD["Id"]])
def test_pulled_pulls_the_pinned_ref_then_tags_it(capsys, docker_dir, expected_id):
    docker = Docker(docker_dir, registry={REF: HEAD})
    result = run(capsys, state="pulled", expected_id=expected_id)
    assert not result.get("failed"), result.get("msg")
    assert (result["changed"], result["pulled"]) == (True, True)
    assert (result["previous_id"], result["image_id"], result["ref_id"]) == (None, HEAD["Id"], HEAD["Id"])
    assert result["size"] == HEAD["Size"] and isinstance(result["seconds"], float)
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF, ["pull", "--quiet", REF], INSPECT_REF,
                              ["tag", REF, LOCAL], INSPECT_LOCAL]
    assert docker.images() == {REF: HEAD["Id"], LOCAL: HEAD["Id"]}


def test_pulled_only_tags_an_image_the_daemon_already_has(capsys, docker_dir):
    docker = Docker(docker_dir, {REF: HEAD}, registry={REF: HEAD})
    result = run(capsys, state="pulled")
    assert (result["changed"], result["pulled"], result["image_id"]) == (True, False, HEAD["Id"])
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF, ["tag", REF, LOCAL], INSPECT_LOCAL]


@pytest.mark.parametrize("check_mode", [False, True])
def test_pulled_does_nothing_when_the_tag_holds_the_pinned_image(capsys, docker_dir, check_mode):
    docker = Docker(docker_dir, {REF: HEAD, LOCAL: HEAD}, registry={REF: HEAD})
    result = run(capsys, state="pulled", _ansible_check_mode=check_mode)
    assert (result["changed"], result["pulled"]) == (False, False)
    assert (result["previous_id"], result["image_id"], result["ref_id"]) == (HEAD["Id"], HEAD["Id"], HEAD["Id"])
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF]


def test_pulled_in_check_mode_reports_the_pull_and_moves_nothing(capsys, docker_dir):
    docker = Docker(docker_dir, registry={REF: HEAD})
    result = run(capsys, state="pulled", _ansible_check_mode=True)
    assert (result["changed"], result["pulled"]) == (True, True)
    # Not known before the pull.
    assert (result["image_id"], result["ref_id"], result["size"]) == (None, None, 0)
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF]
    assert docker.images() == {}


def test_pulled_in_check_mode_predicts_the_tag(capsys, docker_dir):
    docker = Docker(docker_dir, {REF: HEAD})
    result = run(capsys, state="pulled", _ansible_check_mode=True)
    assert (result["changed"], result["pulled"], result["image_id"]) == (True, False, HEAD["Id"])
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF]
    assert docker.images() == {REF: HEAD["Id"]}


def test_pulled_moves_a_tag_that_holds_another_image_and_says_so(capsys, docker_dir):
    docker = Docker(docker_dir, {REF: HEAD, LOCAL: WORKER})
    result = run(capsys, state="pulled")
    assert (result["changed"], result["previous_id"], result["image_id"]) == (True, WORKER["Id"], HEAD["Id"])
    assert warnings_of(result) == ["%s held image %s, not %s (the image of %s); tagging it again"
                                   % (LOCAL, WORKER["Id"], HEAD["Id"], REF)]
    assert ["tag", REF, LOCAL] in docker.calls()
    assert docker.images()[LOCAL] == HEAD["Id"]


def test_pulled_refuses_an_image_with_another_id_and_leaves_the_tag(capsys, docker_dir):
    docker = Docker(docker_dir, registry={REF: HEAD})
    result = run(capsys, state="pulled", expected_id=WORKER["Id"])
    assert result["failed"] is True
    assert result["msg"].startswith("%s is image %s here, expected %s (engine_image_expected_id)"
                                    % (REF, HEAD["Id"], WORKER["Id"]))
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF, ["pull", "--quiet", REF], INSPECT_REF]
    assert LOCAL not in docker.images()


def test_a_failed_pull_fails_with_the_registry_error(capsys, docker_dir):
    docker = Docker(docker_dir)
    result = run(capsys, state="pulled")
    assert result["failed"] is True and result["rc"] == 1
    assert result["msg"] == ("pulling %s failed: 'docker pull --quiet %s' exited 1: Error response from daemon: "
                             "manifest for %s not found: manifest unknown" % (REF, REF, REF))
    assert docker.calls()[-1] == ["pull", "--quiet", REF]


def test_a_pull_that_leaves_no_image_fails(capsys, docker_dir):
    docker = Docker(docker_dir, registry={REF: HEAD}, pull_keeps_nothing=True)
    result = run(capsys, state="pulled")
    assert result["failed"] is True
    assert result["msg"] == "'docker pull %s' succeeded but the image is not there" % REF
    assert docker.calls() == [INSPECT_LOCAL, INSPECT_REF, ["pull", "--quiet", REF], INSPECT_REF]


def test_pulled_through_a_mirror_pulls_and_tags_the_mirror_form(capsys, docker_dir):
    docker = Docker(docker_dir, registry={MIRROR_REF: HEAD})
    result = run(capsys, state="pulled", registry_mirror=MIRROR + "/")
    assert not result.get("failed"), result.get("msg")
    assert (result["pull_ref"], result["image_id"]) == (MIRROR_REF, HEAD["Id"])
    assert ["pull", "--quiet", MIRROR_REF] in docker.calls() and ["tag", MIRROR_REF, LOCAL] in docker.calls()


# --- state=received ------------------------------------------------------------


def archive_bytes(tag=LOCAL, layer_size=3 * 1024 * 1024 + 17):
    """A docker save archive (classic layout) of one image, and the image ID
    the classic store gives it (the digest of its configuration)."""
    layer = bytes(range(256)) * (layer_size // 256) + b"\x00" * (layer_size % 256)
    config = json.dumps({"architecture": "arm64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}},
                        sort_keys=True).encode()
    config_hex = hashlib.sha256(config).hexdigest()
    layer_name = "%s/layer.tar" % hashlib.sha256(layer).hexdigest()
    manifest = json.dumps([{"Config": config_hex + ".json", "RepoTags": [tag], "Layers": [layer_name]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in ((layer_name, layer), (config_hex + ".json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue(), "sha256:" + config_hex, "sha256:" + hashlib.sha256(manifest).hexdigest()


@contextmanager
def sender(argv, **options):
    """_image_stream's sender on 127.0.0.1 in a thread; yields its port."""
    ready, stop, ports = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=_image_stream.serve, args=("127.0.0.1", 0, argv),
                              kwargs=dict(options, ready=lambda port: (ports.append(port), ready.set()), stop=stop),
                              daemon=True)
    thread.start()
    assert ready.wait(10), "the sender did not start"
    try:
        yield ports[0]
    finally:
        stop.set()
        thread.join(10)
        assert not thread.is_alive(), "the sender did not stop"


def free_port():
    """A port nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def receive_captured(capsys, port, expected_id, **params):
    return run_captured(capsys, state="received", expected_id=expected_id, source_address="127.0.0.1",
                        source_port=port, connect_timeout=5, idle_timeout=10, **params)


def receive(capsys, port, expected_id, **params):
    return receive_captured(capsys, port, expected_id, **params)[0]


def test_received_loads_the_streamed_archive_under_the_local_tag(capsys, docker_dir, tmp_path):
    data, image_id, _layers = archive_bytes()
    (tmp_path / "image.tar").write_bytes(data)
    docker = Docker(docker_dir)
    with sender(["cat", str(tmp_path / "image.tar")], connections=1) as port:
        result = receive(capsys, port, image_id)
    assert not result.get("failed"), result.get("msg")
    assert (result["changed"], result["pulled"], result["received_bytes"]) == (True, False, len(data))
    assert (result["previous_id"], result["image_id"], result["ref_id"]) == (None, image_id, None)
    assert docker.calls() == [INSPECT_LOCAL, ["load", "--quiet"], INSPECT_LOCAL]
    # docker load read the archive byte for byte.
    assert docker.state()["loaded"] == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert docker.images() == {LOCAL: image_id}


def test_received_reloads_a_tag_that_holds_another_image(capsys, docker_dir, tmp_path):
    data, image_id, _layers = archive_bytes()
    (tmp_path / "image.tar").write_bytes(data)
    Docker(docker_dir, {LOCAL: WORKER})
    with sender(["cat", str(tmp_path / "image.tar")], connections=1) as port:
        result = receive(capsys, port, image_id)
    assert not result.get("failed"), result.get("msg")
    assert (result["previous_id"], result["image_id"]) == (WORKER["Id"], image_id)
    assert warnings_of(result) == ["%s held image %s, expected %s; loading it again from 127.0.0.1"
                                   % (LOCAL, WORKER["Id"], image_id)]


@pytest.mark.parametrize("check_mode", [False, True])
def test_received_connects_to_nobody_when_the_tag_holds_the_image(capsys, docker_dir, check_mode):
    docker = Docker(docker_dir, {LOCAL: HEAD})
    result = receive(capsys, free_port(), HEAD["Id"], _ansible_check_mode=check_mode)
    assert not result.get("failed"), result.get("msg")
    assert (result["changed"], result["received_bytes"], result["image_id"]) == (False, 0, HEAD["Id"])
    assert docker.calls() == [INSPECT_LOCAL]


def test_received_in_check_mode_reports_the_load_and_connects_to_nobody(capsys, docker_dir):
    docker = Docker(docker_dir, {LOCAL: WORKER})
    result = receive(capsys, free_port(), HEAD["Id"], _ansible_check_mode=True)
    assert not result.get("failed"), result.get("msg")
    assert (result["changed"], result["received_bytes"], result["image_id"]) == (True, 0, None)
    assert warnings_of(result) == ["%s held image %s, expected %s; it would be loaded again from 127.0.0.1"
                                   % (LOCAL, WORKER["Id"], HEAD["Id"])]
    assert docker.calls() == [INSPECT_LOCAL]


@pytest.mark.parametrize("case", ["containerd-store", "other-tag"])
def test_received_refuses_an_image_that_loads_under_another_id(capsys, docker_dir, tmp_path, case):
    data, image_id, manifest_digest = archive_bytes(tag=LOCAL if case == "containerd-store" else "other/engine:1")
    (tmp_path / "image.tar").write_bytes(data)
    docker = Docker(docker_dir, store="containerd" if case == "containerd-store" else "overlay2")
    with sender(["cat", str(tmp_path / "image.tar")], connections=1) as port:
        result = receive(capsys, port, image_id)
    assert result["failed"] is True
    found = manifest_digest if case == "containerd-store" else "nothing"
    assert result["msg"] == "after loading %d bytes from 127.0.0.1:%d, %s holds %s, expected %s" % (
        len(data), port, LOCAL, found, image_id)
    assert result["received_bytes"] == len(data)
    assert docker.calls() == [INSPECT_LOCAL, ["load", "--quiet"], INSPECT_LOCAL]


def test_received_fails_when_nobody_listens(capsys, docker_dir):
    docker = Docker(docker_dir)
    port = free_port()
    result = run(capsys, state="received", expected_id=HEAD["Id"], source_address="127.0.0.1", source_port=port,
                 connect_timeout=0.2)
    assert result["failed"] is True
    assert result["msg"].startswith("cannot reach the image sender at 127.0.0.1:%d: [Errno 111] Connection refused; "
                                    "expected the sending node's transient unit to listen there" % port)
    assert docker.calls() == [INSPECT_LOCAL]


def test_a_sender_whose_docker_save_fails_sends_nothing_and_the_receiver_says_why(capsys, docker_dir):
    docker = Docker(docker_dir)
    save = ["sh", "-c", "echo 'Error response from daemon: reference does not exist' >&2; exit 1"]
    with sender(save, connections=1) as port:
        result, log = receive_captured(capsys, port, HEAD["Id"])
    assert result["failed"] is True and result["received_bytes"] == 0
    assert result["msg"] == (
        "loading the image streamed from 127.0.0.1:%d failed after 0 bytes: the sender closed the connection "
        "without data: it serves only the fabric addresses of the receiving nodes (roce_fabric_node_address), or "
        "its docker save failed; the sender logs to the journal of its transient unit" % port)
    assert result["stderr"] == "requested load from stdin, but stdin is empty\n"
    assert docker.calls() == [INSPECT_LOCAL, ["load", "--quiet"]]
    assert "127.0.0.1: sh exited 1: Error response from daemon: reference does not exist" in log


def test_a_sender_that_does_not_serve_this_address_sends_nothing(capsys, docker_dir, tmp_path):
    data, image_id, _layers = archive_bytes()
    (tmp_path / "image.tar").write_bytes(data)
    Docker(docker_dir)
    with sender(["cat", str(tmp_path / "image.tar")], allow=["192.0.2.7"], connections=1) as port:
        result, log = receive_captured(capsys, port, image_id)
    assert result["failed"] is True and result["received_bytes"] == 0
    assert "failed after 0 bytes: the sender closed the connection without data" in result["msg"]
    assert "127.0.0.1: refused, not one of 192.0.2.7" in log


def test_a_stream_that_is_not_an_image_archive_fails_with_the_loader_error(capsys, docker_dir, tmp_path):
    (tmp_path / "garbage").write_bytes(b"\x5a" * (4 * 1024 * 1024))
    docker = Docker(docker_dir)
    with sender(["cat", str(tmp_path / "garbage")], connections=1) as port:
        result = receive(capsys, port, HEAD["Id"])
    assert result["failed"] is True and result["rc"] == 1
    assert result["msg"].startswith("loading the image streamed from 127.0.0.1:%d failed after " % port)
    # The loader gave up after the first block; the rest could not be written to it.
    assert "the loader stopped reading after " in result["msg"]
    assert result["stderr"] == "Error processing tar file(exit status 1): archive/tar: invalid tar header\n"
    assert result["received_bytes"] < 4 * 1024 * 1024
    assert docker.calls() == [INSPECT_LOCAL, ["load", "--quiet"]]


def test_received_needs_the_expected_id_and_the_sender(capsys, docker_dir):
    docker = Docker(docker_dir)
    result = run(capsys, state="received")
    assert result["failed"] is True
    assert result["msg"] == "state is received but all of the following are missing: expected_id, source_address"
    assert docker.calls() == []


def test_received_keeps_its_progress_against_the_expected_size(capsys, docker_dir, tmp_path):
    data, image_id, _layers = archive_bytes()
    (tmp_path / "image.tar").write_bytes(data)
    docker = Docker(docker_dir)
    progress = tmp_path / "progress.json"
    with sender(["cat", str(tmp_path / "image.tar")], connections=1) as port:
        result = receive(capsys, port, image_id, progress_file=str(progress), progress_interval=1,
                         expected_bytes=len(data) + 1000)
    assert not result.get("failed"), result.get("msg")
    assert docker.state()["loaded"]["bytes"] == len(data)
    record = json.loads(progress.read_text())
    assert record["phase"] == "received" and record["total"] == len(data) + 1000 and record["estimated"] is True
    # The last record, written when the stream ended, holds every byte.
    assert record["done"] == result["received_bytes"] == len(data)
