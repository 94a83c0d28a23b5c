# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The weights_manifest module on model directories built in tmp_path."""

from __future__ import annotations

import hashlib
import json
import os
from types import MappingProxyType

import pytest

from unit_support import module_result

from ansible_collections.dgxspark.cluster.plugins.module_utils import _manifest
from ansible_collections.dgxspark.cluster.plugins.modules import weights_manifest

OLD_NS = 1_750_000_000_000_000_000
# Read-only: it is the default of expected_manifest.
TREE = MappingProxyType({
    "config.json": b'{"model_type": "deepseek_v4"}\n',
    "model-00001-of-00003.safetensors": b"\x10" * 4096,
    "model-00002-of-00003.safetensors": b"\x20" * 4096,
    "model-00003-of-00003.safetensors": b"\x30" * 1000,
})


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch):
    """Files written by the test are seconds old; let the cache take them at once."""
    monkeypatch.setattr(_manifest, "RACY_WINDOW_NS", 0)


@pytest.fixture
def model(tmp_path):
    root = tmp_path / "models" / "DeepSeek-V4-Flash"
    for rel, data in TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        os.utime(root / rel, ns=(OLD_NS, OLD_NS))
    return root


@pytest.fixture
def manifest_path(tmp_path):
    return tmp_path / "models" / "DeepSeek-V4-Flash.manifest.json"


def run(capsys, **params):
    return module_result(weights_manifest.main, capsys, params)[0]


def present(capsys, model, manifest_path, **extra):
    return run(capsys, path=str(model), manifest_path=str(manifest_path), **extra)


def verified(capsys, model, **extra):
    return run(capsys, path=str(model), state="verified", **extra)


def expected_manifest(files=TREE):
    return {"version": 1, "files": {rel: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                                    for rel, data in files.items()}}


def warnings_of(result):
    """Warning texts: plain strings before ansible-core 2.19, summaries with an event since."""
    return [w if isinstance(w, str) else w["event"]["msg"] for w in result.get("warnings", [])]


def corrupt(path):
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))


