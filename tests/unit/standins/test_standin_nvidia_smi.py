# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nvidia-smi stand-in of the simulated cluster, run as a subprocess, against our parser.

It must print what gpu_facts can parse, and print it the way the real tool does: where
the H200 capture shows the real tool's bytes, the stand-in set to the same values must
print the same bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from unit_support import FIXTURES as UNIT_FIXTURES
from unit_support import STANDINS

from ansible_collections.dgxspark.cluster.plugins.module_utils._gpu import (
    QUERY_FIELDS,
    GpuDriverMismatchError,
    build_query_argv,
    common_driver_version,
    parse_driver_version,
    parse_list_gpus,
    parse_query_gpu,
    result_keys,
    version_at_least,
)

STANDIN = STANDINS / "nvidia-smi"
FIXTURES = UNIT_FIXTURES / "gpu"
FORMATS = ("csv,noheader,nounits", "csv", "csv,nounits", "csv,noheader")
# The real captures (tests/unit/fixtures/gpu/README.md): file prefix -> the fields asked for.
CAPTURES = {
    "h200": QUERY_FIELDS[: QUERY_FIELDS.index("mig.mode.current") + 1],
    "h100": QUERY_FIELDS,
}


@pytest.fixture
def standin(tmp_path):
    """Run the stand-in with its JSON file under tmp_path; returns (run, write_config)."""
    config = tmp_path / "gpu.json"

    def write_config(data):
        config.write_text(json.dumps(data), encoding="utf-8")

    def run(args, **env):
        environ = {k: v for k, v in os.environ.items() if not k.startswith("DGXSPARK_STANDIN_GPU_")}
        environ.update(env, DGXSPARK_STANDIN_GPU_JSON=str(config), LC_ALL="C")
        proc = subprocess.run(
            [sys.executable, str(STANDIN)] + list(args),
            capture_output=True, text=True, env=environ, check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    return run, write_config


def query(run, fields=QUERY_FIELDS, fmt="csv,noheader,nounits", **env):
    argv = build_query_argv("nvidia-smi", fields)
    argv[2] = "--format=" + fmt
    return run(argv[1:], **env)


def test_standin_is_an_executable_python_script_that_says_what_it_is():
    assert os.access(STANDIN, os.X_OK)
    text = STANDIN.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env python3\n")
    assert "stand-in" in text.split('"""')[1] and "simulated cluster" in text.split('"""')[1]


def test_module_query_parses_as_a_gb10(standin):
    run, _write_config = standin
    rc, out, err = run(build_query_argv("nvidia-smi")[1:])
    assert (rc, err) == (0, "")
    (gpu,) = parse_query_gpu(out, QUERY_FIELDS)
    assert gpu["name"] == "NVIDIA GB10"
    assert gpu["compute_cap"] == "12.1" and gpu["compute_cap_major"] == 12
    assert gpu["memory_total_mib"] is None
    assert gpu["power_limit_w"] is None
    assert 0 < gpu["power_draw_w"] < 20
    assert version_at_least(gpu["driver_version"], "580")


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_parses_to_the_same_gpus(standin, fmt):
    run, _write_config = standin
    reference = parse_query_gpu(query(run)[1])
    rc, out, _err = query(run, fmt=fmt)
    assert rc == 0
    assert parse_query_gpu(out) == reference


@pytest.mark.parametrize(
    "fields",
    [
        ("name",),
        ("driver_version", "index"),
        ("memory.total", "compute_cap", "uuid"),
        tuple(reversed(QUERY_FIELDS)),
        QUERY_FIELDS[::2],
    ],
)
def test_subsets_in_any_order_agree_with_the_full_query(standin, fields):
    run, _write_config = standin
    (full,) = parse_query_gpu(query(run)[1])
    rc, out, _err = query(run, fields)
    assert rc == 0
    assert parse_query_gpu(out, fields) == [{k: full[k] for k in result_keys(fields)}]


def test_list_gpus_and_version_agree_with_the_query(standin):
    run, _write_config = standin
    (gpu,) = parse_query_gpu(query(run)[1])
    rc, out, _err = run(["-L"])
    assert rc == 0
    assert parse_list_gpus(out) == [{k: gpu[k] for k in ("index", "name", "uuid")}]
    rc, out, _err = run(["--version"])
    assert rc == 0
    assert "DRIVER version      : %s\n" % gpu["driver_version"] in out


def test_unknown_field_is_refused_like_the_real_tool(standin):
    """The capture holds the real answer: exit 2, the message on stdout, then an empty line."""
    real = (FIXTURES / "h200-capture-info.txt").read_text(encoding="utf-8")
    real_answer = real.split("--- invalid field, stdout and stderr apart\n")[1].split("--- ")[0]
    real_lines = real_answer.splitlines()
    real_rc = int(real_lines[0].split("=")[1])
    real_stdout = "".join(line[len("stdout: "):] + "\n" for line in real_lines if line.startswith("stdout: "))
    real_stderr = "".join(line[len("stderr: "):] + "\n" for line in real_lines if line.startswith("stderr: "))
    assert real_rc == 2 and real_stdout
    rc, out, err = standin[0](["--query-gpu=name,bogus_field", "--format=csv,noheader,nounits"])
    assert (rc, out, err) == (real_rc, real_stdout, real_stderr)


def captured_values(prefix="h200"):
    """The values of capture PREFIX, as stand-in overrides keyed by nvidia-smi field."""
    line = (FIXTURES / (prefix + "-query.csv")).read_text(encoding="utf-8").strip()
    return dict(zip(CAPTURES[prefix], (c.strip() for c in line.split(","))))


@pytest.fixture
def h200_values():
    return captured_values()


@pytest.mark.parametrize("prefix", sorted(CAPTURES))
@pytest.mark.parametrize(
    "fmt, suffix",
    [("csv,noheader,nounits", "-query.csv"), ("csv", "-query-header.csv"), ("csv,nounits", "-query-header-nounits.csv")],
)
def test_set_to_h200_values_it_prints_the_real_bytes(standin, prefix, fmt, suffix):
    """Same fields, same values: the stand-in prints the real tool's bytes, header and units included."""
    run, write_config = standin
    write_config({"gpu": captured_values(prefix)})
    rc, out, _err = query(run, fields=CAPTURES[prefix], fmt=fmt)
    assert rc == 0
    assert out == (FIXTURES / (prefix + suffix)).read_text(encoding="utf-8")


def test_clock_fields_are_gb10_idle_values_and_overridable(standin):
    run, write_config = standin
    fields = ("clocks.sm", "clocks.max.sm", "clocks_event_reasons.active")
    rc, out, _err = query(run, fields=fields)
    assert (rc, out) == (0, "208, 3003, 0x0000000000000001\n")
    (gpu,) = parse_query_gpu(out, fields)
    assert gpu == {
        "clocks_sm_mhz": 208, "clocks_max_sm_mhz": 3003,
        "clock_event_reasons_active": 1, "clock_event_reasons": ["gpu_idle"],
    }
    write_config({"gpu": {"clocks.max.sm": "2400", "clocks_event_reasons.active": "0x0000000000000004"}})
    rc, out, _err = run(["--query-gpu=" + ",".join(fields + ("clocks_throttle_reasons.active",)), "--format=csv"])
    assert rc == 0
    assert out == (
        "clocks.current.sm [MHz], clocks.max.sm [MHz], clocks_event_reasons.active, clocks_event_reasons.active\n"
        "208 MHz, 2400 MHz, 0x0000000000000004, 0x0000000000000004\n"
    )
    rc, out, _err = run(
        ["--query-gpu=clocks.current.sm", "--format=csv,noheader,nounits"], DGXSPARK_STANDIN_GPU_CLOCKS_SM="1500"
    )
    assert (rc, out) == (0, "1500\n")


@pytest.mark.parametrize("args, fixture", [(["-L"], "h200-list-gpus.txt"), (["--version"], "h200-version.txt")])
def test_set_to_h200_values_list_and_version_print_the_real_bytes(standin, h200_values, args, fixture):
    run, write_config = standin
    write_config({"gpu": h200_values})
    rc, out, _err = run(args)
    assert rc == 0
    assert out == (FIXTURES / fixture).read_text(encoding="utf-8")


def test_old_driver_from_the_json_file(standin):
    run, write_config = standin
    write_config({"gpu": {"driver_version": "570.86.10"}})
    (gpu,) = parse_query_gpu(query(run)[1])
    assert parse_driver_version(gpu["driver_version"]) == (570, 86, 10)
    assert not version_at_least(gpu["driver_version"], "580.95.05")


def test_environment_wins_over_the_json_file(standin):
    run, write_config = standin
    write_config({"gpu": {"driver_version": "570.86.10", "power.draw": "7.5"}})
    (gpu,) = parse_query_gpu(query(run, DGXSPARK_STANDIN_GPU_DRIVER_VERSION="575.51.03")[1])
    assert (gpu["driver_version"], gpu["power_draw_w"]) == ("575.51.03", 7.5)


def test_several_gpus_with_different_drivers(standin):
    run, write_config = standin
    write_config({"gpus": [{}, {"driver_version": "575.51.03"}]})
    gpus = parse_query_gpu(query(run)[1])
    assert [g["index"] for g in gpus] == [0, 1]
    assert len({g["uuid"] for g in gpus}) == 2
    with pytest.raises(GpuDriverMismatchError):
        common_driver_version(gpus)


@pytest.mark.parametrize(
    "config, rc, needle",
    [
        ({"driver_loaded": False}, 9, "couldn't communicate with the NVIDIA driver"),
        ({"gpus": []}, 6, "No devices were found"),
    ],
)
def test_failures_it_can_simulate(standin, config, rc, needle):
    run, write_config = standin
    write_config(config)
    for args in (build_query_argv("nvidia-smi")[1:], ["-L"]):
        found_rc, out, _err = run(args)
        assert found_rc == rc and needle in out


def test_summary_table_is_the_width_of_the_real_one(standin):
    run, _write_config = standin
    rc, out, _err = run([])
    assert rc == 0 and "NVIDIA GB10" in out and "Not Supported" in out
    assert {len(line) for line in out.splitlines()} == {91}
