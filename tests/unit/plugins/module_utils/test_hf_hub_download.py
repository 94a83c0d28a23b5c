# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Hub downloader against the Hub stand-in, served on the loopback."""

from __future__ import annotations

import hashlib
import json
import os
from urllib import request as urlrequest

import pytest

from unit_support import served_hub

from ansible_collections.dgxspark.cluster.plugins.module_utils import _hf_hub, _progress

TOKEN = "hf_unit_test_token_0123456789"
REPO = "org/tiny"
BIG = os.urandom(1_500_000)
FILES = {
    "config.json": b'{"hidden_size": 64}\n',
    "tokenizer/tokenizer.json": b'{"model": {"vocab": {}}}\n',
    "model.safetensors": BIG,
}


@pytest.fixture
def hub(tmp_path):
    with served_hub(tmp_path / "repo", FILES, REPO, TOKEN) as server:
        yield server


def client(hub, token=TOKEN):
    return _hf_hub.HubClient(hub.endpoint, token, timeout=10)


def downloads(hub):
    return [line for line in hub.log_text().splitlines() if " file=" in line]


def test_a_fresh_download_fetches_every_file_and_verifies_it(hub, tmp_path):
    out = tmp_path / "out"
    result = _hf_hub.snapshot(client(hub), REPO, "main", str(out))
    assert result["commit"] == hub.repo.sha
    assert result["changed"] and result["bytes_received"] == sum(len(d) for d in FILES.values())
    for rel, data in FILES.items():
        assert (out / rel).read_bytes() == data
    lfs = {f["path"]: f["sha256"] for f in result["files"]}
    assert lfs["model.safetensors"] == hashlib.sha256(BIG).hexdigest()
    assert lfs["config.json"] is None
    # The tree came in pages joined by Link headers.
    assert sum(" /api/models/org/tiny/tree/" in line for line in hub.log_text().splitlines()) >= 2


def test_a_rerun_downloads_nothing_and_reports_no_change(hub, tmp_path):
    out = tmp_path / "out"
    _hf_hub.snapshot(client(hub), REPO, "main", str(out))
    before = len(downloads(hub))
    result = _hf_hub.snapshot(client(hub), REPO, "main", str(out))
    assert not result["changed"] and result["to_fetch"] == [] and result["hashed_bytes"] == 0
    assert len(downloads(hub)) == before


def left_partial(out, data):
    """The partial file an interrupted download of model.safetensors into O(out) leaves."""
    partial = _hf_hub.incomplete_path(str(out), "model.safetensors")
    os.makedirs(os.path.dirname(partial))
    with open(partial, "wb") as handle:
        handle.write(data)
    return partial


def test_an_incomplete_file_is_continued_with_a_range_request(hub, tmp_path):
    out = tmp_path / "out"
    partial = left_partial(out, BIG[:1_000_000])
    result = _hf_hub.snapshot(client(hub), REPO, "main", str(out), allow_patterns=["*.safetensors"])
    fetched = result["fetched"][0]
    assert fetched == {"path": "model.safetensors", "bytes_received": 500_000, "resumed_from": 1_000_000}
    assert (out / "model.safetensors").read_bytes() == BIG
    assert not os.path.exists(partial)
    assert any("range=1000000-" in line for line in downloads(hub))


def test_a_damaged_partial_fails_the_digest_and_is_removed(hub, tmp_path):
    out = tmp_path / "out"
    partial = left_partial(out, b"\0" * 1_000_000)
    with pytest.raises(_hf_hub.HubError, match="sha256 .* the Hub listed .* run again"):
        _hf_hub.snapshot(client(hub), REPO, "main", str(out), allow_patterns=["*.safetensors"])
    assert not os.path.exists(partial)
    assert _hf_hub.snapshot(client(hub), REPO, "main", str(out))["changed"]
    assert (out / "model.safetensors").read_bytes() == BIG


def test_a_file_changed_in_place_is_hashed_and_fetched_again(hub, tmp_path):
    out = tmp_path / "out"
    _hf_hub.snapshot(client(hub), REPO, "main", str(out))
    target = out / "model.safetensors"
    st = target.stat()
    # The kernel stamps ctime from a coarse clock (a tick of some ms): an edit
    # within the tick of the download would keep the recorded ctime, which no
    # real edit of a downloaded weight file does. Wait for the next tick.
    probe = tmp_path / "tick"
    probe.touch()
    while probe.stat().st_ctime_ns <= st.st_ctime_ns:
        probe.touch()
    with open(target, "r+b") as handle:
        handle.seek(10)
        handle.write(b"\xff")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    result = _hf_hub.snapshot(client(hub), REPO, "main", str(out))
    assert result["to_fetch"] == ["model.safetensors"]
    assert target.read_bytes() == BIG


