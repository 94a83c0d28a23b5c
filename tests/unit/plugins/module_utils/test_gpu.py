# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import re

import pytest

from unit_support import FIXTURES as UNIT_FIXTURES

from ansible_collections.dgxspark.cluster.plugins.module_utils._gpu import (
    FIELD_SPECS,
    QUERY_FIELDS,
    GpuDriverMismatchError,
    GpuQueryError,
    build_query_argv,
    common_driver_version,
    decode_clock_event_reasons,
    header_names,
    parse_driver_version,
    parse_list_gpus,
    parse_query_gpu,
    refused_optional_field,
    result_keys,
    version_at_least,
    with_all_keys,
)

FIXTURES = UNIT_FIXTURES / "gpu"

# The fields of the first H200 capture (h200-query*.csv, 2026-12-02): QUERY_FIELDS before the
# clock fields came.
V1_FIELDS = QUERY_FIELDS[: QUERY_FIELDS.index("mig.mode.current") + 1]

# What the H200 capture (tests/unit/fixtures/gpu/h200-*) says, read off the files by eye.
H200 = {
    "index": 0,
    "uuid": "GPU-bbe8570e-4b13-feba-f1a2-22f419934311",
    "name": "NVIDIA H200",
    "pci_bus_id": "00000000:00:06.0",
    "driver_version": "580.159.04",
    "compute_cap": "9.0",
    "compute_cap_major": 9,
    "compute_cap_minor": 0,
    "memory_total_mib": 143771,
    "power_draw_w": 120.70,
    "power_limit_w": 700.0,
    "temperature_gpu_c": 34,
    "persistence_mode": True,
    "compute_mode": "Default",
    "mig_mode_current": "Disabled",
}

# A GB10 line as public DGX Spark reports show it (unified memory: no memory.total, no
# power cap, no MIG). Built from those reports, not captured here.
GB10_LINE = (
    "0, GPU-3a1f07c2-5b8e-4d19-a6e0-7c2b9d41f5e8, NVIDIA GB10, 0000000F:01:00.0, 580.95.05, "
    "12.1, [N/A], 3.52, [N/A], 36, Enabled, Default, [N/A], 208, 3003, 0x0000000000000001"
)


def fixture(name):
    return (FIXTURES / name).read_text(encoding="utf-8")


# --- the query itself --------------------------------------------------------------------


def test_build_query_argv_is_the_bare_csv_query():
    argv = build_query_argv("/usr/bin/nvidia-smi")
    assert argv == [
        "/usr/bin/nvidia-smi",
        "--query-gpu=" + ",".join(QUERY_FIELDS),
        "--format=csv,noheader,nounits",
    ]


def test_build_query_argv_keeps_the_order_given():
    assert build_query_argv("nvidia-smi", ("uuid", "index"))[1] == "--query-gpu=uuid,index"


@pytest.mark.parametrize("fields", [(), ("name", "fan.speed"), ("bogus",)])
def test_build_query_argv_refuses_fields_without_a_parser(fields):
    with pytest.raises(ValueError):
        build_query_argv("nvidia-smi", fields)


def test_every_query_field_exists_in_a_real_driver():
    """Each field we ask for is listed by --help-query-gpu of the captured 580 driver."""
    listed = set()
    for line in fixture("h200-help-query-gpu.txt").splitlines():
        if line.startswith('"'):
            listed.update(re.findall(r'"([^"]+)"', line))
    assert listed, "the help fixture lists no field at all"
    assert [f for f in QUERY_FIELDS if f not in listed] == []


def test_capture_script_asks_for_the_same_fields():
    match = re.search(r"^fields=(\S+)$", fixture("capture.sh"), re.MULTILINE)
    assert match and tuple(match.group(1).split(",")) == QUERY_FIELDS


def test_every_query_field_has_a_parser():
    assert set(QUERY_FIELDS) <= set(FIELD_SPECS)


# --- the real H200 capture ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["h200-query.csv", "h200-query-header.csv", "h200-query-header-nounits.csv"]
)
def test_parse_real_h200_capture(name):
    gpus = parse_query_gpu(fixture(name), V1_FIELDS)
    assert gpus == [H200]
    assert list(gpus[0]) == result_keys(V1_FIELDS)


def test_real_h200_header_is_the_one_we_expect():
    assert fixture("h200-query-header.csv").splitlines()[0].split(", ") == header_names(V1_FIELDS)


def test_real_h200_list_gpus_agrees_with_the_query():
    listed = parse_list_gpus(fixture("h200-list-gpus.txt"))
    queried = parse_query_gpu(fixture("h200-query.csv"), V1_FIELDS)
    assert [(g["index"], g["name"], g["uuid"]) for g in listed] == [
        (g["index"], g["name"], g["uuid"]) for g in queried
    ]


def test_real_h200_version_agrees_with_the_query():
    match = re.search(r"^DRIVER version\s*:\s*(\S+)$", fixture("h200-version.txt"), re.MULTILINE)
    queried = parse_query_gpu(fixture("h200-query.csv"), V1_FIELDS)
    assert match and common_driver_version(queried) == match.group(1)


