# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_check import (
    InventoryCheckError,
    digest_placeholder,
    host_placeholder,
    host_placeholders,
    host_runs,
    inventory_placeholders,
    placeholder_message,
    revision_placeholder,
)

REAL_DIGEST = "sha256:" + "4f1c9a0e7b2d" * 5 + "9a3e"
REAL_REF = "nvcr.io/nvidia/vllm:25.11-py3@" + REAL_DIGEST
REAL_REVISION = "5d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1a0"
# A host whose every checked value is real: only the variables of each case change.
CLEAN = {
    "ansible_host": "10.10.0.11",
    "engine_image_ref": REAL_REF,
    "engine_image_strategy": "spread",
    "model_weights_hf_endpoint": "https://huggingface.co",
    "model_weights_hf_repo_id": "deepseek-ai/DeepSeek-V4-Flash",
    "model_weights_hf_revision": REAL_REVISION,
    "engine_service_api_key_set": True,
}

# (case, host value, expected reason fragment or None)
HOSTS = [
    ("private address", "10.10.0.11", None),
    ("public name", "spark1.cluster.lan", None),
    ("TEST-NET-1", "192.0.2.11", "documentation range 192.0.2.0/24"),
    ("TEST-NET-2", "198.51.100.7", "documentation range 198.51.100.0/24"),
    ("TEST-NET-3", "203.0.113.254", "documentation range 203.0.113.0/24"),
    ("IPv6 documentation", "2001:db8::11", "documentation range 2001:db8::/32"),
    ("address with port", "192.0.2.5:5000", "192.0.2.0/24"),
    ("next to TEST-NET-1", "192.0.3.1", None),
    ("example.com", "example.com", "reserved domain example.com"),
    ("under example.net", "registry.example.net", "reserved domain example.net"),
    ("under example.org", "Hub.Example.Org.", "reserved domain example.org"),
    ("the example TLD", "spark1.example", "reserved domain example"),
    ("invalid TLD", "spark1.invalid", "reserved domain invalid"),
    ("name with port", "registry.example.com:5000", "reserved domain example.com"),
    ("look-alike", "myexample.com", None),
    ("look-alike TLD", "spark.invalidated", None),
]


@pytest.mark.parametrize("host, reason", [case[1:] for case in HOSTS], ids=[case[0] for case in HOSTS])
def test_host_placeholder(host, reason):
    found = host_placeholder(host)
    if reason is None:
        assert found is None
    else:
        assert reason in found


DIGESTS = [
    ("zeros", "sha256:" + "0" * 64, "one repeated hex digit"),
    ("all f", "sha256:" + "f" * 64, "one repeated hex digit"),
    ("ascending run", "sha256:" + "0123456789abcdef" * 4, "consecutive"),
    ("descending run", "sha256:" + "fedcba9876543210" * 4, "consecutive"),
    ("real", REAL_DIGEST, None),
    ("two digits", "sha256:" + "0" * 63 + "1", None),
]


@pytest.mark.parametrize("digest, reason", [case[1:] for case in DIGESTS], ids=[case[0] for case in DIGESTS])
def test_digest_placeholder(digest, reason):
    found = digest_placeholder(digest)
    assert (found is None) if reason is None else (reason in found)


REVISIONS = [
    ("the sample's", "0123456789abcdef0123456789abcdef01234567", "consecutive"),
    ("ascending from 3", "3456789abcdef0123456789abcdef0123456789a", "consecutive"),
    ("descending", "fedcba9876543210fedcba9876543210fedcba98", "consecutive"),
    ("one digit", "a" * 40, "one repeated"),
    ("upper case", "A" * 40, "one repeated"),
    ("short sha run", "1234567", "consecutive"),
    ("real", REAL_REVISION, None),
    ("branch", "main", None),
    ("tag", "v1.0", None),
    ("too short to judge", "abcdef", None),
]


@pytest.mark.parametrize("revision, reason", [case[1:] for case in REVISIONS], ids=[case[0] for case in REVISIONS])
def test_revision_placeholder(revision, reason):
    found = revision_placeholder(revision)
    assert (found is None) if reason is None else (reason in found)


