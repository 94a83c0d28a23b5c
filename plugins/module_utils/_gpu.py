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
)

# Values nvidia-smi prints where a reading does not exist on this GPU. On a GB10 (unified
# memory) memory.total reads "[N/A]", and so does power.limit.
NULL_VALUES = frozenset(("[N/A]", "N/A", "[Not Supported]", "Not Supported"))

_COMPUTE_CAP_RE = re.compile(r"^(\d+)\.(\d+)$")
_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
_LIST_GPUS_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (\S+)\)$")


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
}


def result_keys(fields=QUERY_FIELDS):
    """The keys one parsed GPU dict has for FIELDS, in order."""
    keys = []
    for field in fields:
        key = FIELD_SPECS[field][0]
        keys.append(key)
        if field == "compute_cap":
            keys.extend(("compute_cap_major", "compute_cap_minor"))
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
    """The header nvidia-smi prints for FIELDS with --format=csv (units in brackets)."""
    _check_fields(fields)
    names = []
    for field in fields:
        unit = FIELD_SPECS[field][2]
        names.append("%s [%s]" % (field, unit) if unit else field)
    return names


def _convert(field, raw):
    key, converter, unit = FIELD_SPECS[field]
    if raw in NULL_VALUES:
        if field == "compute_cap":
            return {"compute_cap": None, "compute_cap_major": None, "compute_cap_minor": None}
        return {key: None}
    if unit and raw.endswith(" " + unit):
        raw = raw[: -len(unit) - 1]
    value = converter(raw)
    return value if isinstance(value, dict) else {key: value}


def parse_query_gpu(text, fields=QUERY_FIELDS):
    """Parse `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]` output.

    Returns one dict per GPU line, keyed by result_keys(FIELDS), with ints and floats typed,
    memory in MiB, power in W, and None where nvidia-smi prints N/A or Not Supported.
    A leading header line, and units after values, are accepted and dropped.
    Raises GpuQueryError naming the line when a line does not fit FIELDS.
    """
    _check_fields(fields)
    lines = [line.strip() for line in text.splitlines()]
    lines = [(number, line) for number, line in enumerate(lines, 1) if line]
    if lines and [c.strip() for c in lines[0][1].split(",")] == header_names(fields):
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
