# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Planning and applying a file set against tmp_path, without Ansible."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from unit_support import file_tree

from ansible_collections.dgxspark.cluster.plugins.module_utils import _file_set
from ansible_collections.dgxspark.cluster.plugins.module_utils._file_set import (
    ApplyError,
    FileSetError,
    apply_file_set,
    diff_entries,
    parse_mode,
    plan_file_set,
    report,
    write_atomically,
)

SECRET = "HF_TOKEN=hf_sEcReTvalue123\nOTHER=line two\n"
IS_ROOT = os.geteuid() == 0


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def converge(directories=(), files=(), links=(), **kwargs):
    steps = plan_file_set(directories, files, links, **kwargs)
    apply_file_set(steps)
    return report(steps)


@pytest.fixture
def desired(tmp_path):
    root = str(tmp_path / "etc" / "engine")
    return dict(
        directories=[
            {"path": root + "/v2/conf", "mode": "0750"},
            {"path": root, "mode": "0755"},
        ],
        files=[
            {"path": root + "/v2/conf/engine.yaml", "content": "tp: 4\n", "mode": "0644"},
            {"path": root + "/v2/conf/hf.env", "content": SECRET, "mode": "0600", "secret": True},
        ],
        links=[{"path": root + "/current", "src": "v2"}],
    )


def test_creates_the_set_reporting_in_input_order(tmp_path, desired):
    root = str(tmp_path / "etc" / "engine")
    result = converge(**desired)
    # tmp_path/etc is created for root (listed, shallower); root/v2 for root/v2/conf, just before it
    assert result["changed_paths"] == [
        root + "/v2", root + "/v2/conf", str(tmp_path / "etc"), root,
        root + "/v2/conf/engine.yaml", root + "/v2/conf/hf.env", root + "/current",
    ]
    assert set(map(tuple, result["reasons"].values())) == {("created",)}
    assert mode_of(root) == 0o755 and mode_of(str(tmp_path / "etc")) == 0o755
    assert mode_of(root + "/v2") == 0o750 and mode_of(root + "/v2/conf") == 0o750  # implicit parent: the child's mode
    assert Path(root + "/v2/conf/engine.yaml").read_text() == "tp: 4\n" and mode_of(root + "/v2/conf/engine.yaml") == 0o644
    assert Path(root + "/v2/conf/hf.env").read_text() == SECRET and mode_of(root + "/v2/conf/hf.env") == 0o600
    assert os.readlink(root + "/current") == "v2"
    assert not [name for name in os.listdir(root + "/v2/conf") if name.endswith(".tmp")]


def test_modes_do_not_depend_on_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        converge([{"path": str(tmp_path / "d"), "mode": "0775"}],
                 [{"path": str(tmp_path / "d" / "f"), "content": "x", "mode": "0664"}])
    finally:
        os.umask(old)
    assert mode_of(str(tmp_path / "d")) == 0o775 and mode_of(str(tmp_path / "d" / "f")) == 0o664


def test_a_second_run_reports_nothing_and_touches_nothing(tmp_path, desired):
    converge(**desired)
    before = file_tree(tmp_path)
    steps = plan_file_set(**desired)
    assert report(steps) == {"changed_paths": [], "reasons": {}}
    assert apply_file_set(steps) == []
    assert file_tree(tmp_path) == before


def test_a_content_change_replaces_the_file_atomically(tmp_path, desired):
    converge(**desired)
    path = desired["files"][0]["path"]
    inode = os.lstat(path).st_ino
    desired["files"][0]["content"] = "tp: 8\n"
    result = converge(**desired)
    assert result == {"changed_paths": [path], "reasons": {path: ["content"]}}
    assert Path(path).read_text() == "tp: 8\n" and mode_of(path) == 0o644
    assert os.lstat(path).st_ino != inode  # renamed into place, not rewritten
    assert not [name for name in os.listdir(os.path.dirname(path)) if name.endswith(".tmp")]


def test_same_size_different_content_is_a_change(tmp_path):
    path = tmp_path / "f"
    path.write_text("abc")
    os.chmod(path, 0o644)
    result = converge(files=[{"path": str(path), "content": "abd", "mode": "0644"}])
    assert result["reasons"] == {str(path): ["content"]} and path.read_text() == "abd"


def test_a_mode_change_is_fixed_in_place(tmp_path, desired):
    converge(**desired)
    path = desired["files"][0]["path"]
    directory = desired["directories"][1]["path"]
    inode = os.lstat(path).st_ino
    desired["files"][0]["mode"] = "0640"
    desired["directories"][1]["mode"] = "2775"
    result = converge(**desired)
    assert result == {"changed_paths": [directory, path], "reasons": {directory: ["mode"], path: ["mode"]}}
    assert mode_of(path) == 0o640 and os.lstat(path).st_ino == inode
    assert mode_of(directory) == 0o2775


