# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Manifests of model directories built in tmp_path, and their verification."""

from __future__ import annotations

import hashlib
import json
import os
import time
from types import MappingProxyType

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import _manifest
from ansible_collections.dgxspark.cluster.plugins.module_utils._manifest import (
    DEFAULT_EXCLUDE,
    ManifestError,
    build_manifest,
    check_relpath,
    describe_problems,
    dump_cache,
    hash_file,
    inside,
    is_excluded,
    load_cache,
    origin_differences,
    parse_manifest,
    parse_origin,
    scan_tree,
    verify_tree,
)

#: An mtime well in the past, as rsync -a leaves it on a synced copy.
OLD_NS = 1_750_000_000_123_456_789

# Read-only: it is the default of write_tree.
TREE = MappingProxyType({
    "config.json": b'{"architectures": ["DeepseekV4ForCausalLM"]}\n',
    "model-00001-of-00002.safetensors": bytes(range(256)) * 64,
    "model-00002-of-00002.safetensors": b"\x00\x01" * 5000 + b"tail",
    "tokenizer/tokenizer.json": b'{"model": {"type": "BPE"}}',
})


def future_clock():
    """A clock well past every ctime in the test tree, so that fresh files are not racy."""
    return time.time_ns() + 60 * 10**9


def write_tree(root, files=TREE, mtime_ns=OLD_NS):
    for rel, content in files.items():
        path = root.joinpath(*rel.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return root


def sha(content):
    return hashlib.sha256(content).hexdigest()


def manifest_of(files):
    return {"version": 1, "files": {rel: {"size": len(data), "sha256": sha(data)} for rel, data in files.items()}}


def rewrite_in_place(path, offset, byte):
    """Overwrite one byte without changing the inode, as a disk or a stray write would."""
    st = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(byte)
    os.utime(path, ns=(st.st_mtime_ns + 10**9, st.st_mtime_ns + 10**9))


@pytest.fixture
def model(tmp_path):
    return write_tree(tmp_path / "model")


@pytest.fixture
def built(model):
    """The model directory with its manifest and a cache of every file."""
    outcome = build_manifest(str(model), now_ns=future_clock)
    return model, outcome


# ------------------------------------------------------------------ patterns, paths


@pytest.mark.parametrize(
    "relpath, patterns, excluded",
    [
        (".cache", DEFAULT_EXCLUDE, True),
        ("sub/.cache", DEFAULT_EXCLUDE, True),
        (".huggingface", DEFAULT_EXCLUDE, True),
        ("model-00001-of-00002.safetensors.incomplete", DEFAULT_EXCLUDE, True),
        ("model-00001-of-00002.safetensors", DEFAULT_EXCLUDE, False),
        (".gitattributes", DEFAULT_EXCLUDE, False),
        ("cache/config.json", DEFAULT_EXCLUDE, False),
        ("original/consolidated.pth", ["original/*"], True),
        ("sub/original/consolidated.pth", ["original/*"], False),
        ("sub/original/x", ["*/original/*"], True),
        ("original", ["original/"], True),
        ("README.md", ["readme.md"], False),
    ],
)
def test_exclude_patterns(relpath, patterns, excluded):
    assert is_excluded(relpath, patterns) is excluded


@pytest.mark.parametrize("relpath", ["", "/etc/passwd", "a/../b", "../b", "a//b", "./a", "a/.", "a/", 7])
def test_relpaths_that_leave_or_blur_the_directory_are_refused(relpath):
    with pytest.raises(ManifestError, match="relative path"):
        check_relpath(relpath)


@pytest.mark.parametrize(
    "root, path, expected",
    [
        ("/srv/models/m", "/srv/models/m/manifest.json", "manifest.json"),
        ("/srv/models/m", "/srv/models/m/meta/manifest.json", "meta/manifest.json"),
        ("/srv/models/m", "/srv/models/m.manifest.json", None),
        ("/srv/models/m", "/srv/models/m", None),
        ("/srv/models/m", None, None),
    ],
)
def test_inside(root, path, expected):
    assert inside(root, path) == expected


# -------------------------------------------------------------------------- build


def test_manifest_lists_every_file_with_its_size_and_sha256(built):
    _model, outcome = built
    assert outcome["manifest"] == manifest_of(TREE)
    assert list(outcome["manifest"]["files"]) == sorted(TREE)
    assert outcome["file_count"] == len(TREE)
    assert outcome["total_bytes"] == sum(len(data) for data in TREE.values())
    assert outcome["hashed_files"] == len(TREE) and outcome["cached_files"] == 0
    assert outcome["hashed_bytes"] == outcome["total_bytes"]
    assert set(outcome["cache"]) == set(TREE)


def test_partial_downloads_and_the_hub_cache_are_left_out(model):
    write_tree(model, {
        ".cache/huggingface/download/model-00002-of-00002.safetensors.lock": b"",
        ".cache/huggingface/download/abc.incomplete": b"partial",
        "extra/model.safetensors.incomplete": b"partial",
    })
    outcome = build_manifest(str(model))
    assert set(outcome["manifest"]["files"]) == set(TREE)
    assert outcome["excluded"] == [".cache", "extra/model.safetensors.incomplete"]


def test_the_collections_marker_at_the_top_is_left_out(model):
    # model_weights writes it before anything else goes in; it is never one of the weights.
    write_tree(model, {".dgxspark-weights": b"ours\n"})
    outcome = build_manifest(str(model))
    assert outcome["manifest"] == manifest_of(TREE) and outcome["excluded"] == [".dgxspark-weights"]
    verified = verify_tree(str(model), outcome["manifest"])
    assert verified["unexpected"] == [] and verified["missing"] == []
    # Below the top it is a file like any other.
    write_tree(model, {"sub/.dgxspark-weights": b"x"})
    assert verify_tree(str(model), outcome["manifest"])["unexpected"] == ["sub/.dgxspark-weights"]


def test_own_manifest_and_cache_inside_the_directory_are_skipped(model):
    write_tree(model, {"weights.manifest.json": b"{}", "weights.manifest.json.cache": b"{}"})
    outcome = build_manifest(str(model), skip=["weights.manifest.json", "weights.manifest.json.cache"])
    assert outcome["manifest"] == manifest_of(TREE)
    assert outcome["excluded"] == []


@pytest.mark.parametrize("workers", [1, 2, 8])
def test_worker_count_does_not_change_the_manifest(model, workers):
    assert build_manifest(str(model), workers=workers)["manifest"] == manifest_of(TREE)


def test_symlinks_are_refused_by_name(model):
    os.symlink("model-00001-of-00002.safetensors", model / "alias.safetensors")
    os.symlink("tokenizer", model / "tok")
    with pytest.raises(ManifestError) as raised:
        build_manifest(str(model))
    assert "holds 2 symlinks, which are refused (symlinks=refuse): alias.safetensors, tok" in str(raised.value)


def test_symlinks_can_be_recorded_without_being_followed(model):
    os.symlink("model-00001-of-00002.safetensors", model / "alias.safetensors")
    os.symlink("tokenizer", model / "tok")
    manifest = build_manifest(str(model), symlinks="record")["manifest"]
    assert manifest["symlinks"] == {"alias.safetensors": "model-00001-of-00002.safetensors", "tok": "tokenizer"}
    assert "tok/tokenizer.json" not in manifest["files"]
    assert manifest["files"] == manifest_of(TREE)["files"]


def test_an_excluded_symlink_is_not_refused(model):
    os.symlink("/nowhere", model / "blob.incomplete")
    assert build_manifest(str(model))["excluded"] == ["blob.incomplete"]


def test_fifos_are_refused(model):
    os.mkfifo(model / "pipe")
    with pytest.raises(ManifestError, match="neither files, directories nor symlinks: pipe"):
        build_manifest(str(model))


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "holds no files; a manifest of nothing"),
        ({"x.incomplete": b"p"}, "holds no files outside the excluded x.incomplete;"),
    ],
)
def test_an_empty_directory_gets_no_manifest(tmp_path, files, message):
    (tmp_path / "m").mkdir()
    write_tree(tmp_path / "m", files)
    with pytest.raises(ManifestError, match=message):
        build_manifest(str(tmp_path / "m"))