# --- GB10 shape and readings that do not exist --------------------------------------------


def test_parse_gb10_unified_memory_line():
    (gpu,) = parse_query_gpu(GB10_LINE + "\n")
    assert gpu["name"] == "NVIDIA GB10"
    assert (gpu["compute_cap"], gpu["compute_cap_major"], gpu["compute_cap_minor"]) == ("12.1", 12, 1)
    assert gpu["memory_total_mib"] is None
    assert gpu["power_limit_w"] is None
    assert gpu["mig_mode_current"] is None
    assert gpu["power_draw_w"] == pytest.approx(3.52)
    assert gpu["pci_bus_id"] == "0000000F:01:00.0"


@pytest.mark.parametrize("null", ["[N/A]", "N/A", "[Not Supported]", "Not Supported"])
@pytest.mark.parametrize("field", QUERY_FIELDS)
def test_every_field_reads_null_as_none(field, null):
    fields, line = (("index",), null) if field == "index" else (("index", field), "0, " + null)
    (gpu,) = parse_query_gpu(line, fields)
    key = FIELD_SPECS[field][0]
    assert gpu[key] is None
    if field == "compute_cap":
        assert gpu["compute_cap_major"] is None and gpu["compute_cap_minor"] is None


@pytest.mark.parametrize(
    "fields, line, expected",
    [
        (("memory.total",), "143771 MiB", {"memory_total_mib": 143771}),
        (("power.draw", "power.limit"), "104.22 W, 700.00 W", {"power_draw_w": 104.22, "power_limit_w": 700.0}),
        (("power.limit",), "[N/A]", {"power_limit_w": None}),
        (("persistence_mode",), "Disabled", {"persistence_mode": False}),
        (("compute_mode",), "Exclusive_Process", {"compute_mode": "Exclusive_Process"}),
        (("compute_cap",), "10.0", {"compute_cap": "10.0", "compute_cap_major": 10, "compute_cap_minor": 0}),
        (("temperature.gpu", "index"), "41, 3", {"temperature_gpu_c": 41, "index": 3}),
    ],
)
def test_typed_values(fields, line, expected):
    assert parse_query_gpu(line, fields) == [expected]


def test_subset_in_another_order_matches_the_full_parse():
    fields = tuple(reversed(QUERY_FIELDS[:7]))
    row = dict(zip(QUERY_FIELDS, (c.strip() for c in GB10_LINE.split(","))))
    (part,) = parse_query_gpu(", ".join(row[f] for f in fields), fields)
    (full,) = parse_query_gpu(GB10_LINE)
    assert part == {k: full[k] for k in result_keys(fields)}


def test_several_gpus_and_blank_lines():
    text = "\n0, NVIDIA H200, 580.159.04\n\n1, NVIDIA H200, 580.159.04\n"
    gpus = parse_query_gpu(text, ("index", "name", "driver_version"))
    assert [g["index"] for g in gpus] == [0, 1]


@pytest.mark.parametrize("text", ["", "\n", "  \n\n"])
def test_no_output_is_no_gpu(text):
    assert parse_query_gpu(text) == []


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, fields, line_number",
    [
        ("0, NVIDIA GB10", ("index", "name", "driver_version"), 1),
        ("0, NVIDIA GB10, 580.95.05, extra", ("index", "name", "driver_version"), 1),
        ("0, NVIDIA GB10, 580.95.05\n1, NVIDIA GB10", ("index", "name", "driver_version"), 2),
        (GB10_LINE.rsplit(",", 1)[0], QUERY_FIELDS, 1),
    ],
)
def test_column_count_mismatch_names_and_quotes_the_line(text, fields, line_number):
    with pytest.raises(GpuQueryError) as excinfo:
        parse_query_gpu(text, fields)
    bad_line = text.splitlines()[line_number - 1]
    message = str(excinfo.value)
    assert "line %d" % line_number in message
    assert repr(bad_line) in message
    assert "%d fields" % len(fields) in message


@pytest.mark.parametrize(
    "fields, line, field",
    [
        (("memory.total",), "[Unknown Error]", "memory.total"),
        (("power.draw",), "lots", "power.draw"),
        (("index",), "0.5", "index"),
        (("compute_cap",), "12", "compute_cap"),
        (("persistence_mode",), "Maybe", "persistence_mode"),
        (("memory.total",), "143771 W", "memory.total"),
    ],
)
def test_value_that_does_not_fit_the_field(fields, line, field):
    with pytest.raises(GpuQueryError, match=re.escape(field)) as excinfo:
        parse_query_gpu(line, fields)
    assert repr(line) in str(excinfo.value)


def test_unknown_field_answer_of_the_real_tool_is_not_taken_as_a_gpu():
    answer = 'Field "bogus_field" is not a valid field to query.\n\n'
    with pytest.raises(GpuQueryError):
        parse_query_gpu(answer, ("index", "name"))


# --- nvidia-smi -L -------------------------------------------------------------------------