def test_a_small_file_is_checked_against_its_git_blob_id(hub, tmp_path):
    out = tmp_path / "out"
    _hf_hub.snapshot(client(hub), REPO, "main", str(out))
    (out / "config.json").write_bytes(b'{"hidden_size": 65}\n')  # same size, other content
    assert _hf_hub.snapshot(client(hub), REPO, "main", str(out))["to_fetch"] == ["config.json"]
    assert (out / "config.json").read_bytes() == FILES["config.json"]


def test_check_mode_reports_what_would_be_fetched_and_writes_nothing(hub, tmp_path):
    out = tmp_path / "out"
    result = _hf_hub.snapshot(client(hub), REPO, "main", str(out), check_mode=True)
    assert result["changed"] and result["bytes_to_fetch"] == sum(len(d) for d in FILES.values())
    assert not out.exists() and downloads(hub) == []


def test_patterns_select_files_as_huggingface_hub_does(hub, tmp_path):
    result = _hf_hub.snapshot(client(hub), REPO, "main", str(tmp_path / "o"), check_mode=True,
                              allow_patterns=["*.json", "tokenizer/"], ignore_patterns=["config.*"])
    assert result["to_fetch"] == ["tokenizer/tokenizer.json"]
    with pytest.raises(_hf_hub.HubError, match="no file of org/tiny .* matches model_weights_allow_patterns"):
        _hf_hub.snapshot(client(hub), REPO, "main", str(tmp_path / "o"), allow_patterns=["*.gguf"])


def test_a_missing_or_wrong_token_is_refused_naming_the_variable(hub, tmp_path):
    with pytest.raises(_hf_hub.HubError, match="HTTP 401.*needs a token: set model_weights_hf_token"):
        _hf_hub.snapshot(client(hub, None), REPO, "main", str(tmp_path / "o"))
    with pytest.raises(_hf_hub.HubError) as caught:
        _hf_hub.snapshot(client(hub, "hf_wrong_secret"), REPO, "main", str(tmp_path / "o"))
    assert "refused" in str(caught.value) and "hf_wrong_secret" not in str(caught.value)


def test_an_unknown_revision_names_the_variables(hub, tmp_path):
    with pytest.raises(_hf_hub.HubError, match="HTTP 404 RevisionNotFound.*model_weights_hf_revision"):
        _hf_hub.snapshot(client(hub), REPO, "f" * 40, str(tmp_path / "o"))


def test_the_token_never_reaches_the_request_log(hub, tmp_path):
    _hf_hub.snapshot(client(hub), REPO, "main", str(tmp_path / "o"))
    assert TOKEN not in hub.log_text()


def test_a_listing_plans_without_asking_the_hub(hub, tmp_path):
    first = _hf_hub.snapshot(client(hub), REPO, "main", str(tmp_path / "src"))
    peer = tmp_path / "peer"
    (peer / "tokenizer").mkdir(parents=True)
    (peer / "model.safetensors").write_bytes(b"x" * len(BIG))  # right size counts for a space estimate
    requests = len(hub.log_text().splitlines())
    result = _hf_hub.snapshot(None, REPO, "main", str(peer), listing={"commit": first["commit"],
                                                                      "files": first["files"]})
    assert sorted(result["to_fetch"]) == ["config.json", "tokenizer/tokenizer.json"]
    assert result["bytes_to_fetch"] == len(FILES["config.json"]) + len(FILES["tokenizer/tokenizer.json"])
    assert len(hub.log_text().splitlines()) == requests


def test_a_manifest_listing_plans_as_the_hub_listing_does(hub, tmp_path):
    first = _hf_hub.snapshot(client(hub), REPO, "main", str(tmp_path / "src"))
    manifest_files = {rel: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                      for rel, data in FILES.items()}
    peer = tmp_path / "peer"
    (peer / "tokenizer").mkdir(parents=True)
    (peer / "model.safetensors").write_bytes(b"x" * len(BIG))
    requests = len(hub.log_text().splitlines())
    from_manifest = _hf_hub.snapshot(None, None, "main", str(peer),
                                     listing={"commit": first["commit"], "files": manifest_files})
    from_hub = _hf_hub.snapshot(None, None, "main", str(peer),
                                listing={"commit": first["commit"], "files": first["files"]})
    assert len(hub.log_text().splitlines()) == requests
    for key in ("commit", "to_fetch", "bytes_to_fetch", "total_bytes", "file_count"):
        assert from_manifest[key] == from_hub[key], key


