# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The file_set module on sets built in tmp_path."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from unit_support import file_tree

from ansible_collections.dgxspark.cluster.plugins.modules import file_set

SECRET = "HF_TOKEN=hf_sEcReTvalue123\nREGISTRY_PASSWORD=pa55word-xyz\n"
PUBLIC = "tensor_parallel_size: 4\nmax_model_len: 65536\n"


def run_raw(capsys, **params):
    with patch_module_args(params), pytest.raises(SystemExit):
        file_set.main()
    return capsys.readouterr().out


def run(capsys, **params):
    return json.loads(run_raw(capsys, **params))


@pytest.fixture
def params(tmp_path):
    root = str(tmp_path / "etc" / "engine")
    return dict(
        directories=[{"path": root + "/v2", "mode": "0755"}],
        files=[
            {"path": root + "/v2/engine.yaml", "content": PUBLIC, "mode": "0644"},
            {"path": root + "/v2/hf.env", "content": SECRET, "mode": "0600", "secret": True},
        ],
        links=[{"path": root + "/current", "src": "v2"}],
    )


def test_converges_the_set_and_a_second_run_changes_nothing(capsys, tmp_path, params):
    root = str(tmp_path / "etc" / "engine")
    result = run(capsys, **params)
    assert result["changed"] is True and not result.get("failed")
    assert result["changed_paths"] == [
        str(tmp_path / "etc"), root, root + "/v2", root + "/v2/engine.yaml", root + "/v2/hf.env", root + "/current"]
    assert result["reasons"][root + "/v2/hf.env"] == ["created"]
    assert Path(root + "/v2/hf.env").read_text() == SECRET
    assert stat.S_IMODE(os.lstat(root + "/v2/hf.env").st_mode) == 0o600
    assert os.readlink(root + "/current") == "v2"
    before = file_tree(tmp_path)
    again = run(capsys, **params)
    assert (again["changed"], again["changed_paths"], again["reasons"]) == (False, [], {})
    assert file_tree(tmp_path) == before


def test_reports_each_kind_of_change(capsys, tmp_path, params):
    run(capsys, **params)
    root = str(tmp_path / "etc" / "engine")
    params["files"][0]["content"] = PUBLIC + "enforce_eager: true\n"
    params["files"][1]["mode"] = "0640"
    params["directories"][0]["mode"] = "0750"
    params["links"][0]["src"] = "v1"
    result = run(capsys, **params)
    assert result["changed_paths"] == [root + "/v2", root + "/v2/engine.yaml", root + "/v2/hf.env", root + "/current"]
    assert result["reasons"] == {root + "/v2": ["mode"], root + "/v2/engine.yaml": ["content"],
                                 root + "/v2/hf.env": ["mode"], root + "/current": ["link"]}
    assert Path(root + "/v2/engine.yaml").read_text().endswith("enforce_eager: true\n")
    assert os.readlink(root + "/current") == "v1"


def test_check_mode_reports_and_writes_nothing(capsys, tmp_path, params):
    before = file_tree(tmp_path)
    result = run(capsys, _ansible_check_mode=True, **params)
    assert result["changed"] is True and len(result["changed_paths"]) == 6
    assert file_tree(tmp_path) == before
    run(capsys, **params)
    params["files"][0]["content"] = "changed\n"
    before = file_tree(tmp_path)
    result = run(capsys, _ansible_check_mode=True, **params)
    assert result["reasons"] == {params["files"][0]["path"]: ["content"]}
    assert file_tree(tmp_path) == before


def test_diff_shows_public_files_only_and_the_secret_appears_nowhere(capsys, tmp_path, params):
    out = run_raw(capsys, _ansible_diff=True, **params)
    result = json.loads(out)
    assert result["diff"] == [{"before_header": params["files"][0]["path"], "after_header": params["files"][0]["path"],
                               "before": "", "after": PUBLIC}]
    for fragment in ("hf_sEcReTvalue123", "pa55word-xyz", "REGISTRY_PASSWORD"):
        assert fragment not in out
    contents = [f["content"] for f in result["invocation"]["module_args"]["files"]]
    assert contents == [PUBLIC, "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"]


def test_the_secret_stays_out_of_a_refusal(capsys, tmp_path, params):
    params["files"][1]["mode"] = 600
    out = run_raw(capsys, **params)
    result = json.loads(out)
    assert result["failed"] is True and "hf_sEcReTvalue123" not in out
    assert "file %s: mode is 600, a number" % params["files"][1]["path"] in result["msg"]
    assert result["msg"].startswith("refusing the file set, nothing was written: ")
    assert not (tmp_path / "etc").exists()


def test_the_invocation_is_not_logged_on_the_node(capsys, tmp_path, params, monkeypatch):
    logged = []
    monkeypatch.setattr(basic, "has_journal", False)
    monkeypatch.setattr(basic.AnsibleModule, "_log_to_syslog", lambda self, msg: logged.append(msg))
    run(capsys, **params)
    assert not any("hf_sEcReTvalue123" in message for message in logged)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p, t: p["directories"].append({"path": "relative/dir", "mode": "0755"}),
         "directory relative/dir: the path is relative; expected an absolute path"),
        (lambda p, t: p["links"].append({"path": p["files"][0]["path"], "src": "x"}),
         "path {root}/v2/engine.yaml is listed twice (as a file and as a link); expected each path once"),
        (lambda p, t: p["directories"].__setitem__(0, dict(p["directories"][0], mode="rwxr-xr-x")),
         "directory {root}/v2: mode is 'rwxr-xr-x'; expected an octal string of 3 or 4 digits"),
        (lambda p, t: p["files"][0].__setitem__("content", {"tensor_parallel_size": "four ranks"}),
         "file {root}/v2/engine.yaml: content is a dict; expected text"),
    ],
)
def test_refusals_name_the_path_and_write_nothing(capsys, tmp_path, params, change, message):
    change(params, tmp_path)
    result = run(capsys, **params)
    assert result["failed"] is True and result["changed"] is False
    assert message.format(root=tmp_path / "etc" / "engine") in result["msg"]
    assert not (tmp_path / "etc").exists()


def test_a_file_path_that_is_a_directory_is_refused(capsys, tmp_path, params):
    os.makedirs(params["files"][0]["path"])
    result = run(capsys, **params)
    assert result["failed"] is True
    assert "file %s: found a directory; expected a regular file (or nothing)" % params["files"][0]["path"] in result["msg"]
    assert os.listdir(os.path.dirname(params["files"][0]["path"])) == ["engine.yaml"]


def test_a_write_failure_reports_what_was_done(capsys, tmp_path, params, monkeypatch):
    from ansible_collections.dgxspark.cluster.plugins.module_utils import _file_set

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_file_set.os, "fsync", no_space)
    result = run(capsys, **params)
    root = str(tmp_path / "etc" / "engine")
    assert result["failed"] is True and result["changed"] is True
    assert result["msg"] == "cannot converge file %s/v2/engine.yaml (created): [Errno 28] No space left on device" % root
    assert result["changed_paths"] == [str(tmp_path / "etc"), root, root + "/v2"]


def test_an_empty_set_changes_nothing(capsys):
    result = run(capsys)
    assert (result["changed"], result["changed_paths"], result["reasons"]) == (False, [], {})
