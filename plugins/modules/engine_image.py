#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_image
short_description: Put a digest-pinned engine image on a node under a stable local tag
version_added: "0.1.0"
description:
  - Works on the node's Docker daemon through the C(docker) CLI.
  - The image is named by a digest-pinned reference O(ref) (V(registry/repo@sha256:<64 hex>) or
    V(registry/repo:tag@sha256:<64 hex>)); anything else is refused.
  - Every node keeps the image under the local tag C(<local_repository>:<first 12 hex digits of the digest>)
    (V(dgxspark/engine:37284a750f9a)). An image loaded from C(docker save) has no repo digest, so this tag is what
    keeps it out of C(docker image prune) and what the engine units run.
  - O(state=inspect) only reads; it reports the image under the local tag and under the pulled reference, and the
    daemon's root directory (for a free space check).
  - O(state=pulled) pulls the pinned reference when the daemon lacks it (an external pull, reported as RV(pulled))
    and points the local tag at it.
  - O(state=received) makes the local tag hold O(expected_id), loading the archive that a sending node streams on
    O(source_address):O(source_port) when it does not (see C(plugins/module_utils/_image_stream.py)).
  - O(state=available) only asks the registry (O(registry_mirror) when given) whether it holds the digest of O(ref),
    over the OCI distribution API (C(HEAD /v2/<name>/manifests/<digest>), with the anonymous token a C(Bearer)
    challenge asks for), from the node and without Docker; it fails naming the URL when the registry answers 404,
    cannot be reached or answers anything else (RV(status) is then the HTTP status, or null when unreachable).
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the daemon's images and reports what would be pulled, tagged or received, moving nothing;
      O(state=available) only reads and runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    description: When run twice in a row with the same options outside check mode, the second run reports no change.
    support: full
    details: Nothing is pulled, tagged or received when the local tag already holds the image.
  platform:
    platforms: posix
