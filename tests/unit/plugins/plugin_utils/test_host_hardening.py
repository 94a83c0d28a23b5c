# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import re

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._host_hardening import (
    SYSCTL_RANGES,
    HostHardeningError,
    earlyoom_args,
    earlyoom_default_file,
    process_regex,
    running_args_differ,
    settings_problems,
)

PREFER = ["python3", "python", "vllm", "VLLM::*", "ray::*", "raylet"]
AVOID = ["systemd", "systemd-journald", "systemd-logind", "sshd", "sshd-session", "dockerd", "containerd",
         "containerd-shim*", "dbus-daemon", "earlyoom"]
SETTINGS = {
    "host_hardening_earlyoom_mem_percent": 2,
    "host_hardening_earlyoom_swap_percent": 80,
    "host_hardening_earlyoom_report_interval": 3600,
    "host_hardening_earlyoom_prefer": PREFER,
    "host_hardening_earlyoom_avoid": AVOID,
    "host_hardening_earlyoom_extra_args": [],
    "host_hardening_sysctl": {"vm.min_free_kbytes": 1048576, "vm.watermark_scale_factor": 200},
    "host_hardening_journald": {"SystemMaxUse": "2G", "SystemKeepFree": "4G", "RuntimeMaxUse": "512M"},
}


def matches(regex, comm):
    # earlyoom uses POSIX EREs; these use only what Python's re reads the same way.
    return re.search(regex, comm) is not None


def test_the_prefer_regex_matches_the_engine_ranks_as_the_kernel_names_them():
    regex = process_regex(PREFER)
    assert regex == "^(python3|python|vllm|VLLM::.*|ray::.*|raylet)$"
    # The simulated engine's ranks (ps on a node: python3), vLLM's renamed processes
    # (comm is cut to 15 characters), Ray's workers.
    for comm in ("python3", "python", "VLLM::EngineCor", "VLLM::Worker_TP", "ray::RayWorkerW", "raylet", "vllm"):
        assert matches(regex, comm), comm
    for comm in ("python3.11x", "sshd", "xpython3", "dockerd", "VLLM"):
        assert not matches(regex, comm), comm


def test_the_avoid_regex_names_journald_as_comm_holds_it():
    regex = process_regex(AVOID)
    assert "systemd-journal|" in regex and "systemd-journald" not in regex
    for comm in ("systemd", "systemd-journal", "sshd", "dockerd", "containerd", "containerd-shim", "dbus-daemon"):
        assert matches(regex, comm), comm
    for comm in ("python3", "systemd-udevd", "sshd2", "VLLM::EngineCor"):
        assert not matches(regex, comm), comm


def test_names_are_literal_and_cut_like_the_kernel_cuts_them():
    assert process_regex(["python3.11"]) == "^(python3[.]11)$"
    assert not matches(process_regex(["python3.11"]), "python3x11")
    assert process_regex(["a+b", "(x)"]) == "^(a[+]b|[(]x[)])$"
    # A 16-character name and its 15-character cut are one alternative; a prefix as long
    # as comm itself is an exact name.
    assert process_regex(["systemd-journald", "systemd-journal"]) == "^(systemd-journal)$"
    assert process_regex(["abcdefghijklmnopq*"]) == "^(abcdefghijklmno)$"


@pytest.mark.parametrize("names, message", [
    ("python3", "expected a non-empty list"),
    ([], "expected a non-empty list"),
    (["python 3"], "space, quote or backslash"),
    (["py'thon"], "space, quote or backslash"),
    (["a\\b"], "space, quote or backslash"),
    (["*"], "is not a process name"),
    (["py*thon"], "only a trailing *"),
    (["^sshd"], "holds ^, [ or ]"),
    ([3], "is not a process name"),
])
def test_names_the_args_line_cannot_carry_are_refused(names, message):
    with pytest.raises(HostHardeningError, match=re.escape(message)):
        process_regex(names, "host_hardening_earlyoom_prefer")


def test_the_args_carry_the_community_thresholds_and_both_regexes():
    args = earlyoom_args(2, 80, PREFER, AVOID)
    assert args[:6] == ["-m", "2", "-s", "80", "-r", "3600"]
    assert args[6] == "--prefer" and args[8] == "--avoid"
    assert args[7] == process_regex(PREFER) and args[9] == process_regex(AVOID)
    # Floats the argument spec made of integers print as integers; a fraction stays one.
    assert earlyoom_args(2.0, 80.0, PREFER, AVOID)[:4] == ["-m", "2", "-s", "80"]
    assert earlyoom_args(1.5, 0, PREFER, AVOID, 0, ["-g"])[:6] + [earlyoom_args(1.5, 0, PREFER, AVOID, 0, ["-g"])[-1]] \
        == ["-m", "1.5", "-s", "0", "-r", "0", "-g"]


