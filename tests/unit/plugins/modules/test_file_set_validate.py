# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""file_set's per-file validate: run on the new content in a private temporary directory
before anything of the set is written, only for files created or changed, never in check
mode; a failure names the file, the command, its rc and stderr and writes nothing."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from unit_support import file_tree, module_result

from ansible_collections.dgxspark.cluster.plugins.module_utils._file_set import (
    FileSetError,
    plan_file_set,
    validate_file_set,
    validation_argv,
)
from ansible_collections.dgxspark.cluster.plugins.modules import file_set

# A validator that records what it saw (the path, its directory's listing, the file's
# mode and text) in LOG and fails when the text holds "bad".
CHECKER = (
    "import json, os, stat, sys; p = sys.argv[1]; d = os.path.dirname(p); "
    "t = open(p).read(); open(sys.argv[2], 'a').write(json.dumps({'path': p, 'dir': os.path.basename(d), "
    "'siblings': sorted(os.listdir(d)), 'mode': oct(stat.S_IMODE(os.stat(p).st_mode)), 'text': t}) + chr(10)); "
    "sys.stderr.write('found bad in ' + p) if 'bad' in t else None; sys.exit(3 if 'bad' in t else 0)"
)


def run(capsys, check_mode=False, **params):
    if check_mode:
        params["_ansible_check_mode"] = True
    return module_result(file_set.main, capsys, params)[0]


@pytest.fixture
def setup(tmp_path):
    log = tmp_path / "validations.jsonl"
    validate = "%s -c %s %%s %s" % (sys.executable, json.dumps(CHECKER).replace("%", "%%"), log)
    root = tmp_path / "etc" / "systemd" / "system"

    def files(engine="[Service]\nExecStart=/bin/true\n", watchdog="[Unit]\nBindsTo=e.service\n"):
        return [
            {"path": str(root / "e.service"), "content": engine, "mode": "0644", "validate": validate},
            {"path": str(root / "w.service"), "content": watchdog, "mode": "0644", "validate": validate},
            {"path": str(root / "e.service.d" / "x.conf"), "content": "[Service]\nNice=1\n", "mode": "0640",
             "validate": validate},
            {"path": str(root / "plain.conf"), "content": "no check\n", "mode": "0644"},
        ]

    def seen():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    directories = [{"path": str(root), "mode": "0755"}, {"path": str(root / "e.service.d"), "mode": "0755"}]
    return dict(root=root, files=files, seen=seen, directories=directories, log=log)


def test_each_new_file_is_checked_under_its_own_name_beside_the_others_of_its_directory(capsys, setup):
    result = run(capsys, directories=setup["directories"], files=setup["files"]())
    assert result["changed"] is True and not result.get("failed")
    seen = {Path(entry["path"]).name: entry for entry in setup["seen"]()}
    assert sorted(seen) == ["e.service", "w.service", "x.conf"]
    # The unit sees its own name and the other unit of its directory; the drop-in sits in <unit>.d.
    assert seen["w.service"]["siblings"] == ["e.service", "w.service"]
    assert seen["w.service"]["dir"] == "system"
    assert (seen["x.conf"]["dir"], seen["x.conf"]["mode"]) == ("e.service.d", "0o640")
    assert seen["e.service"]["text"] == "[Service]\nExecStart=/bin/true\n"
    # The copies are gone, and they never were under the set's paths.
    assert not any(str(setup["root"]) in entry["path"] for entry in seen.values())
    assert all(not os.path.exists(os.path.dirname(os.path.dirname(entry["path"]))) for entry in seen.values())


def test_a_failed_check_writes_nothing_and_names_file_command_rc_and_stderr(capsys, setup):
    run(capsys, directories=setup["directories"], files=setup["files"]())
    before = file_tree(setup["root"].parent.parent)
    files = setup["files"](engine="[Service]\nExecStart=/bin/false\n", watchdog="bad\n")
    files.append({"path": str(setup["root"] / "new.conf"), "content": "new\n", "mode": "0644"})
    result = run(capsys, directories=setup["directories"] + [{"path": str(setup["root"] / "new.d"), "mode": "0755"}],
                 files=files)
    assert result["failed"] is True and result["changed"] is False
    assert (result["changed_paths"], result["reasons"]) == ([], {})
    watchdog = str(setup["root"] / "w.service")
    assert result["msg"].startswith("refusing the file set, nothing was written: file %s: validate " % watchdog)
    assert "exited 3: found bad in " in result["msg"]
    (failure,) = result["validation"]
    assert (failure["path"], failure["rc"], failure["validate"]) == (watchdog, 3, files[1]["validate"])
    assert failure["stderr"].startswith("found bad in ") and failure["stderr"].endswith("/w.service")
    assert (result["rc"], result["stderr"]) == (3, failure["stderr"])
    # Neither the engine unit whose check passed, nor the new file and directory, nor anything else.
    assert file_tree(setup["root"].parent.parent) == before
    # Only the two changed files were checked.
    assert sorted(Path(entry["path"]).name for entry in setup["seen"]()[3:]) == ["e.service", "w.service"]