options:
  ref:
    description: Digest-pinned reference of the engine image.
    type: str
    required: true
  state:
    description: What to ensure; see the description.
    type: str
    choices: [available, inspect, pulled, received]
    default: pulled
  local_repository:
    description: Repository part of the local tag.
    type: str
    default: dgxspark/engine
  registry_mirror:
    description:
      - With O(state=pulled), pull the same digest from this registry (V(host[:port][/prefix])) instead of the
        registry of O(ref). The mirror must serve the upstream repository paths, as a pull-through cache does.
      - With O(state=available), ask this registry instead of the registry of O(ref).
    type: str
  insecure_registries:
    description:
      - With O(state=available), the C(insecure-registries) of the node's Docker daemon, each V(host[:port]) or a
        CIDR. A registry listed there, or on a loopback address, is asked over HTTPS without certificate checks and
        then over plain HTTP, as the daemon pulls from it.
    type: list
    elements: str
    default: []
  timeout:
    description: With O(state=available), seconds to wait for the registry to answer.
    type: float
    default: 30
  expected_id:
    description:
      - Image ID (V(sha256:...)) the local tag must end up holding. Required with O(state=received); with
        O(state=pulled) a pulled image with another ID is refused.
    type: str
  source_address:
    description: Address of the node that streams the archive, with O(state=received).
    type: str
  source_port:
    description: TCP port the sending node listens on.
    type: int
    default: 7070
  connect_timeout:
    description: Seconds to wait for the sending node to accept the connection.
    type: float
    default: 30
  idle_timeout:
    description: Seconds without data after which a transfer is abandoned.
    type: float
    default: 300
  docker:
    description: Path of the C(docker) CLI; found on E(PATH) when unset.
    type: path
  expected_bytes:
    description:
      - With O(state=received), about how many bytes the archive holds (the image's size on the sending node), so
        that the progress lines can say how much is left. Only shown, never checked.
    type: int
  progress_file:
    description:
      - With O(state=received), a file on the node where the load keeps its progress (bytes received), replaced
        atomically about twice per O(progress_interval). The action of this module sets it to a file of its
        temporary directory and shows a line from it at every poll; leave it unset.
      - While it is set, a load that no controller has polled for ten O(progress_interval) (at least two minutes)
        stops, as it would when the connection drops.
    type: path
  progress_interval:
    description:
      - Seconds between the progress lines the action shows while a node loads the image a peer streams
        (O(state=received)); V(0) runs the module without them, as before. Check mode never shows any.
    type: float
    default: 10
notes:
  - The image ID is the digest of the image configuration with Docker's classic image store, so it is the same on
    every node that holds the same image, whether pulled or loaded.
seealso:
  - module: dgxspark.cluster.disk_space
"""

EXAMPLES = r"""
- name: Engine image | Pull the pinned image on this node and tag it
  dgxspark.cluster.engine_image:
    ref: nvcr.io/nvidia/vllm@sha256:5bcc384191682c50aeb73ada3da89494949d597ba310a946c97ac2e617a1495e
  register: pulled

- name: Engine image | Load the image a peer streams over the fabric
  dgxspark.cluster.engine_image:
    ref: nvcr.io/nvidia/vllm@sha256:5bcc384191682c50aeb73ada3da89494949d597ba310a946c97ac2e617a1495e
    state: received
    expected_id: "{{ pulled.image_id }}"
    source_address: 192.168.100.11
    source_port: 7070

- name: Engine image | Read what the node holds
  dgxspark.cluster.engine_image:
    ref: nvcr.io/nvidia/vllm@sha256:5bcc384191682c50aeb73ada3da89494949d597ba310a946c97ac2e617a1495e
    state: inspect
  register: held
"""

RETURN = r"""
local_ref:
  description: The local tag of the image.
  type: str
  returned: always
  sample: dgxspark/engine:5bcc38419168
pull_ref:
  description: The reference that is (or would be) pulled, O(ref) or its mirror form.
  type: str
  returned: always
  sample: nvcr.io/nvidia/vllm@sha256:5bcc384191682c50aeb73ada3da89494949d597ba310a946c97ac2e617a1495e
image_id:
  description: ID of the image under the local tag afterwards; null when absent (or, in check mode, not known yet).
  type: str
  returned: always
  sample: sha256:55b4737370f58b7639c32021798d19d1a024e8802aafa7211560dff154e9732f
previous_id:
  description: ID the local tag held before; null when it was absent.
  type: str
  returned: always
ref_id:
  description: ID of the image under RV(pull_ref); null when the daemon has no image by that digest.
  type: str
  returned: always
size:
  description: Size in bytes of the image under the local tag (else under RV(pull_ref)); 0 when neither is present.
  type: int
  returned: always
pulled:
  description: Whether the image was (in check mode, would be) pulled from a registry.
  type: bool
  returned: always
received_bytes:
  description: Bytes of archive loaded from the sending node.
  type: int
  returned: when O(state=received)
seconds:
  description: Seconds the pull or transfer took.
  type: float
  returned: always
docker:
  description: Path of the C(docker) CLI used (null with O(state=available), which needs none).
  type: str
  returned: always
  sample: /usr/bin/docker
url:
  description: The manifest URL the registry was asked.
  type: str
  returned: when O(state=available)
  sample: https://nvcr.io/v2/nvidia/vllm/manifests/sha256:37284a750f9a...
status:
  description: The registry's HTTP answer to the manifest request; null when it could not be reached.
  type: int
  returned: when O(state=available)
  sample: 200
docker_root_dir:
  description: The daemon's root directory, where images are unpacked.
  type: str
  returned: when O(state=inspect)
  sample: /var/lib/docker
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import _image, _image_stream, _registry
from ansible_collections.dgxspark.cluster.plugins.module_utils._progress import (
    ProgressAbandoned,
    ProgressFile,
    abandon_after,
    writer_interval,
)

C_LOCALE = {"LC_ALL": "C", "LANGUAGE": "C"}


class EngineImage:
    def __init__(self, module):
        self.module = module
        params = module.params
        try:
            _image.parse_ref(params["ref"])
            self.local_ref = _image.local_ref(params["ref"], params["local_repository"])
            self.pull_ref = _image.mirror_ref(params["ref"], params["registry_mirror"])
        except ValueError as exc:
            module.fail_json(msg="engine image reference refused: %s; set engine_image_ref to the pinned form" % exc)
        # Asking a registry needs no Docker: the preflight asks before Docker is installed.
        self.docker = None if params["state"] == "available" else (
            params["docker"] or module.get_bin_path("docker", required=True))
        self.result = {
            "changed": False,
            "local_ref": self.local_ref,
            "pull_ref": self.pull_ref,
            "pulled": False,
            "seconds": 0.0,
            "docker": self.docker,
        }

    def run(self, argv):
        return self.module.run_command([self.docker] + argv, environ_update=C_LOCALE)

    def must(self, argv, what):
        rc, out, err = self.run(argv)
        if rc != 0:
            self.module.fail_json(
                msg="%s failed: 'docker %s' exited %d: %s" % (what, " ".join(argv), rc, (err or out).strip()),
                rc=rc, stdout=out, stderr=err, **self.result
            )
        return out

    def inspect(self, name):
        rc, out, err = self.run(["image", "inspect", name])
        try:
            return _image.parse_inspect(rc, out, err)
        except RuntimeError as exc:
            self.module.fail_json(msg="cannot read the images of this node's Docker daemon: %s" % exc, **self.result)

    def record(self, local, ref_image):
        self.result["image_id"] = local["id"] if local else None
        self.result["ref_id"] = ref_image["id"] if ref_image else None
        self.result["size"] = (local or ref_image or {}).get("size", 0)

    def state_inspect(self):
        local, ref_image = self.inspect(self.local_ref), self.inspect(self.pull_ref)
        root = self.must(["info", "--format", "{{.DockerRootDir}}"], "reading the daemon").strip()
        self.result.update(_image.inspect_result(
            {"local_ref": self.local_ref, "pull_ref": self.pull_ref}, self.docker, local, ref_image, root))

    def state_pulled(self):
        expected = self.module.params["expected_id"]
        local, ref_image = self.inspect(self.local_ref), self.inspect(self.pull_ref)
        self.result["previous_id"] = local["id"] if local else None
        if ref_image is None:
            self.result.update(changed=True, pulled=True)
            if self.module.check_mode:
                self.record(None, None)
                return
            started = time.monotonic()
            self.must(["pull", "--quiet", self.pull_ref], "pulling %s" % self.pull_ref)
            self.result["seconds"] = round(time.monotonic() - started, 2)
            ref_image = self.inspect(self.pull_ref)
            if ref_image is None:
                self.module.fail_json(msg="'docker pull %s' succeeded but the image is not there" % self.pull_ref, **self.result)
        if expected and ref_image["id"] != expected:
            self.module.fail_json(
                msg="%s is image %s here, expected %s (engine_image_expected_id); the registry serves other content "
                "for this digest, or the daemon uses another image store" % (self.pull_ref, ref_image["id"], expected),
                **self.result
            )
        if local is None or local["id"] != ref_image["id"]:
            if local is not None:
                self.module.warn("%s held image %s, not %s (the image of %s); tagging it again"
                                 % (self.local_ref, local["id"], ref_image["id"], self.pull_ref))
            self.result["changed"] = True
            if not self.module.check_mode:
                self.must(["tag", self.pull_ref, self.local_ref], "tagging %s" % self.pull_ref)
                local = self.inspect(self.local_ref)
            else:
                local = ref_image
        self.record(local, ref_image)

    def state_available(self):
        params = self.module.params
        client = _registry.RegistryClient(timeout=params["timeout"])
        try:
            answer = client.manifest_exists(params["ref"], params["registry_mirror"], params["insecure_registries"])
        except _registry.RegistryError as exc:
            self.result.update(url=exc.url, status=exc.status)
            self.module.fail_json(msg=str(exc), **self.result)
        self.result.update(url=answer["url"], status=answer["status"])
        if not answer["exists"]:
            self.module.fail_json(msg="%s answered HTTP 404: the registry does not hold %s"
                                  % (answer["url"], self.pull_ref), **self.result)

    def state_received(self):
        params = self.module.params
        expected = params["expected_id"]
        local = self.inspect(self.local_ref)
        self.result["previous_id"] = local["id"] if local else None
        self.result["received_bytes"] = 0
        if local is not None and local["id"] == expected:
            self.record(local, None)
            return
        if local is not None:
            self.module.warn("%s held image %s, expected %s; %s from %s" % (
                self.local_ref, local["id"], expected,
                "it would be loaded again" if self.module.check_mode else "loading it again", params["source_address"]))
        self.result["changed"] = True
        if self.module.check_mode:
            self.record(None, None)
            return
        source = "%s:%d" % (params["source_address"], params["source_port"])
        progress = None
        if params["progress_file"]:
            progress = ProgressFile(
                params["progress_file"], "received", total=params["expected_bytes"] or None, estimated=True,
                every=writer_interval(params["progress_interval"]),
                abandon_after=abandon_after(params["progress_interval"]))
            progress.update(force=True)
        try:
            outcome = _image_stream.receive(
                params["source_address"], params["source_port"], [self.docker, "load", "--quiet"],
                connect_timeout=params["connect_timeout"], idle_timeout=params["idle_timeout"],
                progress=None if progress is None else (lambda received: progress.update(done=received)),
            )
        except ProgressAbandoned as exc:
            self.module.fail_json(msg="loading the image streamed from %s: %s" % (source, exc), **self.result)
        except OSError as exc:
            self.module.fail_json(
                msg="cannot reach the image sender at %s: %s; expected the sending node's transient unit to listen "
                "there (check engine_image_source_address, engine_image_port and that the fabric links up)" % (source, exc),
                **self.result
            )
        if progress is not None:
            progress.finish(done=outcome["bytes"])
        self.result.update(received_bytes=outcome["bytes"], seconds=outcome["seconds"])
        if outcome["bytes"] == 0 and not outcome["error"]:
            outcome["error"] = ("the sender closed the connection without data: it serves only the fabric addresses "
                                "of the receiving nodes (roce_fabric_node_address), or its docker save failed")
        if outcome["rc"] != 0 or outcome["error"]:
            self.module.fail_json(
                msg="loading the image streamed from %s failed after %d bytes: %s; the sender logs to the journal of "
                "its transient unit" % (source, outcome["bytes"], outcome["error"] or outcome["stderr"].strip()),
                rc=outcome["rc"], stdout=outcome["stdout"], stderr=outcome["stderr"], **self.result
            )
        local = self.inspect(self.local_ref)
        self.record(local, None)
        if local is None or local["id"] != expected:
            self.module.fail_json(
                msg="after loading %d bytes from %s, %s holds %s, expected %s" % (
                    outcome["bytes"], source, self.local_ref, local["id"] if local else "nothing", expected),
                **self.result
            )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ref=dict(type="str", required=True),
            state=dict(type="str", choices=["available", "inspect", "pulled", "received"], default="pulled"),
            local_repository=dict(type="str", default=_image.DEFAULT_LOCAL_REPOSITORY),
            registry_mirror=dict(type="str"),
            insecure_registries=dict(type="list", elements="str", default=[]),
            timeout=dict(type="float", default=30),
            expected_id=dict(type="str"),
            source_address=dict(type="str"),
            source_port=dict(type="int", default=7070),
            connect_timeout=dict(type="float", default=30),
            idle_timeout=dict(type="float", default=300),
            docker=dict(type="path"),
            expected_bytes=dict(type="int"),
            progress_file=dict(type="path"),
            progress_interval=dict(type="float", default=10),
        ),
        required_if=[("state", "received", ("expected_id", "source_address"))],
        supports_check_mode=True,
    )
    worker = EngineImage(module)
    getattr(worker, "state_" + module.params["state"])()
    module.exit_json(**worker.result)


if __name__ == "__main__":
    main()
