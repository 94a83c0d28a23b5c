# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node state read: the script runs here under sh against tmp_path (with stand-ins for
dpkg-query, systemctl and nvidia-smi on PATH), and what it prints is parsed back; the
comparison with a file set agrees with file_set's own planner."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import shutil
import subprocess

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._disk import disk_space
from ansible_collections.dgxspark.cluster.plugins.module_utils._file_set import (
    apply_file_set,
    changed_steps,
    plan_file_set,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._node_state import (
    MARKER,
    NodeStateError,
    absent_gpu_facts,
    check_spec,
    file_set_pending,
    gpu_facts_from,
    parse_read,
    read_command,
    read_script,
)

GB10_LINE = (
    "0, GPU-3a1f07c2-5b8e-4d19-a6e0-7c2b9d41f5e8, NVIDIA GB10, 0000000F:01:00.0, 580.95.05, "
    "12.1, [N/A], 3.52, [N/A], 36, Enabled, Default, [N/A], 208, 3003, 0x0000000000000001"
)
USER = pwd.getpwuid(os.geteuid()).pw_name
GROUP = grp.getgrgid(os.getegid()).gr_name

needs_gnu_tools = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("sh", "stat", "sha256sum", "readlink", "dirname")),
    reason="the read runs sh, stat, sha256sum, readlink and dirname",
)


def stand_in(directory, name, script):
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


@pytest.fixture
def bin_dir(tmp_path):
    """PATH entries: stand-ins first, then the system's tools."""
    directory = tmp_path / "bin"
    directory.mkdir()
    return directory


def run(spec, bin_dir=None, extra_path=None):
    """Run the read as ansible.builtin.raw would (its command line through a shell) and return
    its result dict."""
    path = os.environ.get("PATH", "/usr/bin:/bin")
    if bin_dir is not None:
        path = str(bin_dir) + os.pathsep + path
    if extra_path is not None:
        path = extra_path
    done = subprocess.run(
        ["sh", "-c", read_command(spec)], capture_output=True, text=True, env=dict(os.environ, PATH=path), check=False
    )
    assert done.returncode == 0, done.stderr
    # The connection strips the trailing newline of both streams.
    return {"rc": done.returncode, "stdout": done.stdout.rstrip("\r\n"), "stderr": done.stderr.rstrip("\r\n")}


# --- the spec ------------------------------------------------------------------------------


def test_spec_paths_are_normalised_and_lists_default_to_empty():
    spec = check_spec({"paths": ["/etc//docker/./daemon.json"]})
    assert spec["paths"] == ["/etc/docker/daemon.json"]
    assert spec["packages"] == spec["units"] == spec["disks"] == []
    assert spec["commands"] == {} and spec["gpu"] is False


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"files": []}, "read spec has files; expected only"),
        ({"paths": "/etc"}, "expected a list of absolute paths"),
        ({"paths": ["etc/docker"]}, "cannot read 'etc/docker': expected an absolute path"),
        ({"disks": ["srv/models"]}, "cannot measure free space for 'srv/models': expected an absolute path"),
        ({"paths": ["/etc/a\nb"]}, "expected an absolute path"),
        ({"packages": ["docker.io; rm -rf /"]}, "expected a package or unit name"),
        ({"units": ["-docker"]}, "expected a package or unit name"),
        ({"commands": {"info": "docker info"}}, "expected a non-empty argv list"),
        ({"commands": {"gpu-query": ["true"]}}, "is the GPU query's"),
        ("paths", "expected a dict"),
        ({"gpu": "maybe"}, "read spec gpu='maybe'; expected true, false or the absolute path of nvidia-smi"),
    ],
)
def test_a_spec_the_read_cannot_follow_is_refused(spec, message):
    with pytest.raises(NodeStateError, match=message.replace("(", r"\(")):
        check_spec(spec)


@pytest.mark.parametrize("value, wanted", [(True, True), ("True", True), ("false", False), ("", False), (0, False)])
def test_the_gpu_flag_may_come_templated_as_text(value, wanted):
    assert check_spec({"gpu": value})["gpu"] is wanted


def test_the_gpu_may_name_its_nvidia_smi():
    assert check_spec({"gpu": "/opt/nvidia//bin/nvidia-smi"})["gpu"] == "/opt/nvidia/bin/nvidia-smi"


def test_values_are_quoted_into_the_script():
    script = read_script({"paths": ["/tmp/it's here"], "commands": {"echo": ["echo", "$HOME", "a b"]}})
    assert "rd_path 0 '/tmp/it'\"'\"'s here'" in script
    assert "rd_command echo echo '$HOME' 'a b'" in script


