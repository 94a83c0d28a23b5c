# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU-facing parts on a real driver's output (tests/unit/fixtures/gpu/PREFIX-*, README.md
there): gpu_facts' parser and the node metrics collector's parser read the real capture, and
the GB10 stand-in answers the same queries in the same shape (same header, same fields, each
value in the same format where both have one; the values differ)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from unit_support import FIXTURES as UNIT_FIXTURES
from unit_support import STANDINS

from ansible_collections.dgxspark.cluster.plugins.module_utils._gpu import (
    NULL_VALUES,
    QUERY_FIELDS,
    parse_query_gpu,
    result_keys,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils._node_metrics import GPU_FIELDS, parse_gpu_csv

FIXTURES = UNIT_FIXTURES / "gpu"
PREFIX = "h100"
METRICS_FIELDS = tuple(field for field, _metric, _help, _factor in GPU_FIELDS)


def fixture(suffix):
    return (FIXTURES / (PREFIX + suffix)).read_text(encoding="utf-8")


def standin(args, config=None, tmp_path=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DGXSPARK_STANDIN_GPU_")}
    path = tmp_path / "gpu.json" if tmp_path else "/nonexistent/gpu.json"
    if config is not None:
        path.write_text(json.dumps(config), encoding="utf-8")
    environ.update(DGXSPARK_STANDIN_GPU_JSON=str(path), LC_ALL="C")
    proc = subprocess.run([sys.executable, str(STANDINS / "nvidia-smi")] + list(args),
                          capture_output=True, text=True, env=environ, check=True)
    return proc.stdout


def shape(value):
    """The format of one printed value: null, hex mask, whole number, decimal (with its digits), text."""
    if value in NULL_VALUES:
        return "null"
    unit = ""
    match = re.match(r"^(.*?) (MiB|W|MHz|%)$", value)
    if match:
        value, unit = match.groups()
    if re.match(r"^0x[0-9A-Fa-f]{16}$", value):
        return "hex16" + unit
    if re.match(r"^-?\d+$", value):
        return "int" + unit
    match = re.match(r"^-?\d+\.(\d+)$", value)
    if match:
        return "dec%d%s" % (len(match.group(1)), unit)
    return "text"


def rows(text):
    return [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.strip()]


def test_capture_asked_for_the_query_fields_of_today():
    info = fixture("-capture-info.txt")
    assert "fields: %s" % ",".join(QUERY_FIELDS) in info
    assert "metrics_fields: %s" % ",".join(METRICS_FIELDS) in info


@pytest.mark.parametrize("suffix", ["-query.csv", "-query-header.csv", "-query-header-nounits.csv"])
def test_gpu_facts_parser_reads_the_real_capture(suffix):
    (gpu,) = parse_query_gpu(fixture(suffix), QUERY_FIELDS)
    assert list(gpu) == result_keys(QUERY_FIELDS)
    assert isinstance(gpu["clocks_sm_mhz"], int) and isinstance(gpu["clocks_max_sm_mhz"], int)
    assert 0 < gpu["clocks_sm_mhz"] <= gpu["clocks_max_sm_mhz"]
    assert isinstance(gpu["clock_event_reasons_active"], int)
    assert isinstance(gpu["clock_event_reasons"], list)
    assert gpu == parse_query_gpu(fixture("-query.csv"), QUERY_FIELDS)[0] or suffix != "-query.csv"


@pytest.mark.parametrize("fmt, suffix", [("csv,noheader,nounits", "-query.csv"), ("csv", "-query-header.csv"),
                                         ("csv,nounits", "-query-header-nounits.csv")])
def test_standin_answers_the_module_query_in_the_real_shape(fmt, suffix):
    real = rows(fixture(suffix))
    stand = rows(standin(["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=" + fmt]))
    assert len(real) == len(stand)
    if fmt != "csv,noheader,nounits":
        assert stand[0] == real[0], "the stand-in's header differs from the real one"
        real, stand = real[1:], stand[1:]
    for field, real_value, stand_value in zip(QUERY_FIELDS, real[0], stand[0]):
        if "null" not in (shape(real_value), shape(stand_value)):
            assert shape(stand_value) == shape(real_value), (field, real_value, stand_value)


def test_both_event_reason_names_print_the_same_mask_as_the_real_tool():
    real = rows(fixture("-clock-event-reasons.csv"))
    stand = rows(standin(["--query-gpu=clocks_event_reasons.active,clocks_throttle_reasons.active", "--format=csv"]))
    assert stand[0] == real[0]
    assert real[1][0] == real[1][1] and stand[1][0] == stand[1][1]
    assert shape(stand[1][0]) == shape(real[1][0]) == "hex16"


def test_metrics_collector_parser_reads_the_real_capture():
    ((index, numbers),) = parse_gpu_csv(fixture("-metrics-query.csv"), list(METRICS_FIELDS))
    assert index == 0
    assert {"power.draw", "temperature.gpu", "clocks.sm"} <= set(numbers)
    assert all(isinstance(v, float) for v in numbers.values())


@pytest.mark.parametrize("fmt, suffix", [("csv,noheader,nounits", "-metrics-query.csv"), ("csv", "-metrics-query-header.csv")])
def test_standin_answers_the_metrics_query_in_the_real_shape(fmt, suffix):
    real = rows(fixture(suffix))
    stand = rows(standin(["--query-gpu=" + ",".join(METRICS_FIELDS), "--format=" + fmt]))
    if fmt == "csv":
        assert stand[0] == real[0]
        real, stand = real[1:], stand[1:]
    for field, real_value, stand_value in zip(METRICS_FIELDS, real[0], stand[0]):
        if "null" not in (shape(real_value), shape(stand_value)):
            assert shape(stand_value) == shape(real_value), (field, real_value, stand_value)
    parse_gpu_csv("\n".join(", ".join(r) for r in stand), list(METRICS_FIELDS))
