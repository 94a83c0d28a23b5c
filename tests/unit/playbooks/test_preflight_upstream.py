# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight's upstream check (roles/preflight, tasks_from upstream) as a play runs it: two
hosts on the local connection ask a fake registry and the Hub stand-in on the loopback. The
refusals name host, variable, what was found and the fix (or the URL and the switch); the Hub
token never reaches the output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from unit_support import REGISTRY_DIGEST_HELD, REPO_ROOT, served_hub, served_registry

ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
HUB_TOKEN = "hf_preflight_test_token_0123456789"
REPO = "org/tiny"
MISSING_DIGEST = "sha256:" + "9a3e4f1c0e7b" * 5 + "2d11"
MISSING_REVISION = "6e4d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1"
PLAY = [{
    "name": "Preflight upstream",
    "hosts": "dgxspark_cluster",
    "gather_facts": False,
    "tasks": [{"name": "Ask",
               "ansible.builtin.import_role": {"name": "dgxspark.cluster.preflight", "tasks_from": "upstream"}}],
}]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    with served_registry() as registry, served_hub(root / "repo", {"config.json": b"{}\n"}, REPO, HUB_TOKEN) as hub:
        yield registry, hub


def run(tmp_path, group_vars, host_vars=None):
    hosts = {name: dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                        **(host_vars or {}).get(name, {})) for name in sorted({"spark1", "spark2", *(host_vars or {})})}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"dgxspark_cluster": {"hosts": hosts, "vars": group_vars}}))
    playbook = tmp_path / "playbook.yml"
    playbook.write_text(yaml.safe_dump(PLAY, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(playbook)], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return done, " ".join((done.stdout + done.stderr).split())


def settings(registry, hub, **changes):
    return dict({
        "engine_image_ref": "%s/dgxspark/vllm:v1@%s" % (registry.address, REGISTRY_DIGEST_HELD),
        "engine_image_strategy": "pull",
        "model_weights_hf_repo_id": REPO,
        "model_weights_hf_revision": hub.repo.sha,
        "model_weights_hf_endpoint": hub.endpoint,
        "model_weights_hf_token": HUB_TOKEN,
    }, **changes)


def test_a_pinned_image_and_revision_upstream_holds_pass(tmp_path, upstream):
    registry, hub = upstream
    asked = len(registry.requests)
    done, output = run(tmp_path, settings(registry, hub))
    assert done.returncode == 0, output[-3000:]
    # The pull strategy: both nodes asked the registry (a 401, the token and the HEAD again each).
    manifests = [path for method, path, _headers in registry.requests[asked:] if method == "HEAD"]
    assert len(manifests) == 4, registry.requests[asked:]
    assert HUB_TOKEN not in output


def test_a_missing_digest_and_revision_are_refused_naming_host_variable_and_fix(tmp_path, upstream):
    registry, hub = upstream
    missing_ref = "%s/dgxspark/vllm:v1@%s" % (registry.address, MISSING_DIGEST)
    done, output = run(tmp_path, settings(registry, hub, model_weights_hf_revision=MISSING_REVISION),
                       {"spark2": {"engine_image_ref": missing_ref}})
    assert done.returncode != 0
    assert ("spark2: engine_image_ref is %s, which this node would pull: http://%s/v2/dgxspark/vllm/manifests/%s "
            "answered HTTP 404: the registry does not hold %s. Push the image you tested there, or put the digest of "
            "the image you tested in engine_image_ref (docker image inspect --format '{{index .RepoDigests 0}}' IMAGE "
            "prints it)." % (missing_ref, registry.address, MISSING_DIGEST, missing_ref)) in output, output[-3000:]
    assert "spark1: engine_image_ref" not in output
    assert ("spark1: model_weights_hf_revision is %s of model_weights_hf_repo_id %s, which this node would download: "
            "%s/api/models/%s/revision/%s: " % (MISSING_REVISION, REPO, hub.endpoint, REPO, MISSING_REVISION)) in output
    assert "Put the commit hash of the revision you tested in model_weights_hf_revision" in output
    assert "git ls-remote %s/%s" % (hub.endpoint, REPO) in output
    assert HUB_TOKEN not in output


def test_an_unreachable_upstream_names_the_url_and_the_switch_that_skips_it(tmp_path, upstream):
    registry, hub = upstream
    unreachable_ref = "127.0.0.1:9/dgxspark/vllm@" + REGISTRY_DIGEST_HELD
    # spark1 (the Hub's source) reaches the registry but not the Hub; spark2 reaches no
    # registry; spark3 turns the check off, asks nothing and passes.
    done, output = run(tmp_path, settings(registry, hub, model_weights_hf_endpoint="http://127.0.0.1:9"), {
        "spark2": {"engine_image_ref": unreachable_ref},
        "spark3": {"engine_image_ref": unreachable_ref, "preflight_check_upstream": False},
    })
    assert done.returncode != 0
    assert ("spark2: engine_image_ref is %s, which this node would pull: cannot reach the registry 127.0.0.1:9 "
            "(https://127.0.0.1:9/v2/dgxspark/vllm/manifests/%s:" % (unreachable_ref, REGISTRY_DIGEST_HELD)) in output, \
        output[-3000:]
    assert "or set preflight_check_upstream: false where the image reaches the nodes another way" in output
    assert ("spark1: model_weights_hf_revision is %s of model_weights_hf_repo_id %s, which this node would download: "
            "http://127.0.0.1:9/api/models/%s/revision/%s: cannot reach http://127.0.0.1:9" % (
                hub.repo.sha, REPO, REPO, hub.repo.sha)) in output
    assert "or set preflight_check_upstream: false where the weights reach the nodes another way" in output
    assert "spark3:" not in output.partition("PLAY RECAP")[0]
    recap = done.stdout.partition("PLAY RECAP")[2]
    assert re.search(r"^spark3\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", recap, re.MULTILINE), recap
    for host in ("spark1", "spark2"):
        assert re.search(r"^%s\s+: .*failed=1" % host, recap, re.MULTILINE), recap