# --- paths -----------------------------------------------------------------------------------


@needs_gnu_tools
def test_paths_report_kind_mode_owner_digest_and_link(tmp_path):
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o750)
    directory.chmod(0o2750)
    data = tmp_path / "etc" / "daemon.json"
    data.write_text('{"live-restore": true}\n')
    data.chmod(0o640)
    empty = tmp_path / "etc" / "empty"
    empty.write_text("")
    empty.chmod(0o644)
    link = tmp_path / "etc" / "current"
    link.symlink_to("daemon.json")
    spec = {"paths": [str(directory), str(data), str(empty), str(link), str(tmp_path / "missing")]}

    state = parse_read(run(spec), spec)

    paths = state["paths"]
    assert paths[str(directory)] == {
        "path": str(directory), "kind": "directory", "mode": "2750", "uid": os.geteuid(), "gid": os.getegid(),
        "owner": USER, "group": GROUP, "sha256": None, "link": None,
    }
    assert paths[str(data)]["kind"] == "file" and paths[str(data)]["mode"] == "0640"
    assert paths[str(data)]["sha256"] == hashlib.sha256(b'{"live-restore": true}\n').hexdigest()
    assert paths[str(empty)]["kind"] == "file" and paths[str(empty)]["sha256"] == hashlib.sha256(b"").hexdigest()
    assert paths[str(link)]["kind"] == "link" and paths[str(link)]["link"] == "daemon.json"
    assert paths[str(link)]["sha256"] is None
    assert paths[str(tmp_path / "missing")]["kind"] is None


@needs_gnu_tools
def test_a_path_with_spaces_quotes_and_a_marker_like_name_is_read_by_its_index(tmp_path):
    odd = tmp_path / ("it's %s path" % MARKER)
    odd.write_text("x")
    spec = {"paths": [str(odd)]}
    assert parse_read(run(spec), spec)["paths"][str(odd)]["kind"] == "file"


# --- packages and units ------------------------------------------------------------------------


DPKG_QUERY = r"""
for name in "$@"; do
  case "$name" in
    docker-ce) printf 'docker-ce 5:28.1.1-1~ubuntu.24.04~noble ii \n';;
    nvidia-container-toolkit) printf 'nvidia-container-toolkit 1.17.8-1 ii \n';;
    docker.io) printf 'docker.io  un \n';;
    moby-engine) printf 'moby-engine 20.10 rc \n';;
    *) echo "dpkg-query: no packages found matching $name" >&2; rc=1;;
  esac
done
exit ${rc:-0}
"""


@needs_gnu_tools
def test_only_installed_packages_are_listed_with_their_version(bin_dir):
    stand_in(bin_dir, "dpkg-query", DPKG_QUERY)
    spec = {"packages": ["docker-ce", "docker.io", "moby-engine", "nvidia-container-toolkit", "podman"]}
    assert parse_read(run(spec, bin_dir), spec)["packages"] == {
        "docker-ce": "5:28.1.1-1~ubuntu.24.04~noble",
        "nvidia-container-toolkit": "1.17.8-1",
    }


SYSTEMCTL = r"""
verb=$1; shift; [ "$1" = "--" ] && shift
case "$verb:$1" in
  is-enabled:docker) echo enabled;;
  is-active:docker) echo active;;
  is-enabled:containerd) echo static;;
  is-active:containerd) echo activating; exit 3;;
  is-enabled:aliased) echo alias;;
  is-active:aliased) echo inactive; exit 3;;
  is-enabled:*) echo "Failed to get unit file state for $1.service: No such file or directory" >&2; exit 1;;
  is-active:*) echo inactive; exit 3;;
esac
"""


@needs_gnu_tools
def test_units_are_judged_as_systemd_service_judges_them(bin_dir):
    stand_in(bin_dir, "systemctl", SYSTEMCTL)
    spec = {"units": ["docker", "containerd", "aliased", "podman"]}
    units = parse_read(run(spec, bin_dir), spec)["units"]
    assert units["docker"] == {"name": "docker", "is_enabled": "enabled", "is_active": "active",
                               "enabled": True, "active": True}
    assert units["containerd"]["enabled"] is True and units["containerd"]["active"] is True
    assert units["aliased"]["enabled"] is False and units["aliased"]["active"] is False
    assert units["podman"] == {"name": "podman", "is_enabled": "", "is_active": "inactive",
                               "enabled": False, "active": False}


