# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from unit_support import FIXTURES as UNIT_FIXTURES
from unit_support import STANDINS

from ansible_collections.dgxspark.cluster.plugins.module_utils._gpu import (
    QUERY_FIELDS,
    build_query_argv,
    parse_query_gpu,
)
from ansible_collections.dgxspark.cluster.plugins.modules import gpu_facts

FIXTURES = UNIT_FIXTURES / "gpu"
STANDIN = STANDINS / "nvidia-smi"
# The real driver's answer to today's query (an H100 on 580.159.04; fixtures/gpu/README.md).
REAL_QUERY = (FIXTURES / "h100-query.csv").read_text(encoding="utf-8")
GB10_LINE = (
    "0, GPU-3a1f07c2-5b8e-4d19-a6e0-7c2b9d41f5e8, NVIDIA GB10, 0000000F:01:00.0, 580.95.05, "
    "12.1, [N/A], 3.52, [N/A], 36, Enabled, Default, [N/A], 208, 3003, 0x0000000000000001\n"
)
FOUND = "/usr/bin/nvidia-smi"
ABSENT = {
    "dgxspark_gpus": [],
    "dgxspark_gpu_count": 0,
    "dgxspark_gpu_driver_version": None,
    "dgxspark_gpu_present": False,
}


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


class Host:
    """What the module sees of the host: the binary on PATH and what running it gives."""

    def __init__(self, monkeypatch, found=FOUND, result=(0, REAL_QUERY, "")):
        self.found = found
        self.result = result
        self.commands = []
        self.lookups = []
        self.warnings = []
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", self.get_bin_path)
        monkeypatch.setattr(basic.AnsibleModule, "run_command", self.run_command)
        monkeypatch.setattr(basic.AnsibleModule, "warn", lambda module, msg: self.warnings.append(msg))
        monkeypatch.setattr(basic.AnsibleModule, "exit_json", self.exit_json)
        monkeypatch.setattr(basic.AnsibleModule, "fail_json", self.fail_json)

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        self.lookups.append((arg, required, opt_dirs))
        return self.found

    def run_command(self, args, **kwargs):
        self.commands.append((args, kwargs))
        return self.result

    @staticmethod
    def exit_json(module, **kwargs):
        raise ExitJson(kwargs)

    @staticmethod
    def fail_json(module, **kwargs):
        raise FailJson(kwargs)


def run_module(args, outcome=ExitJson):
    with patch_module_args(args), pytest.raises(outcome) as excinfo:
        gpu_facts.main()
    return excinfo.value.args[0]


@pytest.mark.parametrize(
    "output, name, memory",
    [(REAL_QUERY, "NVIDIA H100 80GB HBM3", 81559), (GB10_LINE, "NVIDIA GB10", None)],
)
@pytest.mark.parametrize("check_mode", [False, True])
def test_facts(monkeypatch, output, name, memory, check_mode):
    host = Host(monkeypatch, result=(0, output, ""))
    result = run_module({"_ansible_check_mode": check_mode})
    assert result["changed"] is False
    facts = result["ansible_facts"]
    assert facts["dgxspark_gpus"] == parse_query_gpu(output, QUERY_FIELDS)
    assert facts["dgxspark_gpus"][0]["name"] == name
    assert facts["dgxspark_gpus"][0]["memory_total_mib"] == memory
    assert facts["dgxspark_gpu_count"] == 1
    assert facts["dgxspark_gpu_driver_version"] == facts["dgxspark_gpus"][0]["driver_version"]
    assert facts["dgxspark_gpu_present"] is True
    c_locale = {"environ_update": {"LC_ALL": "C", "LANGUAGE": "C"}}
    assert host.commands == [(build_query_argv(FOUND, QUERY_FIELDS), c_locale)]
    assert host.lookups == [("nvidia-smi", False, ["/usr/local/nvidia/bin"])]
    assert host.warnings == []


def test_several_gpus_on_one_driver(monkeypatch):
    second = REAL_QUERY.replace("0, GPU-8d77", "1, GPU-9e88").replace("00000000:00:06.0", "00000000:00:07.0")
    Host(monkeypatch, result=(0, REAL_QUERY + second, ""))
    facts = run_module({})["ansible_facts"]
    assert facts["dgxspark_gpu_count"] == 2
    assert [g["index"] for g in facts["dgxspark_gpus"]] == [0, 1]
    assert facts["dgxspark_gpu_driver_version"] == "580.159.04"


def test_explicit_path_is_used_without_a_lookup(monkeypatch, tmp_path):
    binary = tmp_path / "nvidia-smi"
    binary.write_text("#!/bin/sh\n", encoding="utf-8")
    binary.chmod(0o755)
    host = Host(monkeypatch)
    run_module({"nvidia_smi": str(binary)})
    assert host.lookups == []
    assert host.commands[0][0][0] == str(binary)


@pytest.mark.parametrize("kind", ["missing", "not executable"])
@pytest.mark.parametrize("required", [True, False])
def test_explicit_path_that_is_no_binary(monkeypatch, tmp_path, kind, required):
    binary = tmp_path / "nvidia-smi"
    if kind == "not executable":
        binary.write_text("", encoding="utf-8")
        binary.chmod(0o644)
    host = Host(monkeypatch)
    if required:
        result = run_module({"nvidia_smi": str(binary)}, FailJson)
        assert str(binary) in result["msg"] and "not an executable file" in result["msg"]
    else:
        assert run_module({"nvidia_smi": str(binary), "required": False})["ansible_facts"] == ABSENT
    assert host.commands == []