def test_parse_list_gpus_skips_mig_devices():
    text = (
        "GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\n"
        "  MIG 1g.18gb     Device  0: (UUID: MIG-bbbb)\n"
        "GPU 1: NVIDIA GB10 (UUID: GPU-cccc)\n"
    )
    assert parse_list_gpus(text) == [
        {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-aaaa"},
        {"index": 1, "name": "NVIDIA GB10", "uuid": "GPU-cccc"},
    ]


def test_parse_list_gpus_rejects_other_output():
    with pytest.raises(GpuQueryError, match="line 1"):
        parse_list_gpus("No devices were found\n")


# --- driver versions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("580.95.05", (580, 95, 5)),
        ("580.159.04", (580, 159, 4)),
        ("580.142", (580, 142)),
        (" 570.86.10\n", (570, 86, 10)),
        ("535", (535,)),
    ],
)
def test_parse_driver_version(text, expected):
    assert parse_driver_version(text) == expected


@pytest.mark.parametrize("text", ["", "580.", ".95", "580.95.05-1", "v580", "[N/A]", None, 580])
def test_parse_driver_version_refuses(text):
    with pytest.raises(GpuQueryError):
        parse_driver_version(text)


@pytest.mark.parametrize(
    "found, minimum, expected",
    [
        ("580.95.05", "580.95.05", True),
        ("580.159.04", "580.95.05", True),  # numeric, not string, comparison
        ("580.95.05", "580.159.04", False),
        ("575.64.05", "580.95.05", False),
        ("580.95", "580.95.0", True),
        ("580.95", "580.95.1", False),
        ("590.44.01", "580", True),
        ((580, 126, 9), "580.95.05", True),
        ("580.65.06", (580, 95, 5), False),
    ],
)
def test_version_at_least(found, minimum, expected):
    assert version_at_least(found, minimum) is expected


def test_common_driver_version():
    gpus = [{"index": 0, "driver_version": "580.95.05"}, {"index": 1, "driver_version": "580.95.05"}]
    assert common_driver_version(gpus) == "580.95.05"
    assert common_driver_version([]) is None


def test_common_driver_version_names_both_versions_when_they_disagree():
    gpus = [
        {"index": 0, "uuid": "GPU-a", "driver_version": "580.95.05"},
        {"index": 1, "uuid": "GPU-b", "driver_version": "575.51.03"},
    ]
    with pytest.raises(GpuDriverMismatchError) as excinfo:
        common_driver_version(gpus)
    message = str(excinfo.value)
    assert "580.95.05 on GPU-a" in message and "575.51.03 on GPU-b" in message


def test_common_driver_version_refuses_a_gpu_without_one():
    with pytest.raises(GpuQueryError, match="GPU 0"):
        common_driver_version([{"index": 0, "driver_version": None}])


# --- clocks and clock-event reasons --------------------------------------------------------


@pytest.mark.parametrize(
    "mask, names",
    [
        (0, []),
        (0x1, ["gpu_idle"]),
        (0x4, ["sw_power_cap"]),
        (0x1FF, ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                 "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting"]),
        (0x400 | 0x8, ["hw_slowdown", "unknown_0x400"]),
        (None, None),
    ],
)
def test_decode_clock_event_reasons(mask, names):
    assert decode_clock_event_reasons(mask) == names


def test_clock_fields_parse_hex_mask_units_and_alias_headers():
    fields = ("clocks.sm", "clocks.max.sm", "clocks_event_reasons.active", "power.limit")
    text = (
        "clocks.current.sm [MHz], clocks.max.sm [MHz], clocks_throttle_reasons.active, power.limit [W]\n"
        "1980 MHz, 1980 MHz, 0x0000000000000024, [N/A]\n"
    )
    assert parse_query_gpu(text, fields) == [{
        "clocks_sm_mhz": 1980, "clocks_max_sm_mhz": 1980, "clock_event_reasons_active": 0x24,
        "clock_event_reasons": ["sw_power_cap", "sw_thermal_slowdown"], "power_limit_w": None,
    }]
    (gpu,) = parse_query_gpu("[N/A], [N/A], [Not Supported], 700.00\n", fields)
    assert (gpu["clock_event_reasons_active"], gpu["clock_event_reasons"]) == (None, None)
    with pytest.raises(GpuQueryError, match="field clocks_event_reasons.active: expected a hex bitmask"):
        parse_query_gpu("1, 2, Active, 3\n", fields)


def test_refused_optional_field_and_all_keys():
    out = 'Field "clocks_event_reasons.active" is not a valid field to query.\n\n'
    assert refused_optional_field(out, QUERY_FIELDS) == "clocks_event_reasons.active"
    assert refused_optional_field(out.replace("clocks_event_reasons.active", "uuid"), QUERY_FIELDS) is None
    assert refused_optional_field("", QUERY_FIELDS) is None
    (gpu,) = with_all_keys([{"index": 0}])
    assert list(gpu) == result_keys(QUERY_FIELDS) and gpu["clock_event_reasons"] is None and gpu["index"] == 0