# --- commands ----------------------------------------------------------------------------------


@needs_gnu_tools
def test_commands_keep_their_exact_output_rc_and_stderr():
    spec = {"commands": {
        "lines": ["printf", "a\\nb\\n"],
        "bare": ["printf", "x"],
        "nothing": ["true"],
        "fails": ["sh", "-c", "echo out; echo 'Cannot connect to the Docker daemon' >&2; exit 1"],
        "missing": ["/nonexistent/docker", "info"],
    }}
    commands = parse_read(run(spec), spec)["commands"]
    assert commands["lines"] == {"rc": 0, "stdout": "a\nb\n", "stderr": ""}
    assert commands["bare"] == {"rc": 0, "stdout": "x", "stderr": ""}
    assert commands["nothing"] == {"rc": 0, "stdout": "", "stderr": ""}
    assert commands["fails"] == {"rc": 1, "stdout": "out\n", "stderr": "Cannot connect to the Docker daemon"}
    assert commands["missing"]["rc"] == 127 and "/nonexistent/docker" in commands["missing"]["stderr"]


@needs_gnu_tools
def test_commands_run_in_the_c_locale_without_stdin():
    spec = {"commands": {"env": ["sh", "-c", "echo $LC_ALL; cat"]}}
    assert parse_read(run(spec), spec)["commands"]["env"] == {"rc": 0, "stdout": "C\n", "stderr": ""}


# --- disks -------------------------------------------------------------------------------------


@needs_gnu_tools
def test_disks_measure_the_deepest_existing_ancestor_as_disk_space_does(tmp_path):
    (tmp_path / "srv").mkdir()
    wanted = str(tmp_path / "srv" / "models" / "DeepSeek")
    spec = {"disks": [wanted, "/", str(tmp_path) + "//srv/./"]}
    disks = parse_read(run(spec), spec)["disks"]
    expected = disk_space(wanted)
    assert disks[0]["path"] == wanted
    assert disks[0]["checked_path"] == expected["checked_path"] == str(tmp_path / "srv")
    assert disks[0]["total_bytes"] == expected["total_bytes"]
    assert abs(disks[0]["free_bytes"] - expected["free_bytes"]) < 64 * 1024 * 1024
    assert disks[1]["checked_path"] == "/"
    assert disks[2]["path"] == disks[2]["checked_path"] == str(tmp_path / "srv")


def test_a_disk_the_read_could_not_measure_is_an_error():
    spec = {"disks": ["/srv"]}
    out = "%s disk 0\nup 0\n%s end" % (MARKER, MARKER)
    err = "%s disk 0\nstat: cannot read file system information for '/srv': Permission denied" % MARKER
    with pytest.raises(NodeStateError, match="cannot measure free space for /srv: .*Permission denied"):
        parse_read({"stdout": out, "stderr": err}, spec)


def test_a_disk_is_measured_from_the_block_counts():
    spec = {"disks": ["/srv/models/x"]}
    out = "%s disk 0\nup 2\nstatvfs 100 4096 1000\n%s end" % (MARKER, MARKER)
    assert parse_read(out, spec)["disks"] == [
        {"path": "/srv/models/x", "checked_path": "/srv", "free_bytes": 409600, "total_bytes": 4096000}
    ]


# --- the GPU -----------------------------------------------------------------------------------


@needs_gnu_tools
def test_the_gpu_query_gives_the_facts_gpu_facts_gives(bin_dir):
    stand_in(bin_dir, "nvidia-smi", 'case "$1" in --query-gpu=*) echo "%s";; *) exit 2;; esac\n' % GB10_LINE)
    spec = {"gpu": True}
    gpu = parse_read(run(spec, bin_dir), spec)["gpu"]
    if gpu["nvidia_smi"] != str(bin_dir / "nvidia-smi"):
        pytest.skip("an nvidia-smi in /usr/local/nvidia/bin comes first")
    facts = gpu["facts"]
    assert gpu["warning"] is None
    assert facts["dgxspark_gpu_present"] is True and facts["dgxspark_gpu_count"] == 1
    assert facts["dgxspark_gpu_driver_version"] == "580.95.05"
    assert facts["dgxspark_gpus"][0]["name"] == "NVIDIA GB10"
    assert facts["dgxspark_gpus"][0]["memory_total_mib"] is None
    assert facts["dgxspark_gpus"][0]["compute_cap_minor"] == 1