def test_a_missing_directory_gets_no_manifest(tmp_path):
    with pytest.raises(ManifestError, match="is not a directory"):
        build_manifest(str(tmp_path / "absent"))


def test_size_only_cannot_build_a_manifest(model):
    with pytest.raises(ManifestError, match="needs every file's sha256"):
        build_manifest(str(model), checksums="size")


def test_a_file_changed_after_the_scan_is_not_hashed_silently(model):
    tree = scan_tree(str(model))
    with open(model / "config.json", "ab") as handle:
        handle.write(b" ")
    with pytest.raises(ManifestError, match="config.json changed after the directory was scanned"):
        hash_file(str(model / "config.json"), tree["files"]["config.json"])


# ------------------------------------------------------------------------- verify


def damage_corrupt(model):
    rewrite_in_place(model / "model-00001-of-00002.safetensors", 1000, b"\xff")


def damage_truncate(model):
    path = model / "model-00002-of-00002.safetensors"
    path.write_bytes(path.read_bytes()[:-4])


def damage_add(model):
    write_tree(model, {"stray.bin": b"rubbish"})


def damage_remove(model):
    (model / "tokenizer" / "tokenizer.json").unlink()


def damage_none(model):
    pass


@pytest.mark.parametrize("cached", [True, False], ids=["with-cache", "without-cache"])
@pytest.mark.parametrize(
    "damage, missing, unexpected, mismatched, hashed",
    [
        (damage_none, [], [], [], 4),
        (damage_corrupt, [], [], [("model-00001-of-00002.safetensors", "sha256")], 4),
        (damage_truncate, [], [], [("model-00002-of-00002.safetensors", "size")], 3),
        (damage_add, [], ["stray.bin"], [], 4),
        (damage_remove, ["tokenizer/tokenizer.json"], [], [], 3),
    ],
    ids=["intact", "corrupt-byte", "truncated", "added", "removed"],
)
def test_verify_finds_each_kind_of_damage(built, damage, missing, unexpected, mismatched, hashed, cached):
    model, outcome = built
    damage(model)
    result = verify_tree(str(model), outcome["manifest"], cache=outcome["cache"] if cached else None,
                         now_ns=future_clock)
    assert result["missing"] == missing
    assert result["unexpected"] == unexpected
    assert [(item["path"], item["reason"]) for item in result["mismatched"]] == mismatched
    assert result["ok"] is not (missing or unexpected or mismatched)
    # With the cache, only the damaged file is read again; a wrong size is never read.
    damaged = 1 if damage is damage_corrupt else 0
    assert result["hashed_files"] == (damaged if cached else hashed)
    assert result["cached_files"] == (hashed - damaged if cached else 0)
    assert result["hashed_files"] + result["cached_files"] == hashed