def test_content_and_mode_change_together(tmp_path):
    path = tmp_path / "f"
    path.write_text("old")
    os.chmod(path, 0o666)
    result = converge(files=[{"path": str(path), "content": "new", "mode": "0600"}])
    assert result["reasons"] == {str(path): ["content", "mode"]}
    assert path.read_text() == "new" and mode_of(str(path)) == 0o600


def test_a_symlink_pointing_elsewhere_is_retargeted(tmp_path, desired):
    converge(**desired)
    link = desired["links"][0]["path"]
    desired["links"][0]["src"] = "v1"
    result = converge(**desired)
    assert result == {"changed_paths": [link], "reasons": {link: ["link"]}}
    assert os.readlink(link) == "v1"  # dangling is fine
    assert sorted(os.listdir(os.path.dirname(link))) == ["current", "v2"]


def test_a_symlink_to_a_directory_is_replaced_not_followed(tmp_path):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    os.symlink("v1", tmp_path / "current")
    converge(links=[{"path": str(tmp_path / "current"), "src": "v2"}])
    assert os.readlink(tmp_path / "current") == "v2"
    assert os.listdir(tmp_path / "v1") == [] and os.listdir(tmp_path / "v2") == []


def test_planning_writes_nothing(tmp_path, desired):
    converge(**desired)
    desired["files"][0]["content"] = "changed\n"
    desired["files"].append({"path": str(tmp_path / "etc" / "new"), "content": "x", "mode": "0600"})
    desired["directories"].append({"path": str(tmp_path / "a" / "b"), "mode": "0700"})
    desired["links"][0]["src"] = "v3"
    before = file_tree(tmp_path)
    steps = plan_file_set(**desired)
    assert len(report(steps)["changed_paths"]) == 5  # a, a/b, engine.yaml, new, current
    assert file_tree(tmp_path) == before


# --------------------------------------------------------------------------- refusals


def refusal(tmp_path, **desired):
    before = file_tree(tmp_path)
    with pytest.raises(FileSetError) as info:
        plan_file_set(**desired)
    assert file_tree(tmp_path) == before
    return str(info.value)


@pytest.mark.parametrize(
    "mode, expected",
    [
        (420, "mode is 420, a number (YAML reads an unquoted 0644 as the decimal number 420); expected an octal string"),
        ("u=rw", "mode is 'u=rw'; expected an octal string of 3 or 4 digits such as '0644'"),
        ("0999", "mode is '0999'; expected an octal string"),
        ("64", "mode is '64'; expected an octal string"),
        (None, "mode is missing; expected an octal string"),
    ],
)
def test_a_mode_that_is_not_an_octal_string_is_refused(tmp_path, mode, expected):
    path = str(tmp_path / "f")
    message = refusal(tmp_path, files=[{"path": path, "content": "x", "mode": mode}])
    assert message.startswith("file %s: mode is " % path) and expected in message


@pytest.mark.parametrize("mode, bits", [("644", 0o644), ("0644", 0o644), ("2775", 0o2775), ("01777", 0o1777)])
def test_octal_modes(mode, bits):
    assert parse_mode(mode) == bits


def test_a_relative_path_is_refused(tmp_path):
    message = refusal(tmp_path, directories=[{"path": "srv/models", "mode": "0755"}])
    assert message == "directory srv/models: the path is relative; expected an absolute path"


def test_a_path_listed_twice_is_refused(tmp_path):
    path = str(tmp_path / "x")
    message = refusal(tmp_path, directories=[{"path": path, "mode": "0755"}],
                      files=[{"path": path + "/", "content": "", "mode": "0644"}])
    assert message == "path %s is listed twice (as a directory and as a file); expected each path once" % path


def test_a_file_path_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "conf").mkdir()
    message = refusal(tmp_path, files=[{"path": str(tmp_path / "conf"), "content": "x", "mode": "0644"}])
    assert message == "file %s: found a directory; expected a regular file (or nothing)" % (tmp_path / "conf")


def test_a_symlink_where_a_file_or_directory_is_listed_is_refused(tmp_path):
    os.symlink("/etc", tmp_path / "l")
    message = refusal(tmp_path, files=[{"path": str(tmp_path / "l"), "content": "x", "mode": "0644"}])
    assert "found a symlink to /etc; expected a regular file" in message
    message = refusal(tmp_path, directories=[{"path": str(tmp_path / "l"), "mode": "0755"}])
    assert "found a symlink to /etc; expected a directory" in message