@needs_gnu_tools
def test_a_failing_nvidia_smi_gives_no_gpu_and_a_warning(bin_dir):
    stand_in(bin_dir, "nvidia-smi", "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2\nexit 9\n")
    spec = {"gpu": True}
    gpu = parse_read(run(spec, bin_dir), spec)["gpu"]
    if gpu["nvidia_smi"] != str(bin_dir / "nvidia-smi"):
        pytest.skip("an nvidia-smi in /usr/local/nvidia/bin comes first")
    assert gpu["facts"] == absent_gpu_facts()
    assert gpu["warning"] == (
        "%s exited 9; expected 0 and one CSV line per GPU (is the NVIDIA driver loaded?): "
        "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." % (bin_dir / "nvidia-smi")
    )


@needs_gnu_tools
def test_a_named_nvidia_smi_is_the_one_queried(tmp_path, bin_dir):
    stand_in(bin_dir, "nvidia-smi", "exit 9\n")
    named = stand_in(tmp_path, "nvidia-smi", 'case "$1" in --query-gpu=*) echo "%s";; *) exit 2;; esac\n' % GB10_LINE)
    spec = {"gpu": str(named)}
    gpu = parse_read(run(spec, bin_dir), spec)["gpu"]
    assert gpu["nvidia_smi"] == str(named)
    assert gpu["facts"]["dgxspark_gpu_count"] == 1 and gpu["warning"] is None


def test_a_named_nvidia_smi_that_is_not_there_is_no_gpu(tmp_path):
    spec = {"gpu": str(tmp_path / "absent" / "nvidia-smi")}
    assert parse_read(run(spec), spec)["gpu"] == {"nvidia_smi": "", "facts": absent_gpu_facts(), "warning": None}


def test_no_nvidia_smi_gives_no_gpu_and_no_warning():
    out = "%s gpu\nnvidia-smi \n%s end" % (MARKER, MARKER)
    assert parse_read(out, {"gpu": True})["gpu"] == {"nvidia_smi": "", "facts": absent_gpu_facts(), "warning": None}


def test_an_empty_gpu_list_is_no_gpu():
    assert gpu_facts_from("/usr/bin/nvidia-smi", {"rc": 0, "stdout": "", "stderr": ""}) == {
        "facts": absent_gpu_facts(), "warning": None,
    }


@pytest.mark.parametrize(
    "stdout, message",
    [
        ("garbage, line", "nvidia-smi printed what the query did not ask for: line 1 has 2 columns"),
        (GB10_LINE + "\n" + GB10_LINE.replace("0, GPU-3a", "1, GPU-4b").replace("580.95.05", "580.82.07"),
         "GPUs report different driver versions: .*; expected one driver version on all GPUs of a host"),
    ],
)
def test_gpu_output_gpu_facts_fails_on_is_refused(stdout, message):
    with pytest.raises(NodeStateError, match=message):
        gpu_facts_from("/usr/bin/nvidia-smi", {"rc": 0, "stdout": stdout, "stderr": ""})


# --- output the read did not finish --------------------------------------------------------------


def test_output_without_the_end_marker_is_refused():
    spec = {"paths": ["/etc/docker"]}
    with pytest.raises(NodeStateError, match="stopped before its end .*: sh: 1: Killed"):
        parse_read({"stdout": "%s path 0\n" % MARKER, "stderr": "sh: 1: Killed"}, spec)


def test_a_path_the_output_does_not_hold_is_refused():
    spec = {"paths": ["/etc/docker"], "units": ["docker"]}
    with pytest.raises(NodeStateError, match="printed nothing for /etc/docker, docker"):
        parse_read("%s end" % MARKER, spec)


# --- comparing with a file set --------------------------------------------------------------------


def read_paths(paths):
    spec = {"paths": paths}
    return parse_read(run(spec), spec)


@pytest.fixture
def file_set(tmp_path):
    root = str(tmp_path / "etc")
    return {
        "directories": [{"path": root + "/docker", "mode": "0755", "owner": USER, "group": GROUP}],
        "files": [
            {"path": root + "/docker/daemon.json", "mode": "0644", "owner": USER, "group": GROUP,
             "content": '{\n  "live-restore": true\n}\n'},
            {"path": root + "/docker/empty", "mode": "0600", "content": ""},
        ],
        "links": [{"path": root + "/docker/current", "src": "daemon.json"}],
    }


def all_paths(file_set):
    return [entry["path"] for key in ("directories", "files", "links") for entry in file_set[key]]