def test_present_writes_the_manifest_and_its_cache(capsys, model, manifest_path):
    result = present(capsys, model, manifest_path)
    assert result["changed"] is True and not result.get("failed")
    assert json.loads(manifest_path.read_text()) == expected_manifest() == result["manifest"]
    assert result["cache_path"] == str(manifest_path) + ".cache"
    cache = json.loads((manifest_path.parent / (manifest_path.name + ".cache")).read_text())
    assert cache["root"] == str(model) and set(cache["files"]) == set(TREE)
    assert (result["file_count"], result["total_bytes"]) == (len(TREE), sum(map(len, TREE.values())))
    assert (result["hashed_files"], result["cached_files"]) == (len(TREE), 0)
    assert oct(manifest_path.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_present_again_is_unchanged_reads_nothing_and_leaves_the_file_alone(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    inode = manifest_path.stat().st_ino
    result = present(capsys, model, manifest_path)
    assert result["changed"] is False
    assert (result["hashed_files"], result["cached_files"]) == (0, len(TREE))
    assert manifest_path.stat().st_ino == inode


def test_present_rewrites_when_a_file_changed(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    (model / "config.json").write_bytes(b"{}")
    result = present(capsys, model, manifest_path)
    assert result["changed"] is True and result["hashed_files"] == 1
    assert json.loads(manifest_path.read_text()) == expected_manifest(dict(TREE, **{"config.json": b"{}"}))


def test_present_replaces_an_invalid_manifest(capsys, model, manifest_path):
    manifest_path.write_text("garbage")
    assert present(capsys, model, manifest_path)["changed"] is True
    assert json.loads(manifest_path.read_text()) == expected_manifest()


@pytest.mark.parametrize("existing", [False, True])
def test_check_mode_predicts_and_writes_nothing(capsys, model, manifest_path, existing):
    if existing:
        present(capsys, model, manifest_path)
        (model / "config.json").write_bytes(b"{}")
    before = sorted(os.listdir(manifest_path.parent)), manifest_path.read_bytes() if existing else None
    result = present(capsys, model, manifest_path, _ansible_check_mode=True)
    assert result["changed"] is True
    assert result["manifest"]["files"]["config.json"]["size"] == (2 if existing else len(TREE["config.json"]))
    after = sorted(os.listdir(manifest_path.parent)), manifest_path.read_bytes() if existing else None
    assert after == before


def test_check_mode_reports_no_change_for_a_current_manifest(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    assert present(capsys, model, manifest_path, _ansible_check_mode=True)["changed"] is False


def test_diff_shows_the_old_and_new_manifest(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    old = manifest_path.read_text()
    (model / "config.json").write_bytes(b"{}")
    result = present(capsys, model, manifest_path, _ansible_diff=True)
    assert result["diff"]["before"] == old
    assert result["diff"]["after"] == manifest_path.read_text() != old
    assert result["diff"]["before_header"] == str(manifest_path)


def test_a_manifest_inside_the_directory_leaves_itself_out(capsys, model):
    inside = model / "weights.manifest.json"
    result = present(capsys, model, inside)
    assert result["manifest"] == expected_manifest()
    again = verified(capsys, model, manifest_path=str(inside))
    assert not again.get("failed") and again["unexpected"] == []


def test_verified_passes_on_an_intact_copy_from_the_cache(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    result = verified(capsys, model, manifest_path=str(manifest_path))
    assert not result.get("failed") and result["changed"] is False
    assert (result["missing"], result["unexpected"], result["mismatched"]) == ([], [], [])
    assert (result["hashed_files"], result["cached_files"]) == (0, len(TREE))


def test_verified_fails_naming_each_problem(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    corrupt(model / "model-00001-of-00003.safetensors")
    (model / "model-00002-of-00003.safetensors").write_bytes(b"\x20" * 10)
    (model / "model-00003-of-00003.safetensors").unlink()
    (model / "stray.bin").write_bytes(b"x")
    result = verified(capsys, model, manifest_path=str(manifest_path))
    assert result["failed"] is True
    assert result["missing"] == ["model-00003-of-00003.safetensors"]
    assert result["unexpected"] == ["stray.bin"]
    assert [(m["path"], m["reason"]) for m in result["mismatched"]] == [
        ("model-00001-of-00003.safetensors", "sha256"), ("model-00002-of-00003.safetensors", "size")]
    assert result["msg"].startswith("%s does not match %s: 1 missing (model-00003-of-00003.safetensors); "
                                    "1 unexpected (stray.bin); 2 mismatched (" % (model, manifest_path))
    assert "model-00002-of-00003.safetensors: 10 bytes, expected 4096" in result["msg"]
    assert result["hashed_files"] == 1  # only the corrupted file; the truncated one is not read


def test_full_ignores_the_cache(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    result = verified(capsys, model, manifest_path=str(manifest_path), verify_checksums="full")
    assert (result["hashed_files"], result["cached_files"]) == (len(TREE), 0)


def test_a_cache_that_lies_is_believed_unless_full(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    cache_path = manifest_path.parent / (manifest_path.name + ".cache")
    cache = json.loads(cache_path.read_text())
    cache["files"]["config.json"]["sha256"] = "0" * 64
    cache_path.write_text(json.dumps(cache))
    assert verified(capsys, model, manifest_path=str(manifest_path))["failed"] is True
    assert not verified(capsys, model, manifest_path=str(manifest_path), verify_checksums="full").get("failed")
    assert not verified(capsys, model, manifest_path=str(manifest_path)).get("failed")  # the cache was rewritten


def test_verified_from_a_given_manifest_uses_no_cache_unless_asked(capsys, model, tmp_path):
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = verified(capsys, model, manifest=expected_manifest())
    assert not result.get("failed") and result["cache_path"] is None and result["manifest_path"] is None
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    cache_path = tmp_path / "weights.cache"
    first = verified(capsys, model, manifest=expected_manifest(), cache_path=str(cache_path))
    second = verified(capsys, model, manifest=expected_manifest(), cache_path=str(cache_path))
    assert (first["hashed_files"], second["hashed_files"], second["cached_files"]) == (len(TREE), 0, len(TREE))


def test_verified_in_check_mode_writes_no_cache(capsys, model, tmp_path):
    cache_path = tmp_path / "weights.cache"
    result = verified(capsys, model, manifest=expected_manifest(), cache_path=str(cache_path), _ansible_check_mode=True)
    assert not result.get("failed") and not cache_path.exists()


def test_a_missing_directory_is_every_file_missing(capsys, tmp_path):
    result = verified(capsys, tmp_path / "nothing-yet", manifest=expected_manifest())
    assert result["failed"] is True and result["missing"] == sorted(TREE)
    assert "nothing-yet does not exist; the given manifest lists 4 files" in result["msg"]


def test_size_only_does_not_read_files(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    corrupt(model / "model-00003-of-00003.safetensors")
    result = verified(capsys, model, manifest_path=str(manifest_path), verify_checksums="size")
    assert not result.get("failed") and result["hashed_files"] == 0


def test_a_broken_cache_is_rebuilt_with_a_warning(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    cache_path = manifest_path.parent / (manifest_path.name + ".cache")
    cache_path.write_text("{broken")
    result = verified(capsys, model, manifest_path=str(manifest_path))
    assert result["hashed_files"] == len(TREE)
    assert any("the hash cache is not JSON" in warning for warning in warnings_of(result))
    assert json.loads(cache_path.read_text())["version"] == 1


def test_a_cache_copied_from_another_directory_is_not_trusted(capsys, model, manifest_path, tmp_path):
    present(capsys, model, manifest_path)
    copy = tmp_path / "copy"
    os.rename(model, copy)
    result = verified(capsys, copy, manifest_path=str(manifest_path))
    assert result["hashed_files"] == len(TREE)
    assert any("was written for %s, not %s" % (model, copy) in warning for warning in warnings_of(result))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"state": "present"}, "state is present but all of the following are missing: manifest_path"),
        ({"state": "verified"}, "state is verified but any of the following are missing: manifest_path, manifest"),
        ({"state": "present", "manifest_path": "M", "verify_checksums": "size"}, "verify_checksums=size reads no file"),
        ({"state": "present", "manifest_path": "M", "hash_workers": 0}, "hash_workers is 0; expected 1 or more"),
        ({"state": "verified", "manifest_path": "M"}, "the manifest M does not exist"),
        ({"state": "present", "manifest_path": "NODIR/m.json"}, "the directory NODIR for manifest_path does not exist"),
        ({"state": "verified", "manifest": {"version": 1, "files": {}}}, "the manifest lists no files"),
    ],
)
def test_refusals_say_what_was_expected(capsys, model, tmp_path, params, message):
    params = {key: str(tmp_path / value) if key == "manifest_path" else value for key, value in params.items()}
    message = message.replace("NODIR", str(tmp_path / "NODIR")).replace("manifest M", "manifest %s" % (tmp_path / "M"))
    result = run(capsys, path=str(model), **params)
    assert result["failed"] is True
    assert message in result["msg"]


def test_a_symlink_is_refused_by_name(capsys, model, manifest_path):
    os.symlink("config.json", model / "alias.json")
    result = present(capsys, model, manifest_path)
    assert result["failed"] is True and "symlinks, which are refused (symlinks=refuse): alias.json" in result["msg"]
    assert not manifest_path.exists()
    recorded = present(capsys, model, manifest_path, symlinks="record")
    assert recorded["manifest"]["symlinks"] == {"alias.json": "config.json"} and recorded["symlink_count"] == 1


# ------------------------------------------------------------ origin and state probe

COMMIT = "5d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1a0"
ORIGIN = {"repo_id": "deepseek-ai/DeepSeek-V4-Flash", "commit": COMMIT,
          "allow_patterns": ["*.safetensors", "*.json"], "ignore_patterns": []}


def test_present_records_the_origin_with_sorted_patterns(capsys, model, manifest_path):
    result = present(capsys, model, manifest_path, origin=ORIGIN)
    recorded = json.loads(manifest_path.read_text())
    sorted_origin = dict(ORIGIN, allow_patterns=["*.json", "*.safetensors"])
    assert recorded["origin"] == sorted_origin == result["manifest"]["origin"]
    assert recorded["files"] == expected_manifest()["files"]


def test_adding_an_origin_to_an_old_manifest_is_a_change_once(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    assert present(capsys, model, manifest_path, origin=ORIGIN)["changed"] is True
    assert present(capsys, model, manifest_path, origin=ORIGIN)["changed"] is False


def test_verified_returns_the_manifest_it_read_and_the_saved_cache(capsys, model, manifest_path):
    present(capsys, model, manifest_path, origin=ORIGIN)
    result = verified(capsys, model, manifest_path=str(manifest_path), origin=ORIGIN)
    assert not result.get("failed") and result["changed"] is False
    assert result["manifest"] == json.loads(manifest_path.read_text())
    assert result["cache_saved"] is True and (result["hashed_files"], result["cached_files"]) == (0, len(TREE))


def test_verified_returns_the_manifest_also_when_the_copy_differs(capsys, model, manifest_path):
    present(capsys, model, manifest_path, origin=ORIGIN)
    (model / "config.json").unlink()
    result = verified(capsys, model, manifest_path=str(manifest_path), origin=ORIGIN)
    assert result["failed"] is True and result["missing"] == ["config.json"]
    assert result["manifest"]["origin"]["commit"] == COMMIT


def test_a_given_manifest_is_not_returned(capsys, model):
    result = verified(capsys, model, manifest=expected_manifest())
    assert not result.get("failed") and "manifest" not in result


@pytest.mark.parametrize(
    "expected, differences",
    [
        (dict(ORIGIN, commit="0" * 40), ["commit is %s, expected %s" % (COMMIT, "0" * 40)]),
        (dict(ORIGIN, ignore_patterns=["*.pth"]), ["ignore_patterns is [], expected [*.pth]"]),
        (dict(ORIGIN, repo_id="org/other"), ["repo_id is deepseek-ai/DeepSeek-V4-Flash, expected org/other"]),
    ],
)
def test_another_origin_fails_before_any_file_is_read(capsys, model, manifest_path, expected, differences):
    present(capsys, model, manifest_path, origin=ORIGIN)
    corrupt(model / "model-00001-of-00003.safetensors")
    result = verified(capsys, model, manifest_path=str(manifest_path), origin=expected)
    assert result["failed"] is True and result["origin_differences"] == differences
    assert "is not the manifest of the expected origin: %s" % differences[0] in result["msg"]
    assert "hashed_files" not in result and "missing" not in result
    assert result["manifest"]["origin"]["commit"] == COMMIT


def test_a_manifest_without_origin_never_matches_one(capsys, model, manifest_path):
    present(capsys, model, manifest_path)
    result = verified(capsys, model, manifest_path=str(manifest_path), origin=ORIGIN)
    assert result["failed"] is True
    assert result["origin_differences"] == [
        "the manifest records no origin (it was written before origins were recorded)"]


def test_a_null_commit_is_not_compared_and_pattern_order_does_not_matter(capsys, model, manifest_path):
    present(capsys, model, manifest_path, origin=ORIGIN)
    branch = dict(ORIGIN, commit=None, allow_patterns=["*.json", "*.safetensors", "*.json"])
    result = verified(capsys, model, manifest_path=str(manifest_path), origin=branch)
    assert not result.get("failed") and result["manifest"]["origin"]["commit"] == COMMIT


def test_an_invalid_origin_is_refused(capsys, model, manifest_path):
    result = present(capsys, model, manifest_path, origin=dict(ORIGIN, commit=""))
    assert result["failed"] is True and "origin: commit is ''; expected a non-empty string" in result["msg"]
    assert not manifest_path.exists()


def test_cache_saved_is_false_when_its_directory_is_missing(capsys, model, tmp_path):
    cache_path = tmp_path / "gone" / "weights.cache"
    result = verified(capsys, model, manifest=expected_manifest(), cache_path=str(cache_path))
    assert not result.get("failed") and result["cache_saved"] is False
    assert any("cannot write the hash cache" in warning for warning in warnings_of(result))
    cache_path.parent.mkdir()
    assert verified(capsys, model, manifest=expected_manifest(), cache_path=str(cache_path))["cache_saved"] is True


def test_cache_saved_in_check_mode_only_when_nothing_would_change(capsys, model, tmp_path):
    cache_path = tmp_path / "weights.cache"
    checked = verified(capsys, model, manifest=expected_manifest(), cache_path=str(cache_path),
                       _ansible_check_mode=True)
    assert checked["cache_saved"] is False and not cache_path.exists()
    verified(capsys, model, manifest=expected_manifest(), cache_path=str(cache_path))
    again = verified(capsys, model, manifest=expected_manifest(), cache_path=str(cache_path), _ansible_check_mode=True)
    assert again["cache_saved"] is True


def test_cache_saved_with_size_only_and_no_cache_needed(capsys, model, tmp_path):
    result = verified(capsys, model, manifest=expected_manifest(), cache_path=str(tmp_path / "weights.cache"),
                      verify_checksums="size")
    assert result["cache_saved"] is True and not (tmp_path / "weights.cache").exists()
    assert verified(capsys, model, manifest=expected_manifest())["cache_saved"] is False