def test_a_link_path_holding_a_file_is_refused_not_replaced(tmp_path):
    (tmp_path / "current").write_text("data")
    message = refusal(tmp_path, links=[{"path": str(tmp_path / "current"), "src": "v2"}])
    assert message == "link %s: found a regular file; expected a symlink (or nothing)" % (tmp_path / "current")


def test_a_file_whose_directory_is_neither_there_nor_listed_is_refused(tmp_path):
    path = str(tmp_path / "missing" / "f")
    message = refusal(tmp_path, files=[{"path": path, "content": "x", "mode": "0644"}])
    assert message == ("file %s: its directory %s does not exist; expected it to exist or to be listed in "
                       "directories" % (path, tmp_path / "missing"))


def test_a_file_in_an_implicitly_created_parent_is_accepted(tmp_path):
    result = converge([{"path": str(tmp_path / "a" / "b"), "mode": "0700"}],
                      [{"path": str(tmp_path / "a" / "f"), "content": "x", "mode": "0600"}])
    assert result["changed_paths"] == [str(tmp_path / "a"), str(tmp_path / "a" / "b"), str(tmp_path / "a" / "f")]


def test_a_regular_file_where_a_parent_directory_is_needed_is_refused(tmp_path):
    (tmp_path / "blocker").write_text("")
    message = refusal(tmp_path, directories=[{"path": str(tmp_path / "blocker" / "sub" / "d"), "mode": "0755"}])
    assert message == "directory %s: found a regular file at %s; expected a directory there" % (
        tmp_path / "blocker" / "sub" / "d", tmp_path / "blocker")
    message = refusal(tmp_path, files=[{"path": str(tmp_path / "blocker" / "sub" / "f"), "content": "", "mode": "0644"}])
    assert message == "file %s: found a regular file at %s; expected a directory there" % (
        tmp_path / "blocker" / "sub" / "f", tmp_path / "blocker")
    message = refusal(tmp_path, links=[{"path": str(tmp_path / "blocker" / "l"), "src": "x"}])
    assert message == "link %s: found a regular file at %s; expected a directory there" % (
        tmp_path / "blocker" / "l", tmp_path / "blocker")


def test_entries_beneath_a_listed_file_or_through_a_listed_link_are_refused(tmp_path):
    message = refusal(
        tmp_path,
        directories=[{"path": str(tmp_path / "f" / "d"), "mode": "0755"}],
        files=[{"path": str(tmp_path / "f"), "content": "", "mode": "0644"},
               {"path": str(tmp_path / "current" / "conf"), "content": "", "mode": "0644"}],
        links=[{"path": str(tmp_path / "current"), "src": "v2"}],
    )
    assert "directory %s: its ancestor %s is listed as a file; expected a directory there" % (
        tmp_path / "f" / "d", tmp_path / "f") in message
    assert "file %s: the path passes through %s, which is listed as a link" % (
        tmp_path / "current" / "conf", tmp_path / "current") in message


def test_an_unknown_owner_is_refused(tmp_path):
    message = refusal(tmp_path, directories=[
        {"path": str(tmp_path / "d"), "mode": "0755", "owner": "no-such-user-here", "group": "no-such-group-here"}])
    assert "directory %s: owner 'no-such-user-here' does not exist on this node; expected an existing user " \
           "name or a numeric id" % (tmp_path / "d") in message
    assert "group 'no-such-group-here' does not exist on this node" in message


def test_every_problem_is_named_and_nothing_is_written_even_for_valid_entries(tmp_path):
    message = refusal(
        tmp_path,
        directories=[{"path": str(tmp_path / "fine"), "mode": "0755"}, {"path": "rel", "mode": "0755"}],
        files=[{"path": str(tmp_path / "fine" / "f"), "content": "x", "mode": 644}],
    )
    assert message.count("; expected") == 2
    assert not (tmp_path / "fine").exists()


@pytest.mark.parametrize("content, found", [({"tp": 4}, "a dict"), (42, "a number"), (None, "missing")])
def test_content_that_is_not_text_is_refused_without_naming_it(tmp_path, content, found):
    message = refusal(tmp_path, files=[{"path": str(tmp_path / "f"), "content": content, "mode": "0600"}])
    assert message.startswith("file %s: content is %s; expected text" % (tmp_path / "f", found))
    assert "42" not in message and "tp" not in message


# --------------------------------------------------------------------------- secrets