def planned(file_set):
    steps = plan_file_set(file_set["directories"], file_set["files"], file_set["links"])
    return {step.path: list(step.reasons) for step in changed_steps(steps)}


@needs_gnu_tools
def test_a_missing_set_is_pending_and_a_converged_one_is_not(tmp_path, file_set):
    pending = file_set_pending(file_set, read_paths(all_paths(file_set)))
    assert pending == {path: ["created"] for path in all_paths(file_set)}
    apply_file_set(plan_file_set(file_set["directories"], file_set["files"], file_set["links"]))
    assert file_set_pending(file_set, read_paths(all_paths(file_set))) == {}
    assert planned(file_set) == {}


@needs_gnu_tools
@pytest.mark.parametrize(
    "change, reasons",
    [
        (lambda root: (root / "docker" / "daemon.json").write_text("{}\n"), ["content"]),
        # same size, other bytes
        (lambda root: (root / "docker" / "daemon.json").write_text('{\n  "live-restore": fals\n}\n'), ["content"]),
        (lambda root: (root / "docker" / "daemon.json").chmod(0o600), ["mode"]),
        (lambda root: (root / "docker").chmod(0o700), ["mode"]),
        (lambda root: ((root / "docker" / "current").unlink(), (root / "docker" / "current").symlink_to("empty")),
         ["link"]),
        (lambda root: ((root / "docker" / "empty").unlink(), (root / "docker" / "empty").mkdir()), ["type"]),
        (lambda root: ((root / "docker" / "empty").unlink(), (root / "docker" / "empty").symlink_to("daemon.json")),
         ["type"]),
    ],
)
def test_a_change_on_disk_is_pending_where_file_set_would_change_it(tmp_path, file_set, change, reasons):
    apply_file_set(plan_file_set(file_set["directories"], file_set["files"], file_set["links"]))
    change(tmp_path / "etc")
    pending = file_set_pending(file_set, read_paths(all_paths(file_set)))
    assert list(pending.values()) == [reasons]
    if reasons != ["type"]:  # file_set refuses those rather than plan them
        assert planned(file_set) == pending


def found(**overrides):
    entry = {"path": "/etc/docker/daemon.json", "kind": "file", "mode": "0644", "uid": 0, "gid": 0,
             "owner": "root", "group": "root", "sha256": hashlib.sha256(b"{}\n").hexdigest(), "link": None}
    entry.update(overrides)
    return {"paths": {entry["path"]: entry}}


def one_file(**overrides):
    entry = {"path": "/etc/docker/daemon.json", "mode": "0644", "owner": "root", "group": "root", "content": "{}\n"}
    entry.update(overrides)
    return {"files": [entry]}


@pytest.mark.parametrize(
    "file_set, state, reasons",
    [
        (one_file(), found(), None),
        (one_file(owner="0", group="0"), found(), None),
        (one_file(owner=None, group=None), found(owner="docker", uid=999), None),
        (one_file(owner="docker"), found(), ["owner"]),
        (one_file(owner="1000"), found(), ["owner"]),
        (one_file(group="docker"), found(), ["group"]),
        (one_file(mode="644"), found(), None),
        (one_file(mode="0600", content="{ }\n"), found(), ["content", "mode"]),
        (one_file(mode=420), found(), ["mode"]),
        (one_file(content={"a": 1}), found(), ["content"]),
        (one_file(content="\udcff"), found(), ["content"]),
        ({"files": [{"path": "/etc/docker/daemon.json", "mode": "0644", "owner": "root", "group": "root"}]},
         found(sha256="other"), None),
        ({"files": [{"path": "/etc/docker/daemon.json", "mode": "0644"}]}, found(mode="0640"), ["mode"]),
        ({"directories": [{"path": "/etc/docker/daemon.json", "mode": "0644"}]}, found(), ["type"]),
        ({"directories": [{"path": "/etc/docker//daemon.json/", "mode": "0644"}]}, found(kind=None), ["created"]),
    ],
)
def test_pending_reasons(file_set, state, reasons):
    pending = file_set_pending(file_set, state)
    assert pending == ({} if reasons is None else {"/etc/docker/daemon.json": reasons})


def test_a_path_that_was_not_read_is_an_error():
    with pytest.raises(NodeStateError, match="/etc/docker/other was not read; add it to the read spec's paths"):
        file_set_pending({"files": [{"path": "/etc/docker/other", "mode": "0644", "content": ""}]}, found())