def test_listing_files_of_a_manifest():
    good = "a" * 64
    assert _hf_hub.listing_files({"b/c": {"size": 3, "sha256": good}, "a": {"size": 0, "sha256": "x"}}) == [
        {"path": "a", "size": 0, "sha256": None, "blob_oid": None},
        {"path": "b/c", "size": 3, "sha256": good, "blob_oid": None},
    ]
    listed = [{"path": "a", "size": 1, "sha256": None, "blob_oid": None}]
    assert _hf_hub.listing_files(listed) is listed


@pytest.mark.parametrize("files, message", [
    ({"a": {"size": -1}}, "expected a path with a size"),
    ({"a": {"size": True}}, "expected a path with a size"),
    ({"a": 4}, "expected a path with a size"),
    ({"../a": {"size": 1}}, "would leave the weights directory"),
    ("a", "expected the list of an earlier hf_snapshot run or the files mapping of a weights manifest"),
])
def test_listing_files_refuses_what_is_not_a_listing(files, message):
    with pytest.raises(_hf_hub.HubError, match=message):
        _hf_hub.listing_files(files)


def test_next_link_reads_the_rel_next_entry():
    header = '<https://huggingface.co/api/models/a/b/tree/x?cursor=abc>; rel="next", <https://h/p>; rel="prev"'
    assert _hf_hub.next_link(header, "https://huggingface.co/x") == \
        "https://huggingface.co/api/models/a/b/tree/x?cursor=abc"
    assert _hf_hub.next_link('</api/t?cursor=2>; rel="next"', "http://h:8080/api/t") == "http://h:8080/api/t?cursor=2"
    assert _hf_hub.next_link("", "http://h/") is None


@pytest.mark.parametrize("target, keeps", [("https://huggingface.co/other", True),
                                           ("https://cdn-lfs.example/obj?sig=1", False)])
def test_a_redirect_keeps_the_token_only_on_the_same_host(target, keeps):
    req = urlrequest.Request("https://huggingface.co/a/b/resolve/x/f",
                             headers={"Authorization": "Bearer t", "Range": "bytes=5-"})
    new = _hf_hub._SameHostAuthRedirect().redirect_request(req, None, 302, "Found", {}, target)
    assert ("Authorization" in new.headers) is keeps
    assert new.headers["Range"] == "bytes=5-"


@pytest.mark.parametrize("path", ["../etc/passwd", "/abs", "a//b", "a/./b"])
def test_a_listed_path_that_leaves_the_directory_is_refused(path):
    with pytest.raises(_hf_hub.HubError, match="would leave the weights directory"):
        _hf_hub.parse_tree_entry({"type": "file", "path": path, "size": 1, "oid": "0" * 40})


def test_a_download_keeps_its_progress_file_at_the_bytes_received(hub, tmp_path):
    progress_path = tmp_path / "progress.json"
    seen = []

    class Recording(_progress.ProgressFile):
        def update(self, done=None, advance=0, force=False):
            super().update(done, advance, force)
            seen.append(self.done)

    out = tmp_path / "out"
    progress = Recording(str(progress_path), "weights", every=0)
    result = _hf_hub.snapshot(client(hub), REPO, "main", str(out), progress=progress)
    total = sum(len(d) for d in FILES.values())
    assert progress.total == total == result["bytes_received"]
    # Counted across files, rising to the total, with the big file in several chunks.
    assert seen[0] == 0 and seen[-1] == total and seen == sorted(seen) and len(seen) > len(FILES)
    assert json.loads(progress_path.read_text())["done"] == total


def test_a_resumed_download_counts_only_what_is_left(hub, tmp_path):
    out = tmp_path / "out"
    left_partial(out, BIG[:1_000_000])
    progress = _progress.ProgressFile(str(tmp_path / "progress.json"), "weights", every=0)
    _hf_hub.snapshot(client(hub), REPO, "main", str(out), allow_patterns=["*.safetensors"], progress=progress)
    assert progress.total == progress.done == 500_000