def test_missing_binary_fails_when_required(monkeypatch):
    host = Host(monkeypatch, found=None)
    result = run_module({}, FailJson)
    assert "nvidia-smi was not found" in result["msg"]
    assert "required=false" in result["msg"]
    assert host.commands == []


def test_missing_binary_is_no_gpu_when_not_required(monkeypatch):
    host = Host(monkeypatch, found=None)
    result = run_module({"required": False})
    assert result == {"changed": False, "ansible_facts": ABSENT}
    assert host.commands == [] and host.warnings == []


NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


@pytest.mark.parametrize(
    "rc, out, err",
    [(9, NO_DRIVER, ""), (6, "No devices were found\n", ""), (255, "", "Segmentation fault\n")],
)
def test_nonzero_exit_fails_when_required(monkeypatch, rc, out, err):
    Host(monkeypatch, result=(rc, out, err))
    result = run_module({}, FailJson)
    assert (result["rc"], result["stdout"], result["stderr"]) == (rc, out, err)
    assert "exited %d" % rc in result["msg"]
    assert (err or out).strip() in result["msg"]
    assert result["cmd"] == build_query_argv(FOUND, QUERY_FIELDS)


def test_nonzero_exit_is_no_gpu_with_a_warning_when_not_required(monkeypatch):
    host = Host(monkeypatch, result=(9, NO_DRIVER, ""))
    result = run_module({"required": False})
    assert result["ansible_facts"] == ABSENT
    assert len(host.warnings) == 1 and "exited 9" in host.warnings[0]


@pytest.mark.parametrize("required, outcome", [(True, FailJson), (False, ExitJson)])
def test_no_gpu_listed(monkeypatch, required, outcome):
    Host(monkeypatch, result=(0, "", ""))
    result = run_module({"required": required}, outcome)
    if required:
        assert "listed no GPU" in result["msg"]
    else:
        assert result["ansible_facts"] == ABSENT


@pytest.mark.parametrize("required", [True, False])
def test_driver_disagreement_fails_either_way(monkeypatch, required):
    second = REAL_QUERY.replace("0, GPU-8d77", "1, GPU-9e88").replace("580.159.04", "575.51.03")
    Host(monkeypatch, result=(0, REAL_QUERY + second, ""))
    result = run_module({"required": required}, FailJson)
    assert "580.159.04" in result["msg"] and "575.51.03" in result["msg"]
    assert len(result["gpus"]) == 2


@pytest.mark.parametrize("required", [True, False])
def test_output_that_does_not_parse_fails_either_way(monkeypatch, required):
    out = 'Field "compute_cap" is not a valid field to query.\n\n'
    Host(monkeypatch, result=(0, out, ""))
    result = run_module({"required": required}, FailJson)
    assert repr(out.splitlines()[0]) in result["msg"]
    assert result["stdout"] == out


def test_against_the_standin(monkeypatch, tmp_path):
    """No patched command: the module runs the simulated cluster's stand-in for real."""
    monkeypatch.setenv("DGXSPARK_STANDIN_GPU_JSON", str(tmp_path / "absent.json"))
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", Host.exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", Host.fail_json)
    facts = run_module({"nvidia_smi": str(STANDIN)})["ansible_facts"]
    assert facts["dgxspark_gpu_present"] is True and facts["dgxspark_gpu_count"] == 1
    (gpu,) = facts["dgxspark_gpus"]
    assert (gpu["name"], gpu["compute_cap"], gpu["memory_total_mib"]) == ("NVIDIA GB10", "12.1", None)
    assert facts["dgxspark_gpu_driver_version"] == gpu["driver_version"]


def test_gpu_without_a_driver_version_fails(monkeypatch):
    Host(monkeypatch, result=(0, REAL_QUERY.replace("580.159.04", "[N/A]"), ""))
    result = run_module({"required": False}, FailJson)
    assert "no driver version" in result["msg"]
    assert result["gpus"][0]["driver_version"] is None


def test_a_driver_without_a_clock_field_is_asked_again_without_it(monkeypatch):
    """An older driver refuses clocks_event_reasons.active (exit 2, the real tool's words):
    asked again without it, with a warning; its keys read None."""
    fields = [f for f in QUERY_FIELDS if f != "clocks_event_reasons.active"]
    answers = [(2, 'Field "clocks_event_reasons.active" is not a valid field to query.\n\n', ""),
               (0, REAL_QUERY.rsplit(",", 1)[0] + "\n", "")]
    host = Host(monkeypatch)
    host.run_command = None
    commands = []

    def run_command(module, cmd, environ_update=None):
        commands.append(cmd)
        return answers[len(commands) - 1]

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    (gpu,) = run_module({})["ansible_facts"]["dgxspark_gpus"]
    assert commands == [build_query_argv(FOUND, QUERY_FIELDS), build_query_argv(FOUND, fields)]
    assert (gpu["clocks_max_sm_mhz"], gpu["clock_event_reasons_active"], gpu["clock_event_reasons"]) == (1980, None, None)
    assert len(host.warnings) == 1 and "does not know the field clocks_event_reasons.active" in host.warnings[0]