def test_mismatch_reports_expected_and_found_values(built):
    model, outcome = built
    damage_corrupt(model)
    damage_truncate(model)
    result = verify_tree(str(model), outcome["manifest"])
    corrupted = bytearray(TREE["model-00001-of-00002.safetensors"])
    corrupted[1000] = 0xFF
    truncated = TREE["model-00002-of-00002.safetensors"]
    assert result["mismatched"] == [
        {"path": "model-00001-of-00002.safetensors", "reason": "sha256",
         "expected": sha(TREE["model-00001-of-00002.safetensors"]), "found": sha(bytes(corrupted))},
        {"path": "model-00002-of-00002.safetensors", "reason": "size",
         "expected": len(truncated), "found": len(truncated) - 4},
    ]


def test_a_missing_directory_verifies_as_everything_missing(tmp_path):
    result = verify_tree(str(tmp_path / "absent"), manifest_of(TREE))
    assert result["path_exists"] is False and result["ok"] is False
    assert result["missing"] == sorted(TREE)
    assert describe_problems(str(tmp_path / "absent"), "m.json", result) == (
        "%s does not exist; m.json lists 4 files (%d bytes), all missing"
        % (tmp_path / "absent", sum(len(data) for data in TREE.values()))
    )


def test_a_file_where_the_directory_should_be_is_an_error(tmp_path):
    (tmp_path / "model").write_bytes(b"")
    with pytest.raises(ManifestError, match="exists but is not a directory"):
        verify_tree(str(tmp_path / "model"), manifest_of(TREE))


def test_size_mode_reads_nothing_and_catches_only_size_changes(built):
    model, outcome = built
    damage_corrupt(model)
    result = verify_tree(str(model), outcome["manifest"], checksums="size")
    assert result["ok"] is True and result["hashed_files"] == 0 and result["cached_files"] == 0
    damage_truncate(model)
    result = verify_tree(str(model), outcome["manifest"], checksums="size")
    assert [item["reason"] for item in result["mismatched"]] == ["size"]