def test_no_check_runs_when_nothing_or_only_the_mode_changes(capsys, setup):
    run(capsys, directories=setup["directories"], files=setup["files"]())
    checked = len(setup["seen"]())
    assert run(capsys, directories=setup["directories"], files=setup["files"]())["changed"] is False
    files = setup["files"]()
    files[0]["mode"] = "0600"
    result = run(capsys, directories=setup["directories"], files=files)
    assert result["reasons"] == {files[0]["path"]: ["mode"]}
    assert len(setup["seen"]()) == checked


def test_check_mode_does_not_check_and_predicts_the_change(capsys, setup):
    result = run(capsys, check_mode=True, directories=setup["directories"], files=setup["files"](watchdog="bad\n"))
    assert result["changed"] is True and not result.get("failed")
    assert setup["seen"]() == []
    assert not setup["root"].exists()


def test_a_command_that_cannot_run_fails_like_a_failed_check(capsys, setup):
    files = setup["files"]()
    files[0]["validate"] = "/nonexistent/validator %s"
    result = run(capsys, directories=setup["directories"], files=files)
    assert result["failed"] is True and result["rc"] == 127
    assert "cannot run /nonexistent/validator" in result["stderr"]
    assert not setup["root"].exists()


@pytest.mark.parametrize("validate, found", [
    ("systemd-analyze verify", "validate is 'systemd-analyze verify'; expected a command holding %s"),
    (["x", "%s"], "validate is a list; expected a command holding %s"),
    ("sh -c 'unbalanced %s", "cannot be split into words"),
])
def test_a_validate_without_placeholder_or_words_is_refused(tmp_path, validate, found):
    with pytest.raises(FileSetError, match="file %s: .*%s" % (tmp_path / "a", "")) as refused:
        plan_file_set(files=[{"path": str(tmp_path / "a"), "content": "x", "mode": "0644", "validate": validate}])
    assert found in str(refused.value)


def test_the_command_is_split_like_a_shell_and_the_placeholders_replaced():
    assert validation_argv("sh -c 'echo \"$1\" 100%%' sh %s", "/tmp/x y/a.service") == [
        "sh", "-c", "echo \"$1\" 100%", "sh", "/tmp/x y/a.service"]
    assert validation_argv("check --file=%s", "/p") == ["check", "--file=/p"]


def test_the_temporary_directory_is_removed_when_a_check_raises(tmp_path):
    steps = plan_file_set(files=[{"path": str(tmp_path / "a.service"), "content": "x", "mode": "0644",
                                  "validate": "v %s"}])
    temp_root = tmp_path / "temp"
    temp_root.mkdir()

    def explode(argv):
        assert os.path.exists(argv[1])
        raise RuntimeError("validator crashed")

    with pytest.raises(RuntimeError):
        validate_file_set(steps, explode, temp_root=str(temp_root))
    assert list(temp_root.iterdir()) == []
    assert not (tmp_path / "a.service").exists()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_analyze_refuses_a_bad_unit_and_passes_a_good_one(capsys, tmp_path):
    from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_systemd import systemd_verify_command

    unit = tmp_path / "dgxspark-check.service"
    good = "[Unit]\nDescription=check\n\n[Service]\nType=oneshot\nExecStart=\"/bin/true\" \"x\"\n"
    bad = good + "ExecStartPost=/no/such/program\n"
    entry = {"path": str(unit), "mode": "0644", "validate": systemd_verify_command(str(unit))}
    result = run(capsys, files=[dict(entry, content=bad)])
    assert result["failed"] is True and not unit.exists()
    assert "/no/such/program is not executable" in result["stderr"]
    typo = run(capsys, files=[dict(entry, content=good + "ExecStrat=/bin/true\n")])
    assert typo["failed"] is True and "Unknown key" in typo["stderr"] and not unit.exists()
    assert run(capsys, files=[dict(entry, content=good)])["changed"] is True
    assert unit.read_text() == good
