# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The hf_snapshot module: its plan from a listing without a Hub, and its download,
check mode, plan and refusals against the Hub stand-in served on the loopback."""

from __future__ import annotations

import hashlib
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from unit_support import module_result, served_hub

from ansible_collections.dgxspark.cluster.plugins.modules import hf_snapshot

COMMIT = "5d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1a0"
FILES = {"config.json": b"{}\n", "model.safetensors": b"\x01" * 2048}


def run(capsys, **params):
    return module_result(hf_snapshot.main, capsys, params)[0]


def manifest_files():
    return {rel: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for rel, data in FILES.items()}


def test_a_peer_plans_from_the_files_of_the_source_manifest(capsys, tmp_path):
    peer = tmp_path / "peer"
    peer.mkdir()
    (peer / "config.json").write_bytes(FILES["config.json"])
    (peer / "stray.bin").write_bytes(b"x")
    # The model_weights role's marker is no stray file.
    (peer / ".dgxspark-weights").write_text("ours\n")
    result = run(capsys, path=str(peer), state="planned", listing={"commit": COMMIT, "files": manifest_files()})
    assert not result.get("failed") and result["changed"] is False
    assert (result["commit"], result["to_fetch"], result["bytes_to_fetch"]) == (COMMIT, ["model.safetensors"], 2048)
    assert result["total_bytes"] == sum(map(len, FILES.values())) and result["extra"] == ["stray.bin"]


@pytest.mark.parametrize("listing", [{"commit": COMMIT, "files": "x"}, {"files": {}}])
def test_a_listing_without_commit_and_files_is_refused(capsys, tmp_path, listing):
    result = run(capsys, path=str(tmp_path), state="planned", listing=listing)
    assert result["failed"] is True and "listing must hold commit and files" in result["msg"]


# --- The module against the Hub stand-in on 127.0.0.1 --------------------------

TOKEN = "hf_module_test_token_0123456789"
REPO = "org/tiny"
HUB_FILES = {
    "config.json": b'{"hidden_size": 64}\n',
    "tokenizer/tokenizer.json": b'{"model": {"vocab": {}}}\n',
    "model.safetensors": bytes(range(256)) * 6000,
}


@pytest.fixture
def hub(tmp_path):
    with served_hub(tmp_path / "hub-repo", HUB_FILES, REPO, TOKEN) as server:
        server.downloads = lambda: [line for line in server.log_text().splitlines() if " file=" in line]
        yield server


def from_hub(capsys, hub, path, **params):
    return run(capsys, path=str(path), repo_id=REPO, endpoint=hub.endpoint, token=TOKEN, timeout=10, **params)


def test_present_downloads_every_file_and_names_the_strays(capsys, hub, tmp_path):
    out = tmp_path / "models" / "tiny"
    (out / "notes").mkdir(parents=True)
    (out / "notes" / "mine.txt").write_bytes(b"kept")
    result = from_hub(capsys, hub, out)
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True and result["commit"] == hub.repo.sha
    assert sorted(result["to_fetch"]) == sorted(HUB_FILES)
    assert result["bytes_received"] == result["total_bytes"] == sum(map(len, HUB_FILES.values()))
    for rel, data in HUB_FILES.items():
        assert (out / rel).read_bytes() == data
    # The stray file is named and left alone; the module's own .cache is no stray.
    assert result["extra"] == ["notes/mine.txt"] and (out / "notes" / "mine.txt").read_bytes() == b"kept"
    assert (out / ".cache" / "dgxspark" / "snapshot.json").is_file()
    assert len(hub.downloads()) == len(HUB_FILES)

    again = from_hub(capsys, hub, out)
    assert (again["changed"], again["to_fetch"], again["fetched"], again["bytes_received"]) == (False, [], [], 0)
    assert len(hub.downloads()) == len(HUB_FILES)


def test_patterns_reach_the_download(capsys, hub, tmp_path):
    out = tmp_path / "tiny"
    result = from_hub(capsys, hub, out, allow_patterns=["*.json", "tokenizer/"], ignore_patterns=["config.*"])
    assert result["to_fetch"] == ["tokenizer/tokenizer.json"] and result["file_count"] == 1
    assert sorted(p.name for p in out.iterdir()) == [".cache", "tokenizer"]


@pytest.mark.parametrize("params", [{"_ansible_check_mode": True}, {"state": "planned"}], ids=["check", "planned"])
def test_check_mode_and_planned_ask_the_hub_and_write_nothing(capsys, hub, tmp_path, params):
    out = tmp_path / "tiny"
    result = from_hub(capsys, hub, out, **params)
    assert not result.get("failed"), result.get("msg")
    assert sorted(result["to_fetch"]) == sorted(HUB_FILES)
    assert result["bytes_to_fetch"] == sum(map(len, HUB_FILES.values()))
    # A plan is no change; check mode predicts the download.
    assert result["changed"] is (params.get("state") != "planned")
    assert result["fetched"] == [] and result["extra"] == []
    assert not out.exists() and hub.downloads() == []


def test_a_refused_token_fails_naming_the_variable_and_never_shows_the_token(capsys, hub, tmp_path):
    secret = "hf_wrong_secret_value_42"
    with patch_module_args(dict(path=str(tmp_path / "tiny"), repo_id=REPO, endpoint=hub.endpoint, token=secret)), pytest.raises(SystemExit):
        hf_snapshot.main()
    out = capsys.readouterr().out
    result = json.loads(out)
    assert result["failed"] is True
    assert result["msg"].startswith(REPO + ": ") and "HTTP 401" in result["msg"]
    assert "the token in model_weights_hf_token was refused" in result["msg"]
    assert secret not in out


@pytest.mark.parametrize(
    "params, message",
    [
        ({"state": "present", "repo_id": REPO, "listing": {"commit": COMMIT, "files": {}}},
         "listing is given, so the Hub is not asked and nothing can be downloaded; use state=planned with listing"),
        ({"path": "models/tiny", "repo_id": REPO}, "path is 'models/tiny'; expected an absolute directory"),
        ({"path": "FILE", "repo_id": REPO}, "FILE exists and is not a directory; expected the model directory"),
        ({"repo_id": REPO, "endpoint": "huggingface.co"},
         "endpoint is 'huggingface.co'; expected an http(s) URL such as https://huggingface.co"),
        ({"state": "planned"}, "one of the following is required: repo_id, listing"),
    ],
    ids=["listing-with-present", "relative-path", "path-is-a-file", "endpoint-without-scheme", "nothing-to-list"],
)
def test_arguments_that_cannot_work_are_refused_before_the_hub_is_asked(capsys, tmp_path, params, message):
    a_file = tmp_path / "weights.bin"
    a_file.write_bytes(b"x")
    params = dict(params)
    path = params.pop("path", str(tmp_path / "tiny"))
    path = str(a_file) if path == "FILE" else path
    message = message.replace("FILE", str(a_file))
    # An endpoint nothing listens on: a request would fail with another message.
    params.setdefault("endpoint", "http://127.0.0.1:9")
    result = run(capsys, path=path, **params)
    assert result["failed"] is True and message in result["msg"], result["msg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.bin"]


def test_a_directory_that_cannot_be_created_fails_with_a_message(capsys, hub, tmp_path):
    blocker = tmp_path / "models"
    blocker.write_bytes(b"not a directory")
    out = blocker / "tiny"
    result = from_hub(capsys, hub, out)
    assert result["failed"] is True
    assert result["msg"].startswith("cannot write the weights under %s: " % out)
    assert "Not a directory" in result["msg"]
    assert hub.downloads() == []


# --- state=resolved: the preflight's question, without a path -----------------------


def resolve(capsys, endpoint, revision, token=TOKEN, repo_id=REPO):
    return run(capsys, repo_id=repo_id, revision=revision, endpoint=endpoint, token=token, state="resolved", timeout=5)


def test_resolved_names_the_commit_of_a_revision_the_hub_knows(capsys, hub):
    result = resolve(capsys, hub.endpoint, "main")
    assert not result.get("failed") and result["changed"] is False
    assert (result["commit"], result["status"]) == (hub.repo.sha, 200)
    assert result["url"] == "%s/api/models/%s/revision/main" % (hub.endpoint, REPO)
    assert hub.downloads() == []


def test_resolved_fails_on_a_revision_the_hub_lacks(capsys, hub):
    missing = "6e4d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1"
    result = resolve(capsys, hub.endpoint, missing)
    assert result["failed"] is True and result["status"] == 404
    assert result["msg"].startswith("%s/api/models/%s/revision/%s: " % (hub.endpoint, REPO, missing))
    assert "check model_weights_hf_repo_id and model_weights_hf_revision" in result["msg"]


def test_resolved_fails_on_a_refused_token_without_showing_it(capsys, hub):
    secret = "hf_wrong_secret_value_43"
    with patch_module_args(dict(repo_id=REPO, endpoint=hub.endpoint, token=secret, state="resolved")), \
            pytest.raises(SystemExit):
        hf_snapshot.main()
    out = capsys.readouterr().out
    result = json.loads(out)
    assert result["failed"] is True and result["status"] == 401
    assert "the token in model_weights_hf_token was refused" in result["msg"]
    assert secret not in out


def test_resolved_fails_on_an_unreachable_hub_with_a_null_status(capsys):
    result = resolve(capsys, "http://127.0.0.1:9", "main")
    assert result["failed"] is True and result["status"] is None
    assert "cannot reach http://127.0.0.1:9" in result["msg"]


def test_resolved_needs_no_path_but_the_other_states_do(capsys):
    result = run(capsys, repo_id=REPO, endpoint="http://127.0.0.1:9", state="planned")
    assert result["failed"] is True and "path" in result["msg"]


def test_with_a_progress_file_the_download_leaves_its_last_record_there(capsys, hub, tmp_path):
    out, progress = tmp_path / "tiny", tmp_path / "job" / "progress.json"
    progress.parent.mkdir()
    result = from_hub(capsys, hub, out, progress_file=str(progress), progress_interval=1)
    assert not result.get("failed"), result.get("msg")
    record = json.loads(progress.read_text())
    total = sum(map(len, HUB_FILES.values()))
    assert (record["phase"], record["done"], record["total"]) == ("weights", total, total)


def test_a_download_nobody_follows_any_more_stops_and_keeps_what_it_has(capsys, hub, tmp_path, monkeypatch):
    # As if the last poll was long ago: the first write finds the step abandoned.
    monkeypatch.setattr(hf_snapshot, "abandon_after", lambda interval: -1)
    out, progress = tmp_path / "tiny", tmp_path / "progress.json"
    result = from_hub(capsys, hub, out, progress_file=str(progress))
    assert result["failed"] is True
    assert result["msg"].startswith("the download into %s: no controller has followed this step" % out)
    assert hub.downloads() == []


def test_check_mode_writes_no_progress_file(capsys, hub, tmp_path):
    progress = tmp_path / "progress.json"
    result = from_hub(capsys, hub, tmp_path / "tiny", progress_file=str(progress), _ansible_check_mode=True)
    assert not result.get("failed") and not progress.exists()