def test_recorded_symlinks_are_verified_by_target(model):
    os.symlink("model-00001-of-00002.safetensors", model / "alias.safetensors")
    os.symlink("tokenizer", model / "tok")
    manifest = build_manifest(str(model), symlinks="record")["manifest"]
    os.unlink(model / "alias.safetensors")
    os.symlink("model-00002-of-00002.safetensors", model / "alias.safetensors")
    os.unlink(model / "tok")
    result = verify_tree(str(model), manifest, symlinks="record")
    assert result["missing"] == ["tok"]
    assert result["mismatched"] == [{"path": "alias.safetensors", "reason": "symlink",
                                     "expected": "model-00001-of-00002.safetensors",
                                     "found": "model-00002-of-00002.safetensors"}]


def test_problem_message_names_every_kind(built):
    model, outcome = built
    for damage in (damage_corrupt, damage_truncate, damage_add, damage_remove):
        damage(model)
    message = describe_problems(str(model), "the manifest", verify_tree(str(model), outcome["manifest"]))
    assert message.startswith("%s does not match the manifest: " % model)
    assert "1 missing (tokenizer/tokenizer.json); 1 unexpected (stray.bin); 2 mismatched (" in message
    assert "model-00002-of-00002.safetensors: 10000 bytes, expected 10004" in message
    assert "model-00001-of-00002.safetensors: sha256 " in message


def test_long_problem_lists_are_shortened(built):
    model, outcome = built
    write_tree(model, {"stray%02d" % n: b"x" for n in range(8)})
    message = describe_problems(str(model), "m", verify_tree(str(model), outcome["manifest"]))
    assert "8 unexpected (stray00, stray01, stray02, stray03, stray04 and 3 more)" in message


# -------------------------------------------------------------------------- cache


def test_unchanged_files_come_from_the_cache(built):
    model, outcome = built
    result = verify_tree(str(model), outcome["manifest"], cache=outcome["cache"])
    assert (result["hashed_files"], result["cached_files"], result["hashed_bytes"]) == (0, len(TREE), 0)
    assert result["cache"] == outcome["cache"]


def test_a_new_mtime_invalidates_the_cache_entry(built):
    model, outcome = built
    path = model / "config.json"
    os.utime(path, ns=(OLD_NS + 5, OLD_NS + 5))
    result = verify_tree(str(model), outcome["manifest"], cache=outcome["cache"], now_ns=future_clock)
    assert result["ok"] is True
    assert (result["hashed_files"], result["cached_files"]) == (1, len(TREE) - 1)
    assert result["hashed_bytes"] == len(TREE["config.json"])
    assert result["cache"]["config.json"]["mtime_ns"] == OLD_NS + 5


def test_a_replaced_file_with_its_old_mtime_is_read_again(built):
    """What rsync -a leaves: a new inode carrying the old mtime."""
    model, outcome = built
    path = model / "model-00001-of-00002.safetensors"
    before = path.stat()
    corrupted = bytearray(path.read_bytes())
    corrupted[7] ^= 0x01
    temp = model / ".model-00001-of-00002.safetensors.Xy3kQ9"
    temp.write_bytes(bytes(corrupted))
    os.utime(temp, ns=(before.st_mtime_ns, before.st_mtime_ns))
    os.replace(temp, path)
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    result = verify_tree(str(model), outcome["manifest"], cache=outcome["cache"])
    assert result["hashed_files"] == 1
    assert [(item["path"], item["reason"]) for item in result["mismatched"]] == [
        ("model-00001-of-00002.safetensors", "sha256")]


def test_cached_digests_are_trusted_and_full_ignores_them(built):
    """A cache whose metadata matches is believed; checksums=full reads the files instead."""
    model, outcome = built
    lying = {rel: dict(entry, sha256="0" * 64) for rel, entry in outcome["cache"].items()}
    cached = verify_tree(str(model), outcome["manifest"], cache=lying)
    assert sorted(item["path"] for item in cached["mismatched"]) == sorted(TREE)
    full = verify_tree(str(model), outcome["manifest"], cache=lying, checksums="full", now_ns=future_clock)
    assert full["ok"] is True
    assert (full["hashed_files"], full["cached_files"]) == (len(TREE), 0)
    assert full["cache"] == outcome["cache"]