# (case, changes to CLEAN, [(variable, found)] expected)
HOST_CASES = [
    ("clean", {}, []),
    ("documentation address", {"ansible_host": "192.0.2.11"}, [("ansible_host", "192.0.2.11")]),
    ("no ansible_host", {"ansible_host": None}, []),
    ("reserved registry",
     {"engine_image_ref": "registry.example.com/vllm:1@" + REAL_DIGEST},
     [("engine_image_ref", "registry.example.com/vllm:1@" + REAL_DIGEST)]),
    ("zero digest", {"engine_image_ref": "nvcr.io/nvidia/vllm@sha256:" + "0" * 64},
     [("engine_image_ref", "sha256:" + "0" * 64)]),
    ("the sample's image",
     {"engine_image_ref": "registry.example.com/vllm/vllm-dspark-gb10:production-3.75@sha256:" + "0" * 64},
     [("engine_image_ref", "registry.example.com/vllm/vllm-dspark-gb10:production-3.75@sha256:" + "0" * 64),
      ("engine_image_ref", "sha256:" + "0" * 64)]),
    ("unpinned image is left to the role", {"engine_image_ref": "registry.example/vllm:1"}, []),
    ("image without a registry", {"engine_image_ref": "vllm/vllm@" + REAL_DIGEST}, []),
    ("reserved mirror", {"engine_image_strategy": "registry", "engine_image_registry_mirror": "mirror.invalid:5000"},
     [("engine_image_registry_mirror", "mirror.invalid:5000")]),
    ("mirror unused", {"engine_image_strategy": "spread", "engine_image_registry_mirror": "mirror.invalid:5000"}, []),
    ("reserved Hub", {"model_weights_hf_endpoint": "https://hub.example.org"},
     [("model_weights_hf_endpoint", "https://hub.example.org")]),
    ("documentation Hub", {"model_weights_hf_endpoint": "http://203.0.113.9:8080"},
     [("model_weights_hf_endpoint", "http://203.0.113.9:8080")]),
    ("made-up revision", {"model_weights_hf_revision": "0123456789abcdef0123456789abcdef01234567"},
     [("model_weights_hf_revision", "0123456789abcdef0123456789abcdef01234567")]),
    ("API key missing", {"engine_service_api_key_set": None}, [("engine_service_api_key", "not set")]),
    ("API key empty", {"engine_service_api_key_set": False}, [("engine_service_api_key", "empty")]),
    ("API key not required", {"engine_service_api_key_set": False, "preflight_require_api_key": False}, []),
    ("API key not required, string", {"engine_service_api_key_set": None, "preflight_require_api_key": "false"}, []),
]


@pytest.mark.parametrize("changes, expected", [case[1:] for case in HOST_CASES], ids=[case[0] for case in HOST_CASES])
def test_host_placeholders(changes, expected):
    found = host_placeholders(dict(CLEAN, **changes))
    assert [(f["variable"], f["found"]) for f in found] == expected
    assert all(f["why"] and f["fix"] for f in found)


def test_every_fix_says_what_to_run():
    found = {f["variable"]: f["fix"] for f in host_placeholders(dict(
        CLEAN, engine_image_ref="nvcr.io/nvidia/vllm@sha256:" + "0" * 64,
        model_weights_hf_revision="0123456789abcdef0123456789abcdef01234567", engine_service_api_key_set=None))}
    assert "docker image inspect --format '{{index .RepoDigests 0}}' IMAGE" in found["engine_image_ref"]
    assert "Files and versions" in found["model_weights_hf_revision"]
    assert "git ls-remote https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash" in found["model_weights_hf_revision"]
    assert "ansible-vault encrypt_string --stdin-name engine_service_api_key" in found["engine_service_api_key"]


RUNS = [
    (["spark1", "spark2", "spark3", "spark4"], "spark1..spark4"),
    (["spark1", "spark2"], "spark1, spark2"),
    (["spark1", "spark3"], "spark1, spark3"),
    (["spark4", "spark1", "spark2", "spark3"], "spark1..spark4"),
    (["spark1", "spark2", "spark4"], "spark1, spark2, spark4"),
    (["spark1"], "spark1"),
]


@pytest.mark.parametrize("hosts, written", RUNS, ids=[written for _hosts, written in RUNS])
def test_host_runs(hosts, written):
    assert host_runs(hosts, ["spark1", "spark2", "spark3", "spark4"]) == written


def test_identical_findings_are_grouped_and_others_kept_apart():
    order = ["spark1", "spark2", "spark3", "spark4"]
    values = {name: dict(CLEAN, engine_service_api_key_set=None) for name in order}
    values["spark3"]["ansible_host"] = "192.0.2.13"
    values["spark4"]["engine_service_api_key_set"] = True  # a host_vars override
    groups = inventory_placeholders(values, order)
    assert [(g["hosts"], g["variable"], g["found"]) for g in groups] == [
        ("spark1..spark3", "engine_service_api_key", "not set"),
        ("spark3", "ansible_host", "192.0.2.13"),
    ]
    message = placeholder_message(groups)
    assert message.startswith("The inventory still holds 2 placeholder value(s); no host was contacted.")
    assert "(1) spark1..spark3: engine_service_api_key is not set" in message
    assert "(2) spark3: ansible_host is 192.0.2.13 (an address of the documentation range 192.0.2.0/24" in message


def test_a_clean_inventory_has_no_message():
    assert inventory_placeholders({"spark1": dict(CLEAN)}) == []
    assert placeholder_message([]) == ""


@pytest.mark.parametrize("bad", [["spark1"], "spark1"])
def test_wrong_input_is_refused(bad):
    with pytest.raises(InventoryCheckError):
        inventory_placeholders(bad)
    with pytest.raises(InventoryCheckError):
        host_placeholders(bad)
