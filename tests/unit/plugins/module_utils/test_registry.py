# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Asking a registry for a digest over the OCI distribution API, against a fake registry on the
loopback that answers as Docker Hub, nvcr.io and a plain registry do: 401 with a Bearer challenge
until an anonymous token comes with the request, then 200 for the digest it holds and 404 for
any other; and the engine_image module's state=available around it."""

from __future__ import annotations

import pytest

from unit_support import REGISTRY_DIGEST_HELD as HELD
from unit_support import REGISTRY_TOKEN as TOKEN
from unit_support import module_result
from unit_support import served_registry as fake_registry

from ansible_collections.dgxspark.cluster.plugins.module_utils._registry import (
    MANIFEST_TYPES,
    RegistryClient,
    RegistryError,
    is_insecure,
    manifest_location,
    parse_challenge,
)
from ansible_collections.dgxspark.cluster.plugins.modules import engine_image

OTHER = "sha256:" + "9a3e4f1c0e7b" * 5 + "2d11"


def ref(address, digest=HELD):
    return "%s/dgxspark/vllm:v1@%s" % (address, digest)


def test_a_held_digest_is_found_after_the_anonymous_token_dance():
    with fake_registry() as registry:
        answer = RegistryClient(timeout=5).manifest_exists(ref(registry.address))
    assert answer == {"url": "http://%s/v2/dgxspark/vllm/manifests/%s" % (registry.address, HELD), "status": 200,
                      "exists": True}
    asked = [(method, path) for method, path, _headers in registry.requests]
    # TLS first (the daemon's order for an insecure registry), then plain HTTP: 401, token, the HEAD again.
    assert asked[-3:] == [("HEAD", "/v2/dgxspark/vllm/manifests/" + HELD), ("GET", "/token"),
                          ("HEAD", "/v2/dgxspark/vllm/manifests/" + HELD)]
    final = registry.requests[-1][2]
    assert final["Authorization"] == "Bearer " + TOKEN
    assert [kind.strip() for kind in final["Accept"].split(",")] == list(MANIFEST_TYPES)


def test_a_digest_the_registry_lacks_is_a_404():
    with fake_registry() as registry:
        answer = RegistryClient(timeout=5).manifest_exists(ref(registry.address, OTHER))
    assert (answer["status"], answer["exists"]) == (404, False)


def test_a_registry_without_auth_is_asked_once():
    with fake_registry(auth=False) as registry:
        answer = RegistryClient(timeout=5).manifest_exists(ref(registry.address))
    assert answer["exists"] is True
    assert [path for _method, path, _headers in registry.requests].count("/token") == 0


def test_a_registry_that_refuses_head_is_asked_with_get():
    with fake_registry(no_head=True) as registry:
        answer = RegistryClient(timeout=5).manifest_exists(ref(registry.address))
    assert answer["exists"] is True
    assert registry.requests[-1][0] == "GET"


def test_another_answer_is_an_error_naming_the_url_and_status():
    with fake_registry(fail=503) as registry, pytest.raises(RegistryError) as caught:
        RegistryClient(timeout=5).manifest_exists(ref(registry.address))
    assert caught.value.status == 503
    assert "http://%s/v2/dgxspark/vllm/manifests/%s answered HTTP 503" % (registry.address, HELD) in str(caught.value)


def test_an_unreachable_registry_has_no_status():
    with pytest.raises(RegistryError) as caught:
        RegistryClient(timeout=5).manifest_exists(ref("127.0.0.1:9"))
    assert caught.value.status is None
    assert str(caught.value).startswith("cannot reach the registry 127.0.0.1:9 (https://127.0.0.1:9/v2/")
    assert caught.value.url == "http://127.0.0.1:9/v2/dgxspark/vllm/manifests/" + HELD


def test_a_registry_not_listed_as_insecure_is_asked_over_https_only():
    with fake_registry() as registry, pytest.raises(RegistryError) as caught:
        # A name, not the loopback address: only HTTPS, which the plain-HTTP fake cannot speak.
        RegistryClient(timeout=5).manifest_exists(ref("localhost.localdomain:%s" % registry.address.split(":")[1]))
    assert caught.value.status is None and "http://" not in str(caught.value).split("(", 1)[1]