def test_build_reuses_the_cache(built):
    model, outcome = built
    again = build_manifest(str(model), cache=outcome["cache"])
    assert again["manifest"] == outcome["manifest"]
    assert (again["hashed_files"], again["cached_files"]) == (0, len(TREE))


def test_cache_drops_files_that_are_gone_or_changed_size(built):
    model, outcome = built
    damage_remove(model)
    damage_truncate(model)
    result = verify_tree(str(model), outcome["manifest"], cache=outcome["cache"])
    assert set(result["cache"]) == set(TREE) - {"tokenizer/tokenizer.json", "model-00002-of-00002.safetensors"}


def test_freshly_written_files_are_hashed_but_not_cached(model):
    fresh = write_tree(model, {"new.safetensors": b"just written"}, mtime_ns=time.time_ns())
    os.utime(fresh / "new.safetensors")  # ctime is now, whatever the mtime
    outcome = build_manifest(str(model))
    assert "new.safetensors" not in outcome["cache"]
    assert outcome["manifest"]["files"]["new.safetensors"]["sha256"] == sha(b"just written")


def test_the_racy_window_is_measured_from_the_start_of_hashing(model, monkeypatch):
    monkeypatch.setattr(_manifest, "RACY_WINDOW_NS", 0)
    assert set(build_manifest(str(model))["cache"]) == set(TREE)
    monkeypatch.setattr(_manifest, "RACY_WINDOW_NS", 3600 * 10**9)
    assert build_manifest(str(model))["cache"] == {}


@pytest.mark.parametrize(
    "text, root_of_cache, usable, reason",
    [
        (None, None, False, None),
        ("not json", None, False, "is not JSON"),
        ('{"version": 2, "files": {}}', None, False, "not a version 1 cache"),
        ('{"version": 1}', None, False, "not a version 1 cache"),
        (None, "/elsewhere", False, "was written for /elsewhere"),
        (None, "SAME", True, None),
    ],
)
def test_load_cache(model, built, text, root_of_cache, usable, reason):
    _model, outcome = built
    if text is None and root_of_cache:
        text = dump_cache(outcome["cache"], str(model) if root_of_cache == "SAME" else root_of_cache)
    entries, why = load_cache(text, str(model))
    assert entries == (outcome["cache"] if usable else {})
    assert (why is None) if reason is None else (reason in why)


def test_load_cache_drops_malformed_entries(model, built):
    _model, outcome = built
    data = json.loads(dump_cache(outcome["cache"], str(model)))
    data["files"]["config.json"]["sha256"] = "XYZ"
    data["files"]["tokenizer/tokenizer.json"]["size"] = "12"
    entries, why = load_cache(json.dumps(data), str(model))
    assert why is None
    assert set(entries) == set(TREE) - {"config.json", "tokenizer/tokenizer.json"}


# ----------------------------------------------------------------------- manifest


GOOD_SHA = "a" * 64


@pytest.mark.parametrize(
    "manifest, message",
    [
        ("[1", "not JSON"),
        ([], "is a list; expected a mapping"),
        ({"version": 2, "files": {"a": {"size": 1, "sha256": GOOD_SHA}}}, "version 2 is not supported; expected 1"),
        ({"version": True, "files": {"a": {"size": 1, "sha256": GOOD_SHA}}}, "version True is not supported"),
        ({"version": 1}, "lists no files"),
        ({"version": 1, "files": {}}, "lists no files"),
        ({"version": 1, "files": {"a": {"size": 1, "sha256": GOOD_SHA}}, "extra": 1}, "unknown keys extra"),
        ({"version": 1, "files": {"a": {"size": -1, "sha256": GOOD_SHA}}}, "size -1; expected a non-negative"),
        ({"version": 1, "files": {"a": {"size": True, "sha256": GOOD_SHA}}}, "size True; expected"),
        ({"version": 1, "files": {"a": {"size": "1", "sha256": GOOD_SHA}}}, "size '1'; expected"),
        ({"version": 1, "files": {"a": {"size": 1, "sha256": GOOD_SHA.upper()}}}, "64 lowercase hex digits"),
        ({"version": 1, "files": {"a": {"size": 1, "sha256": "a" * 63}}}, "64 lowercase hex digits"),
        ({"version": 1, "files": {"a": {"size": 1}}}, "expected exactly size and sha256"),
        ({"version": 1, "files": {"a": {"size": 1, "sha256": GOOD_SHA, "mtime": 3}}}, "expected exactly size"),
        ({"version": 1, "files": {"../a": {"size": 1, "sha256": GOOD_SHA}}}, "normalised relative path"),
        ({"version": 1, "files": {"a": {"size": 1, "sha256": GOOD_SHA}}, "symlinks": {"a": "b"}},
         "both as a file and as a symlink"),
        ({"version": 1, "files": {"a": {"size": 1, "sha256": GOOD_SHA}}, "symlinks": {"b": ""}},
         "expected a non-empty string"),
    ],
)
def test_invalid_manifests_are_refused_saying_what_was_expected(manifest, message):
    with pytest.raises(ManifestError, match=message.replace("(", r"\(")):
        parse_manifest(manifest)


