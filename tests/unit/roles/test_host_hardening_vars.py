# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host_hardening role's derived variables, templated by ansible-core as a play
templates them: what it reads, what it writes, and which node state sends it down the
change path (a converged node must not be, or site.yml would not be idempotent).

Runs in a subprocess with the collection loader installed, so that the role's
dgxspark.cluster.* filters resolve as they do in a play."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from unit_support import REPO_ROOT

SCRIPT = textwrap.dedent(
    """
    import copy, hashlib, json, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[sys.argv[1] + "/collections"])._install()
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    loader = DataLoader()
    role = {}
    for part in ("defaults", "vars"):
        role.update(loader.load_from_file(sys.argv[1] + "/roles/host_hardening/%s/main.yml" % part,
                                          trusted_as_template=True))
    # As a play sets them for a role's task: dgxspark.cluster.role_template finds the role's templates.
    role["role_path"] = sys.argv[1] + "/roles/host_hardening"
    role["ansible_search_path"] = [role["role_path"]]

    def render(expression, **variables):
        return Templar(loader=loader, variables=dict(role, **variables)).template(trust_as_template(expression))

    def plain(value):
        return json.loads(json.dumps(value))

    def converged(apply):
        files = plain(render("{{ host_hardening_file_set }}", host_hardening_sysctl_apply=apply))
        args = plain(render("{{ host_hardening_earlyoom_args }}"))
        paths = {}
        for entry in files["directories"]:
            paths[entry["path"]] = {"kind": "directory", "mode": "0755", "owner": "root", "group": "root",
                                    "uid": 0, "gid": 0, "sha256": None, "link": None}
        for entry in files["files"]:
            paths[entry["path"]] = {"kind": "file", "mode": "0644", "owner": "root", "group": "root", "uid": 0,
                                    "gid": 0, "sha256": hashlib.sha256(entry["content"].encode()).hexdigest(),
                                    "link": None}
        commands = {
            "earlyoom": {"rc": 0, "stdout": "\\n".join(["/usr/bin/earlyoom"] + args) + "\\n", "stderr": ""},
            "sshd": {"rc": 0, "stdout": "-1000\\n", "stderr": ""},
        }
        if apply:
            commands["sysctl"] = {"rc": 0, "stdout": "1048576\\n10\\n200\\n", "stderr": ""}
        return {"packages": {"earlyoom": "1.7-1"}, "paths": paths,
                "units": {"earlyoom": {"enabled": True, "active": True}}, "commands": commands, "disks": []}, files

    DECISIONS = ("earlyoom_missing", "earlyoom_restart", "sshd_reload", "sysctl_differs", "differs")
    tasks = loader.load_from_file(sys.argv[1] + "/roles/host_hardening/tasks/converge.yml", trusted_as_template=True)
    (apply_task,) = [task for task in tasks if task["name"] == "Host hardening | Apply the kernel memory reserve"]
    out = {"read": render("{{ host_hardening_read_spec }}", host_hardening_sysctl_apply=True),
           "read_unapplied": render("{{ host_hardening_read_spec }}", host_hardening_sysctl_apply=False)}
    for name, apply, change in json.loads(sys.stdin.read()):
        state, files = converged(apply)
        exec(change)
        out[name] = {d: render("{{ host_hardening_%s }}" % d, host_hardening_state=state,
                               host_hardening_sysctl_apply=apply) for d in DECISIONS}
        out[name]["pending"] = render("{{ host_hardening_files_pending }}", host_hardening_state=state,
                                      host_hardening_sysctl_apply=apply)
        out[name]["files"] = files
        out[name]["apply"] = {
            "runs": render("{{ %s }}" % apply_task["when"], host_hardening_state=state, host_hardening_sysctl_apply=apply),
            "argv": render(apply_task["ansible.builtin.command"]["argv"], ansible_check_mode=False),
            "argv_check_mode": render(apply_task["ansible.builtin.command"]["argv"], ansible_check_mode=True),
            "changed_when": apply_task["changed_when"], "check_mode": apply_task["check_mode"]}
    print(json.dumps(plain(out)))
    """
)
CASES = [
    ("converged", True, ""),
    ("converged_unapplied", False, ""),
    ("not_installed", True, "state['packages'] = {}; state['units']['earlyoom'] = {'enabled': False, 'active': False};"
                            " state['commands']['earlyoom']['stdout'] = ''"),
    ("old_args", True, "state['commands']['earlyoom']['stdout'] = '/usr/bin/earlyoom\\n-r\\n3600\\n'"),
    ("earlyoom_stopped", True, "state['units']['earlyoom']['active'] = False"),
    ("sshd_not_reloaded", True, "state['commands']['sshd']['stdout'] = '0\\n'"),
    ("kernel_differs", True, "state['commands']['sysctl']['stdout'] = '67584\\n10\\n'"),
    ("dropin_edited", True, "state['paths']['/etc/systemd/system/ssh.service.d/dgxspark-oom.conf']['sha256'] = 'x'"),
]


