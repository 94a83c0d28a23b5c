# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The hf_snapshot module's plan from a listing, without a Hub."""

from __future__ import annotations

import hashlib
import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.cluster.plugins.modules import hf_snapshot

COMMIT = "5d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1a0"
FILES = {"config.json": b"{}\n", "model.safetensors": b"\x01" * 2048}


def run(capsys, **params):
    with patch_module_args(params), pytest.raises(SystemExit):
        hf_snapshot.main()
    return json.loads(capsys.readouterr().out)


def manifest_files():
    return {rel: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for rel, data in FILES.items()}


def test_a_peer_plans_from_the_files_of_the_source_manifest(capsys, tmp_path):
    peer = tmp_path / "peer"
    peer.mkdir()
    (peer / "config.json").write_bytes(FILES["config.json"])
    (peer / "stray.bin").write_bytes(b"x")
    result = run(capsys, path=str(peer), state="planned", listing={"commit": COMMIT, "files": manifest_files()})
    assert not result.get("failed") and result["changed"] is False
    assert (result["commit"], result["to_fetch"], result["bytes_to_fetch"]) == (COMMIT, ["model.safetensors"], 2048)
    assert result["total_bytes"] == sum(map(len, FILES.values())) and result["extra"] == ["stray.bin"]


@pytest.mark.parametrize("listing", [{"commit": COMMIT, "files": "x"}, {"files": {}}])
def test_a_listing_without_commit_and_files_is_refused(capsys, tmp_path, listing):
    result = run(capsys, path=str(tmp_path), state="planned", listing=listing)
    assert result["failed"] is True and "listing must hold commit and files" in result["msg"]