def test_secret_content_is_in_no_report_diff_or_message(tmp_path, desired):
    steps = plan_file_set(**desired)
    assert [entry["after_header"] for entry in diff_entries(steps)] == [desired["files"][0]["path"]]
    assert SECRET not in repr(report(steps)) + repr(diff_entries(steps)) + repr(steps)
    apply_file_set(steps)
    desired["files"][1]["content"] = SECRET + "MORE=1\n"
    steps = plan_file_set(**desired)
    assert report(steps)["reasons"] == {desired["files"][1]["path"]: ["content"]}
    assert diff_entries(steps) == [] and all(step.before is None for step in steps)
    desired["files"][1]["mode"] = "rw"
    with pytest.raises(FileSetError) as info:
        plan_file_set(**desired)
    assert "hf_sEcReTvalue123" not in str(info.value)


def test_diff_shows_old_and_new_text_of_public_files(tmp_path):
    path = tmp_path / "f"
    path.write_text("old\n")
    steps = plan_file_set(files=[{"path": str(path), "content": "new\n", "mode": "0644"},
                                 {"path": str(tmp_path / "g"), "content": "made\n", "mode": "0644"}])
    assert diff_entries(steps) == [
        {"before_header": str(path), "after_header": str(path), "before": "old\n", "after": "new\n"},
        {"before_header": str(tmp_path / "g"), "after_header": str(tmp_path / "g"), "before": "", "after": "made\n"},
    ]


def test_old_content_that_is_not_text_has_no_diff(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"\xff\xfe\x00")
    steps = plan_file_set(files=[{"path": str(path), "content": "text", "mode": "0644"}])
    assert report(steps)["reasons"][str(path)][0] == "content" and diff_entries(steps) == []


# --------------------------------------------------------------------------- owners


def test_owner_and_group_differences_are_planned(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    os.chmod(path, 0o644)
    st = os.lstat(path)
    users = {"svc": st.st_uid + 1, "me": st.st_uid}
    groups = {"svc": st.st_gid + 1, "me": st.st_gid}
    same = plan_file_set(files=[{"path": str(path), "content": "x", "mode": "0644", "owner": "me", "group": "me"}],
                         uid_of=users.__getitem__, gid_of=groups.__getitem__)
    assert report(same)["changed_paths"] == []
    other = plan_file_set(files=[{"path": str(path), "content": "x", "mode": "0644", "owner": "svc", "group": "svc"}],
                          uid_of=users.__getitem__, gid_of=groups.__getitem__)
    assert report(other)["reasons"] == {str(path): ["owner", "group"]}


def test_numeric_ids_are_accepted():
    assert _file_set.lookup_uid("4242424") == 4242424 and _file_set.lookup_gid("4242424") == 4242424
    with pytest.raises(KeyError):
        _file_set.lookup_uid("no-such-user-here")


@pytest.mark.skipif(not IS_ROOT, reason="changing owners takes root")
def test_owner_is_set_on_create_fixed_in_place_and_kept_on_rewrite(tmp_path):
    d, f = str(tmp_path / "d"), str(tmp_path / "d" / "f")
    converge([{"path": d, "mode": "0750", "owner": "4001", "group": "4002"}],
             [{"path": f, "content": "a", "mode": "0640", "owner": "4001", "group": "4002"}])
    assert (os.lstat(d).st_uid, os.lstat(d).st_gid) == (4001, 4002) and mode_of(d) == 0o750
    assert (os.lstat(f).st_uid, os.lstat(f).st_gid) == (4001, 4002)
    result = converge(files=[{"path": f, "content": "a", "mode": "0640", "owner": "4003"}])
    assert result["reasons"] == {f: ["owner"]} and (os.lstat(f).st_uid, os.lstat(f).st_gid) == (4003, 4002)
    converge(files=[{"path": f, "content": "b", "mode": "0640"}])  # owner not managed: kept
    assert (os.lstat(f).st_uid, os.lstat(f).st_gid) == (4003, 4002) and Path(f).read_text() == "b"


# --------------------------------------------------------------------------- writing


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_file_set.os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomically(str(path), b"new", 0o600)
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["f"]


def test_an_apply_failure_names_the_path_and_what_was_done(tmp_path, monkeypatch):
    steps = plan_file_set([{"path": str(tmp_path / "d"), "mode": "0755"}],
                          [{"path": str(tmp_path / "d" / "f"), "content": SECRET, "mode": "0600", "secret": True}])
    monkeypatch.setattr(_file_set.os, "fsync", lambda fd: (item for item in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(ApplyError) as info:
        apply_file_set(steps)
    assert info.value.done == [str(tmp_path / "d")]
    assert str(info.value) == "cannot converge file %s (created): [Errno 5] Input/output error" % (tmp_path / "d" / "f")
    assert os.listdir(tmp_path / "d") == []