@pytest.fixture(scope="module")
def results():
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(REPO_ROOT)], input=json.dumps(CASES),
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_read_asks_the_kernel_only_where_the_values_are_applied(results):
    wanted = ["sysctl", "-n", "vm.min_free_kbytes", "vm.swappiness", "vm.watermark_scale_factor"]
    assert results["read"]["commands"]["sysctl"] == wanted
    assert "sysctl" not in results["read_unapplied"]["commands"]
    assert results["read"]["units"] == ["earlyoom"] and results["read"]["packages"] == ["earlyoom"]


def test_the_files_hold_what_the_issue_asks_for(results):
    files = {entry["path"]: entry["content"] for entry in results["converged"]["files"]["files"]}
    assert "OOMScoreAdjust=-1000\n" in files["/etc/systemd/system/ssh.service.d/dgxspark-oom.conf"]
    sysctl = files["/etc/sysctl.d/60-dgxspark-memory.conf"]
    assert "vm.min_free_kbytes=1048576\n" in sysctl and "vm.watermark_scale_factor=200\n" in sysctl
    assert "vm.swappiness=10\n" in sysctl
    assert "SystemMaxUse=2G\n" in files["/etc/systemd/journald.conf.d/60-dgxspark.conf"]
    earlyoom = files["/etc/default/earlyoom"]
    assert 'EARLYOOM_ARGS="-m 2 -s 80 -r 3600 --prefer ^(python3|python|vllm|VLLM::.*|ray::.*|raylet)$ ' in earlyoom
    assert "--avoid ^(systemd|systemd-journal|systemd-logind|sshd|sshd-session|dockerd|containerd|containerd-shim|" \
           "dbus-daemon|earlyoom)$" in earlyoom


@pytest.mark.parametrize("name", ["converged", "converged_unapplied"])
def test_a_converged_node_takes_no_change_path(results, name):
    assert results[name]["pending"] == {}
    assert not any(results[name][d] for d in ("earlyoom_missing", "earlyoom_restart", "sshd_reload",
                                              "sysctl_differs", "differs")), results[name]


@pytest.mark.parametrize("name, decision", [
    ("not_installed", "earlyoom_missing"),
    ("old_args", "earlyoom_restart"),
    ("earlyoom_stopped", "earlyoom_restart"),
    ("sshd_not_reloaded", "sshd_reload"),
    ("kernel_differs", "sysctl_differs"),
])
def test_each_difference_takes_the_change_path_for_its_own_step(results, name, decision):
    assert results[name][decision] and results[name]["differs"], results[name]
    others = {"earlyoom_missing", "earlyoom_restart", "sshd_reload", "sysctl_differs"} - {decision}
    if name == "not_installed":
        others -= {"earlyoom_restart"}
    assert not any(results[name][d] for d in others), results[name]


def test_the_kernel_values_are_loaded_from_the_written_file_only_where_the_read_found_them_differ(results):
    apply = results["kernel_differs"]["apply"]
    assert apply["runs"] is True
    assert apply["argv"] == ["sysctl", "--load=/etc/sysctl.d/60-dgxspark-memory.conf"]
    # Check mode changes nothing on the node and still reports the change.
    assert apply["argv_check_mode"] == ["true"]
    assert (apply["changed_when"], apply["check_mode"]) == (True, False)
    for name in ("converged", "converged_unapplied", "old_args", "dropin_edited"):
        assert results[name]["apply"]["runs"] is False, name


def test_an_edited_file_is_pending(results):
    assert results["dropin_edited"]["pending"] == {"/etc/systemd/system/ssh.service.d/dgxspark-oom.conf": ["content"]}
    assert results["dropin_edited"]["differs"]
