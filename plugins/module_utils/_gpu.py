# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure helpers behind dgxspark.cluster.gpu_facts: build the nvidia-smi query, parse its CSV.

Standard library only, so the logic is unit-tested without Ansible.
"""

from __future__ import annotations

import re

# The fields gpu_facts asks nvidia-smi for, in this order. Every name is checked against
# the `nvidia-smi --help-query-gpu` of a real 580-series driver (tests/unit/fixtures/gpu).
QUERY_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "compute_cap",
    "memory.total",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "persistence_mode",
    "compute_mode",
    "mig.mode.current",
    "clocks.sm",
    "clocks.max.sm",
    "clocks_event_reasons.active",
)

# Fields an older driver may not know: gpu_facts drops one that nvidia-smi refuses
# ('Field "x" is not a valid field to query.') and asks again; its keys then read None.
OPTIONAL_FIELDS = ("clocks.sm", "clocks.max.sm", "clocks_event_reasons.active")

# NVML's clock-event (throttle) reason bits, as nvidia-smi prints them in
# clocks_event_reasons.active (nvmlClocksEventReason*, nvml.h of the 580 driver series).
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

# The name nvidia-smi's CSV header gives a field asked for by another name (real 580 driver,
# tests/unit/fixtures/gpu/h100-query-header.csv).
HEADER_NAMES = {"clocks.sm": "clocks.current.sm"}

# Other names nvidia-smi knows a field by; its CSV header may print either.
FIELD_ALIASES = {
    "clocks.sm": ("clocks.current.sm",),
    "clocks.max.sm": ("clocks.max.streaming_multiprocessor",),
    "clocks_event_reasons.active": ("clocks_throttle_reasons.active",),
    "power.limit": ("gpu.power.requested_limit",),
}

# Values nvidia-smi prints where a reading does not exist on this GPU. On a GB10 (unified
# memory) memory.total reads "[N/A]", and so does power.limit.
NULL_VALUES = frozenset(("[N/A]", "N/A", "[Not Supported]", "Not Supported"))

_COMPUTE_CAP_RE = re.compile(r"^(\d+)\.(\d+)$")
_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
_LIST_GPUS_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (\S+)\)$")
_INVALID_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query')


class GpuQueryError(ValueError):
    """What nvidia-smi printed is not what the query asked for."""


class GpuDriverMismatchError(GpuQueryError):
    """The GPUs of one host report different driver versions."""


def _to_int(text):
    try:
        return int(text)
    except ValueError:
        raise GpuQueryError("expected a whole number, found %r" % text) from None


def _to_float(text):
    try:
        return float(text)
    except ValueError:
        raise GpuQueryError("expected a number, found %r" % text) from None


def _to_str(text):
    return text


def _to_enabled(text):
    if text == "Enabled":
        return True
    if text == "Disabled":
        return False
    raise GpuQueryError("expected Enabled or Disabled, found %r" % text)


def _to_bitmask(text):
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise GpuQueryError("expected a hex bitmask like 0x0000000000000001, found %r" % text) from None


def decode_clock_event_reasons(mask):
    """Names of the clock-event (throttle) reasons set in MASK (an int), in bit order.

    Bits NVML does not name come back as 'unknown_0x...'. None gives None.
    """
    if mask is None:
        return None
    names = []
    known = 0
    for bit, name in CLOCK_EVENT_REASONS:
        known |= bit
        if mask & bit:
            names.append(name)
    if mask & ~known:
        names.append("unknown_%#x" % (mask & ~known))
    return names


def _clock_event_reasons(text):
    mask = _to_bitmask(text)
    return {
        "clock_event_reasons_active": mask,
        "clock_event_reasons": decode_clock_event_reasons(mask),
    }


def _compute_cap(text):
    match = _COMPUTE_CAP_RE.match(text)
    if not match:
        raise GpuQueryError("expected a compute capability MAJOR.MINOR, found %r" % text)
    return {
        "compute_cap": text,
        "compute_cap_major": int(match.group(1)),
        "compute_cap_minor": int(match.group(2)),
    }


# nvidia-smi field -> (result key, converter, unit printed without `nounits`).
# A converter returning a dict contributes several keys (compute_cap gives major and minor too).
FIELD_SPECS = {
    "index": ("index", _to_int, None),
    "uuid": ("uuid", _to_str, None),
    "name": ("name", _to_str, None),
    "pci.bus_id": ("pci_bus_id", _to_str, None),
    "driver_version": ("driver_version", _to_str, None),
    "compute_cap": ("compute_cap", _compute_cap, None),
    "memory.total": ("memory_total_mib", _to_int, "MiB"),
    "power.draw": ("power_draw_w", _to_float, "W"),
    "power.limit": ("power_limit_w", _to_float, "W"),
    "temperature.gpu": ("temperature_gpu_c", _to_int, None),
    "persistence_mode": ("persistence_mode", _to_enabled, None),
    "compute_mode": ("compute_mode", _to_str, None),
    "mig.mode.current": ("mig_mode_current", _to_str, None),
    "clocks.sm": ("clocks_sm_mhz", _to_int, "MHz"),
    "clocks.max.sm": ("clocks_max_sm_mhz", _to_int, "MHz"),
    "clocks_event_reasons.active": ("clock_event_reasons_active", _clock_event_reasons, None),
}

# Fields whose converter returns several keys: field -> the keys, in order.
_MULTI_KEYS = {
    "compute_cap": ("compute_cap", "compute_cap_major", "compute_cap_minor"),
    "clocks_event_reasons.active": ("clock_event_reasons_active", "clock_event_reasons"),
}


def result_keys(fields=QUERY_FIELDS):
    """The keys one parsed GPU dict has for FIELDS, in order."""
    keys = []
    for field in fields:
        keys.extend(_MULTI_KEYS.get(field, (FIELD_SPECS[field][0],)))
    return keys


def _check_fields(fields):
    unknown = [f for f in fields if f not in FIELD_SPECS]
    if unknown:
        raise ValueError("no parser for nvidia-smi field(s): %s" % ", ".join(unknown))
    if not fields:
        raise ValueError("at least one field is needed")


def build_query_argv(nvidia_smi="nvidia-smi", fields=QUERY_FIELDS):
    """The argv that asks NVIDIA_SMI for FIELDS as bare CSV: no header, no units."""
    _check_fields(fields)
    return [nvidia_smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]


def header_names(fields=QUERY_FIELDS):
    """The header nvidia-smi prints for FIELDS with --format=csv (units in brackets): a field
    asked for by a short name is headed by its long one (clocks.sm: clocks.current.sm)."""
    _check_fields(fields)
    names = []
    for field in fields:
        unit = FIELD_SPECS[field][2]
        name = HEADER_NAMES.get(field, field)
        names.append("%s [%s]" % (name, unit) if unit else name)
    return names


def _is_header(columns, fields):
    """Whether COLUMNS is nvidia-smi's header for FIELDS (a field may be named by an alias)."""
    if len(columns) != len(fields):
        return False
    for column, field in zip(columns, fields):
        unit = FIELD_SPECS[field][2]
        names = (field,) + FIELD_ALIASES.get(field, ())
        if column not in names and not (unit and column in ["%s [%s]" % (n, unit) for n in names]):
            return False
    return True