@pytest.mark.parametrize("call, message", [
    (lambda: earlyoom_args(0, 80, PREFER, AVOID), "host_hardening_earlyoom_mem_percent=0; expected a number from 1"),
    (lambda: earlyoom_args(2, 101, PREFER, AVOID), "host_hardening_earlyoom_swap_percent=101"),
    (lambda: earlyoom_args("2", 80, PREFER, AVOID), "host_hardening_earlyoom_mem_percent='2'"),
    (lambda: earlyoom_args(True, 80, PREFER, AVOID), "host_hardening_earlyoom_mem_percent=True"),
    (lambda: earlyoom_args(2, 80, PREFER, AVOID, -1), "host_hardening_earlyoom_report_interval=-1"),
    (lambda: earlyoom_args(2, 80, PREFER, AVOID, 60, ["--prefer", "x"]), "which the role sets"),
    (lambda: earlyoom_args(2, 80, PREFER, AVOID, 60, ["-n x"]), "without spaces"),
    (lambda: earlyoom_args(2, 80, PREFER, AVOID, 60, "-g"), "expected a list of words"),
])
def test_bad_thresholds_and_extra_args_are_refused_naming_the_variable(call, message):
    with pytest.raises(HostHardeningError, match=re.escape(message)):
        call()


def test_the_default_file_is_one_line_systemd_splits_back_into_the_args():
    args = earlyoom_args(2, 80, PREFER, AVOID)
    text = earlyoom_default_file(args, "managed here")
    assert text.startswith("# managed here\n") and text.endswith('"\n')
    line = [line for line in text.splitlines() if line.startswith("EARLYOOM_ARGS=")]
    assert len(line) == 1
    value = line[0][len('EARLYOOM_ARGS="'):-1]
    # systemd's $EARLYOOM_ARGS: split on whitespace, quotes kept; none are there.
    assert value.split() == args and '"' not in value and "\\" not in value
    with pytest.raises(HostHardeningError, match="space, quote or backslash"):
        earlyoom_default_file(["--prefer", "a b"])


def test_running_args_are_compared_after_the_program_name():
    args = ["-m", "2", "-s", "80"]
    assert not running_args_differ("/usr/bin/earlyoom\0-m\0002\0-s\00080\0", args)
    assert not running_args_differ(["/usr/bin/earlyoom", "-m", "2", "-s", "80", ""], args)
    assert running_args_differ(["/usr/bin/earlyoom", "-r", "3600"], args)
    assert running_args_differ("", args)
    assert running_args_differ([""], args)


def test_the_memory_sysctls_of_the_defaults_and_the_sample_lie_in_their_ranges():
    import yaml

    from unit_support import REPO_ROOT

    defaults = yaml.safe_load((REPO_ROOT / "roles/host_hardening/defaults/main.yml").read_text())
    sample = yaml.safe_load((REPO_ROOT / "inventory/sample/group_vars/dgxspark_cluster/host_hardening.yml").read_text())
    # Every ranged sysctl is one the role sets, and the sample (what users copy) sets the same.
    assert set(defaults["host_hardening_sysctl"]) == set(SYSCTL_RANGES)
    assert sample["host_hardening_sysctl"] == defaults["host_hardening_sysctl"]
    for name, value in defaults["host_hardening_sysctl"].items():
        least, most = SYSCTL_RANGES[name]
        assert least <= value <= most, name
    # The values the docs give reasons for.
    assert defaults["host_hardening_sysctl"] == {
        "vm.min_free_kbytes": 1048576, "vm.swappiness": 10, "vm.watermark_scale_factor": 200}


@pytest.mark.parametrize("name, value", [
    ("vm.swappiness", 100), ("vm.swappiness", "ten"), ("vm.min_free_kbytes", 16384),
    ("vm.min_free_kbytes", 16777216), ("vm.watermark_scale_factor", 5), ("vm.watermark_scale_factor", 3001),
])
def test_a_memory_sysctl_out_of_its_range_is_refused(name, value):
    problems = settings_problems(dict(SETTINGS, host_hardening_sysctl={name: value}))
    assert len(problems) == 1 and problems[0].startswith("host_hardening_sysctl %s=%r; expected a whole number from"
                                                         % (name, value)), problems


def test_the_defaults_pass_and_each_bad_setting_is_named():
    assert settings_problems(SETTINGS) == []
    bad = dict(SETTINGS, host_hardening_earlyoom_prefer=["python3", "sshd"],
               host_hardening_sysctl={"vm.min_free_kbytes": "1 GB", "Vm Bad": 1},
               host_hardening_journald={"SystemMaxUse": "2 gigs", "Storage": "persistent"})
    problems = settings_problems(bad)
    assert any("both name sshd" in p for p in problems), problems
    assert any("host_hardening_sysctl vm.min_free_kbytes='1 GB'" in p for p in problems), problems
    assert any("holds the name 'Vm Bad'" in p for p in problems), problems
    assert any("host_hardening_journald SystemMaxUse='2 gigs'; expected a size" in p for p in problems), problems
    assert not any("Storage" in p for p in problems)
    assert settings_problems(dict(SETTINGS, host_hardening_sysctl=[1])) == [
        "host_hardening_sysctl=[1]; expected a mapping of sysctl name to value"]
    assert any(p.startswith("host_hardening_earlyoom_mem_percent=200")
               for p in settings_problems(dict(SETTINGS, host_hardening_earlyoom_mem_percent=200)))