def test_manifest_text_round_trips(built):
    _model, outcome = built
    text = _manifest.dump_manifest(outcome["manifest"])
    assert parse_manifest(text) == outcome["manifest"]
    assert text.endswith("}\n") and json.loads(text) == outcome["manifest"]


# -------------------------------------------------------------------------- origin

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ORIGIN = {"repo_id": "org/model", "commit": COMMIT, "allow_patterns": ["*.safetensors", "*.json"],
          "ignore_patterns": ["original/"]}


def test_a_built_manifest_records_its_origin_and_round_trips(model):
    outcome = build_manifest(str(model), now_ns=future_clock, origin=ORIGIN)
    assert outcome["manifest"]["origin"] == dict(ORIGIN, allow_patterns=["*.json", "*.safetensors"])
    assert parse_manifest(_manifest.dump_manifest(outcome["manifest"])) == outcome["manifest"]
    assert "origin" not in build_manifest(str(model), now_ns=future_clock)["manifest"]


def test_verifying_ignores_the_origin(model):
    outcome = build_manifest(str(model), now_ns=future_clock, origin=ORIGIN)
    assert verify_tree(str(model), outcome["manifest"], cache=outcome["cache"])["ok"] is True


@pytest.mark.parametrize(
    "expected, differences",
    [
        (ORIGIN, []),
        (dict(ORIGIN, allow_patterns=["*.json", "*.safetensors", "*.json"]), []),
        (dict(ORIGIN, commit=None), []),
        ({"repo_id": "org/model"}, []),
        (dict(ORIGIN, commit="f" * 40), ["commit is %s, expected %s" % (COMMIT, "f" * 40)]),
        (dict(ORIGIN, repo_id="org/other", ignore_patterns=[]),
         ["repo_id is org/model, expected org/other", "ignore_patterns is [original/], expected []"]),
    ],
)
def test_origin_differences_compare_what_is_expected(expected, differences):
    assert origin_differences(parse_origin(ORIGIN), expected) == differences


def test_a_manifest_without_origin_differs_from_every_origin():
    assert origin_differences(None, {"repo_id": "org/model"}) == [
        "the manifest records no origin (it was written before origins were recorded)"]


@pytest.mark.parametrize(
    "origin, partial, message",
    [
        ("org/model", False, "expected a mapping of repo_id, commit, allow_patterns, ignore_patterns"),
        (dict(ORIGIN, endpoint="https://h"), False, "unknown keys endpoint"),
        (dict(ORIGIN, commit=None), False, "commit is None; expected a non-empty string"),
        (dict(ORIGIN, repo_id=""), True, "repo_id is ''; expected a non-empty string"),
        (dict(ORIGIN, allow_patterns="*.json"), True, "allow_patterns is '\\*.json'; expected a list of strings"),
        (dict(ORIGIN, ignore_patterns=[1]), False, "ignore_patterns is \\[1\\]; expected a list of strings"),
    ],
)
def test_invalid_origins_are_refused(origin, partial, message):
    with pytest.raises(ManifestError, match=message):
        parse_origin(origin, partial=partial)


def test_a_manifest_with_an_invalid_origin_is_refused():
    with pytest.raises(ManifestError, match="the manifest's origin: commit is 3"):
        parse_manifest({"version": 1, "files": {"a": {"size": 1, "sha256": GOOD_SHA}},
                        "origin": dict(ORIGIN, commit=3)})