def _convert(field, raw):
    key, converter, unit = FIELD_SPECS[field]
    if raw in NULL_VALUES:
        return {k: None for k in _MULTI_KEYS.get(field, (key,))}
    if unit and raw.endswith(" " + unit):
        raw = raw[: -len(unit) - 1]
    value = converter(raw)
    return value if isinstance(value, dict) else {key: value}


def parse_query_gpu(text, fields=QUERY_FIELDS):
    """Parse `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]` output.

    Returns one dict per GPU line, keyed by result_keys(FIELDS), with ints and floats typed,
    memory in MiB, power in W, clocks in MHz, the clock-event reasons as a bitmask and a
    list of names (decode_clock_event_reasons), and None where nvidia-smi prints N/A or Not Supported.
    A leading header line, and units after values, are accepted and dropped.
    Raises GpuQueryError naming the line when a line does not fit FIELDS.
    """
    _check_fields(fields)
    lines = [line.strip() for line in text.splitlines()]
    lines = [(number, line) for number, line in enumerate(lines, 1) if line]
    if lines and _is_header([c.strip() for c in lines[0][1].split(",")], fields):
        lines = lines[1:]
    gpus = []
    for number, line in lines:
        columns = [c.strip() for c in line.split(",")]
        if len(columns) != len(fields):
            raise GpuQueryError(
                "line %d has %d columns where %d fields (%s) were asked for: %r"
                % (number, len(columns), len(fields), ",".join(fields), line)
            )
        gpu = {}
        for field, raw in zip(fields, columns):
            try:
                gpu.update(_convert(field, raw))
            except GpuQueryError as exc:
                raise GpuQueryError("line %d, field %s: %s: %r" % (number, field, exc, line)) from None
        gpus.append(gpu)
    return gpus