INSECURE = [
    ("loopback", "127.0.0.1:5000", [], True),
    ("localhost", "localhost:5000", [], True),
    ("listed with port", "192.168.99.5:5000", ["192.168.99.5:5000"], True),
    ("listed by host", "registry.lan:5000", ["registry.lan"], True),
    ("listed by CIDR", "192.168.99.5:5000", ["192.168.99.0/24"], True),
    ("listed with a scheme", "192.168.99.5:5000", ["http://192.168.99.5:5000"], True),
    ("other port", "192.168.99.5:5001", ["192.168.99.5:5000"], False),
    ("outside the CIDR", "192.168.98.5:5000", ["192.168.99.0/24"], False),
    ("public", "nvcr.io", [], False),
]


@pytest.mark.parametrize("registry, listed, expected", [case[1:] for case in INSECURE], ids=[c[0] for c in INSECURE])
def test_is_insecure_follows_the_docker_daemon(registry, listed, expected):
    assert is_insecure(registry, listed) is expected


LOCATIONS = [
    ("registry", "nvcr.io/nvidia/vllm:25.11@" + HELD, None, ("nvcr.io", "nvidia/vllm", HELD)),
    ("docker hub official", "ubuntu@" + HELD, None, ("registry-1.docker.io", "library/ubuntu", HELD)),
    ("docker hub user", "vllm/vllm-openai:v1@" + HELD, None, ("registry-1.docker.io", "vllm/vllm-openai", HELD)),
    ("docker.io spelled out", "docker.io/vllm/vllm-openai@" + HELD, None,
     ("registry-1.docker.io", "vllm/vllm-openai", HELD)),
    ("mirror with prefix", "nvcr.io/nvidia/vllm@" + HELD, "mirror.lan:5000/cache",
     ("mirror.lan:5000", "cache/nvidia/vllm", HELD)),
]


@pytest.mark.parametrize("image, mirror, expected", [case[1:] for case in LOCATIONS], ids=[c[0] for c in LOCATIONS])
def test_manifest_location(image, mirror, expected):
    assert manifest_location(image, mirror) == expected


def test_parse_challenge():
    assert parse_challenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
                           'scope="repository:library/ubuntu:pull"') == {
        "realm": "https://auth.docker.io/token", "service": "registry.docker.io",
        "scope": "repository:library/ubuntu:pull"}
    assert parse_challenge('Basic realm="registry"') is None


# --- engine_image state=available -------------------------------------------------


def run_module(capsys, **params):
    return module_result(engine_image.main, capsys, dict(params, state="available", timeout=5))[0]


def test_the_module_reports_a_held_digest_without_docker(capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with fake_registry() as registry:
        result = run_module(capsys, ref=ref(registry.address))
    assert not result.get("failed") and result["changed"] is False
    assert (result["status"], result["docker"]) == (200, None)


def test_the_module_fails_on_a_missing_digest_naming_url_and_reference(capsys):
    with fake_registry() as registry:
        result = run_module(capsys, ref=ref(registry.address, OTHER))
    assert result["failed"] is True and result["status"] == 404
    assert result["msg"] == "http://%s/v2/dgxspark/vllm/manifests/%s answered HTTP 404: the registry does not hold %s" % (
        registry.address, OTHER, ref(registry.address, OTHER))


def test_the_module_asks_the_mirror(capsys):
    with fake_registry() as registry:
        result = run_module(capsys, ref="nvcr.io/dgxspark/vllm@" + HELD, registry_mirror=registry.address)
    assert result["status"] == 200 and result["url"].startswith("http://%s/" % registry.address)


def test_the_module_fails_on_an_unreachable_registry_with_a_null_status(capsys):
    result = run_module(capsys, ref=ref("127.0.0.1:9"), insecure_registries=["127.0.0.1:9"])
    assert result["failed"] is True and result["status"] is None
    assert result["msg"].startswith("cannot reach the registry 127.0.0.1:9")
