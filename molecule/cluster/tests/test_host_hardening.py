# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every node keeps itself reachable when the engine takes its memory: earlyoom from the
distribution runs with the arguments the role renders (prefer the engine's processes,
spare sshd, Docker, systemd and journald), sshd is out of the OOM killer's reach, the
kernel memory reserve is written to /etc/sysctl.d/ (and, as the simulated inventory says,
not applied: the nodes share the host's kernel), and journald has size limits."""

from __future__ import annotations

import re
import sys

import testinfra.utils.ansible_runner

from helpers import GROUP, INVENTORY, ROOT, role_settings

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._host_hardening import earlyoom_args

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(str(INVENTORY)).get_hosts(GROUP)


def settings():
    return role_settings("host_hardening")


def expected_earlyoom_args():
    s = settings()
    return earlyoom_args(s["host_hardening_earlyoom_mem_percent"], s["host_hardening_earlyoom_swap_percent"],
                         s["host_hardening_earlyoom_prefer"], s["host_hardening_earlyoom_avoid"],
                         s["host_hardening_earlyoom_report_interval"], s["host_hardening_earlyoom_extra_args"])


def test_earlyoom_runs_from_the_distribution_package_with_the_rendered_arguments(host):
    assert host.package(settings()["host_hardening_earlyoom_package"]).is_installed
    service = host.service(settings()["host_hardening_earlyoom_service"])
    assert service.is_running and service.is_enabled
    pid = host.check_output("systemctl show -p MainPID --value earlyoom")
    words = [w for w in host.file("/proc/%s/cmdline" % pid).content_string.split("\0") if w]
    assert words[0].endswith("earlyoom")
    args = words[1:]
    assert args == expected_earlyoom_args(), args
    prefer = re.compile(args[args.index("--prefer") + 1])
    avoid = re.compile(args[args.index("--avoid") + 1])
    # The names the kernel gives these processes (15 characters at most).
    assert all(prefer.search(name) for name in ("python3", "VLLM::EngineCor", "vllm"))
    assert not any(prefer.search(name) for name in ("sshd", "dockerd", "systemd-journal"))
    assert all(avoid.search(name) for name in ("sshd", "dockerd", "containerd", "systemd", "systemd-journal"))
    assert not avoid.search("python3")


def test_sshd_is_out_of_the_oom_killers_reach(host):
    wanted = str(settings()["host_hardening_sshd_oom_score_adjust"])
    # What systemd applies to the sshd it starts. The running sshd's
    # /proc/<pid>/oom_score_adj stays 0 on the simulated nodes: lowering it needs
    # CAP_SYS_RESOURCE, which this machine kind's containers cannot have.
    assert host.check_output("systemctl show -p OOMScoreAdjust --value ssh.service") == wanted
    assert host.check_output("systemctl show -p DropInPaths --value ssh.service") == \
        "/etc/systemd/system/ssh.service.d/dgxspark-oom.conf"
    assert host.check_output("systemctl show -p NeedDaemonReload --value ssh.service") == "no"


def test_the_memory_reserve_is_written_and_not_applied_where_the_inventory_says_so(host):
    s = settings()
    sysctl = host.file(s["host_hardening_sysctl_file"])
    assert sysctl.user == "root" and sysctl.mode == 0o644
    lines = {line for line in sysctl.content_string.splitlines() if line and not line.startswith("#")}
    assert lines == {"%s=%s" % item for item in s["host_hardening_sysctl"].items()}
    assert s["host_hardening_sysctl_apply"] is False
    # Written, not applied: the shared kernel keeps its own value.
    assert host.check_output("sysctl -n vm.min_free_kbytes") != str(s["host_hardening_sysctl"]["vm.min_free_kbytes"])


def test_journald_has_size_limits(host):
    text = host.file("/etc/systemd/journald.conf.d/60-dgxspark.conf").content_string
    assert "[Journal]" in text
    for name, value in settings()["host_hardening_journald"].items():
        assert "%s=%s" % (name, value) in text