def refused_optional_field(text, fields):
    """The field of FIELDS that nvidia-smi's TEXT refuses as unknown, when it is optional; else None."""
    match = _INVALID_FIELD_RE.search(text or "")
    if match and match.group(1) in fields and match.group(1) in OPTIONAL_FIELDS:
        return match.group(1)
    return None


def with_all_keys(gpus, fields=QUERY_FIELDS):
    """GPUS with every key of result_keys(FIELDS), None where a field was not asked for."""
    keys = result_keys(fields)
    return [dict({key: None for key in keys}, **gpu) for gpu in gpus]


def parse_list_gpus(text):
    """Parse `nvidia-smi -L`: one dict per GPU with index, name and uuid.

    Lines below a GPU (MIG devices, indented) are skipped.
    """
    gpus = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line[:1].isspace():
            continue
        match = _LIST_GPUS_RE.match(line.strip())
        if not match:
            raise GpuQueryError("line %d is not 'GPU N: NAME (UUID: ...)': %r" % (number, line))
        gpus.append({"index": int(match.group(1)), "name": match.group(2), "uuid": match.group(3)})
    return gpus


def parse_driver_version(text):
    """'580.95.05' -> (580, 95, 5). Raises GpuQueryError for anything else."""
    text = text.strip() if isinstance(text, str) else text
    if not isinstance(text, str) or not _VERSION_RE.match(text):
        raise GpuQueryError("expected a driver version like 580.95.05, found %r" % (text,))
    return tuple(int(part) for part in text.split("."))


def version_at_least(found, minimum):
    """True when driver version FOUND is MINIMUM or newer (strings or tuples; 580.95 == 580.95.0)."""
    found = parse_driver_version(found) if isinstance(found, str) else tuple(found)
    minimum = parse_driver_version(minimum) if isinstance(minimum, str) else tuple(minimum)
    width = max(len(found), len(minimum))
    return found + (0,) * (width - len(found)) >= minimum + (0,) * (width - len(minimum))


def common_driver_version(gpus):
    """The one driver version all GPUS report; None when there are none.

    Raises GpuDriverMismatchError when they disagree, GpuQueryError when one reports none.
    """
    versions = {}
    for gpu in gpus:
        version = gpu.get("driver_version")
        if version is None:
            raise GpuQueryError("GPU %s reports no driver version" % gpu.get("index", "?"))
        versions.setdefault(version, []).append(gpu.get("uuid") or gpu.get("index"))
    if len(versions) > 1:
        raise GpuDriverMismatchError(
            "GPUs report different driver versions: "
            + "; ".join("%s on %s" % (v, ", ".join(str(g) for g in ids)) for v, ids in sorted(versions.items()))
        )
    return next(iter(versions), None)
