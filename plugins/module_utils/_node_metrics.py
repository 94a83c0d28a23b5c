# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node's GPU, RoCE port and engine-unit metrics for node-exporter's textfile collector.

Run on the node by a systemd timer (the monitoring role installs this file as
``dgxspark-node-metrics.py`` and runs it with ``python3 FILE``; standard library only):

* the GPU from ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` (DCGM is not
  supported on a Spark, whose framebuffer fields make no sense on unified memory). A value
  the driver does not report (``[N/A]``, ``[Not Supported]``; a GB10 has no separate memory
  total or memory clock to speak of) is left out, never written as a number. A field this
  driver does not know is dropped and the query asked again without it, so an older driver
  still gives the others.
* every RoCE port of the given HCAs from sysfs: ``ports/<n>/counters/*`` and
  ``ports/<n>/hw_counters/*`` (the error counters), the port state and its rate.
* whether each given systemd unit (the engine rank's) is active: a headless rank has no
  ``/metrics`` of its own, so this is how its death shows.

The file is written atomically: a temporary file in the same directory, renamed over the
old one, so node-exporter never reads half a file.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time

# nvidia-smi field -> (metric, help, factor to base units)
GPU_FIELDS = (
    ("power.draw", "dgxspark_gpu_power_draw_watts", "GPU power draw in watts.", 1.0),
    ("temperature.gpu", "dgxspark_gpu_temperature_celsius", "GPU temperature in degrees Celsius.", 1.0),
    ("utilization.gpu", "dgxspark_gpu_utilization_ratio", "GPU utilisation, 0 to 1.", 0.01),
    ("clocks.sm", "dgxspark_gpu_clock_sm_hertz", "GPU SM clock in hertz.", 1e6),
    ("clocks.mem", "dgxspark_gpu_clock_mem_hertz", "GPU memory clock in hertz.", 1e6),
    ("memory.used", "dgxspark_gpu_memory_used_bytes", "GPU memory used in bytes.", 1048576.0),
    ("memory.total", "dgxspark_gpu_memory_total_bytes", "GPU memory in bytes.", 1048576.0),
)
_INVALID_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query')
# "4: ACTIVE" -> 4; "200 Gb/sec (4X HDR)" -> 200
_STATE_RE = re.compile(r"\A\s*(\d+)\s*:")
_RATE_RE = re.compile(r"\A\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")
_LABEL_VALUE_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", '"': '\\"'})


class Metrics:
    """Samples grouped by metric name, rendered in the Prometheus text format."""

    def __init__(self):
        self._families = {}

    def add(self, name, kind, help_text, labels, value):
        family = self._families.setdefault(name, {"kind": kind, "help": help_text, "samples": []})
        family["samples"].append((dict(labels), float(value)))

    def names(self):
        return sorted(self._families)

    def render(self):
        lines = []
        for name in sorted(self._families):
            family = self._families[name]
            lines.append("# HELP %s %s" % (name, family["help"]))
            lines.append("# TYPE %s %s" % (name, family["kind"]))
            for labels, value in family["samples"]:
                label_text = ",".join(
                    '%s="%s"' % (key, str(labels[key]).translate(_LABEL_VALUE_ESCAPES)) for key in sorted(labels)
                )
                lines.append("%s%s %s" % (name, "{%s}" % label_text if label_text else "", _number(value)))
        return "\n".join(lines) + "\n"


def _number(value):
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def parse_number(text):
    """A float from an nvidia-smi or sysfs value, or None for what is not a number
    ([N/A], [Not Supported], [Unknown Error], empty)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_gpu_csv(text, fields):
    """[(gpu index, {field: float}), ...] from C(--format=csv,noheader,nounits) output of
    O(fields); values that are not numbers are left out."""
    gpus = []
    for index, line in enumerate(line for line in text.splitlines() if line.strip()):
        values = [part.strip() for part in line.split(",")]
        if len(values) != len(fields):
            raise ValueError("nvidia-smi printed %d values for %d fields: %r" % (len(values), len(fields), line))
        numbers = {}
        for field, value in zip(fields, values):
            number = parse_number(value)
            if number is not None:
                numbers[field] = number
        gpus.append((index, numbers))
    return gpus


def query_gpus(nvidia_smi, run=subprocess.run, timeout=10):
    """(gpus as parse_gpu_csv gives them, error text or None). Fields the driver does not
    know are dropped one by one and the query asked again."""
    fields = [field for field, _metric, _help, _factor in GPU_FIELDS]
    while fields:
        try:
            result = run(
                [nvidia_smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=timeout, check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return [], "nvidia-smi did not run: %s" % exc
        if result.returncode == 0:
            try:
                return parse_gpu_csv(result.stdout, fields), None
            except ValueError as exc:
                return [], str(exc)
        unknown = _INVALID_FIELD_RE.search(result.stdout + result.stderr)
        if unknown and unknown.group(1) in fields:
            fields.remove(unknown.group(1))
            continue
        return [], "nvidia-smi exited %d: %s" % (result.returncode, (result.stderr or result.stdout).strip())
    return [], "nvidia-smi knows none of the queried fields"


def _read(path):
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read().strip()


def read_port(port_dir):
    """{'state': int|None, 'state_text', 'rate_gbps': float|None, 'counters': {..}, 'hw_counters': {..}}."""
    found = {"state": None, "state_text": "", "phys_state": None, "rate_gbps": None, "counters": {}, "hw_counters": {}}
    for name, key in (("state", "state"), ("phys_state", "phys_state")):
        try:
            text = _read(os.path.join(port_dir, name))
        except OSError:
            continue
        match = _STATE_RE.match(text)
        if match:
            found[key] = int(match.group(1))
        if name == "state":
            found["state_text"] = text.partition(":")[2].strip()
    try:
        match = _RATE_RE.match(_read(os.path.join(port_dir, "rate")))
    except OSError:
        match = None
    if match:
        found["rate_gbps"] = float(match.group(1))
    for sub in ("counters", "hw_counters"):
        directory = os.path.join(port_dir, sub)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            try:
                value = parse_number(_read(os.path.join(directory, name)))
            except OSError:
                # Some counters refuse reads (EINVAL) on some firmware: leave them out.
                continue
            if value is not None:
                found[sub][name] = value
    return found


def collect_roce(metrics, sysfs_root, hcas, expected_rate_gbps):
    for hca in hcas:
        ports_dir = os.path.join(sysfs_root, "class", "infiniband", hca, "ports")
        try:
            ports = sorted(os.listdir(ports_dir))
        except OSError:
            metrics.add("dgxspark_roce_hca_present", "gauge", "1 when the HCA's sysfs directory exists.", {"hca": hca}, 0)
            continue
        metrics.add("dgxspark_roce_hca_present", "gauge", "1 when the HCA's sysfs directory exists.", {"hca": hca}, 1)
        for port in ports:
            labels = {"hca": hca, "port": port}
            found = read_port(os.path.join(ports_dir, port))
            if found["state"] is not None:
                metrics.add("dgxspark_roce_port_state", "gauge",
                            "The port's state number (4 is ACTIVE).", labels, found["state"])
                metrics.add("dgxspark_roce_port_active", "gauge", "1 when the port is ACTIVE.", labels,
                            1 if found["state"] == 4 else 0)
            if found["phys_state"] is not None:
                metrics.add("dgxspark_roce_port_phys_state", "gauge",
                            "The port's physical state number (5 is LinkUp).", labels, found["phys_state"])
            if found["rate_gbps"] is not None:
                metrics.add("dgxspark_roce_port_rate_gbps", "gauge", "The port's link rate in Gb/s.",
                            labels, found["rate_gbps"])
            if expected_rate_gbps:
                metrics.add("dgxspark_roce_port_expected_rate_gbps", "gauge",
                            "The link rate the port is expected to run at, in Gb/s.", labels, expected_rate_gbps)
            for name, value in sorted(found["counters"].items()):
                metrics.add("dgxspark_roce_port_counter", "counter", "The port's counters (ports/N/counters).",
                            dict(labels, counter=name), value)
            for name, value in sorted(found["hw_counters"].items()):
                metrics.add("dgxspark_roce_port_hw_counter", "counter",
                            "The port's hardware counters (ports/N/hw_counters).", dict(labels, counter=name), value)


def collect_gpus(metrics, nvidia_smi, run=subprocess.run):
    gpus, error = query_gpus(nvidia_smi, run=run)
    metrics.add("dgxspark_gpu_query_success", "gauge", "1 when nvidia-smi answered the query.", {},
                0 if error else 1)
    for index, values in gpus:
        for field, metric, help_text, factor in GPU_FIELDS:
            if field in values:
                metrics.add(metric, "gauge", help_text, {"gpu": str(index)}, values[field] * factor)
    return error


def collect_units(metrics, units, run=subprocess.run):
    for unit in units:
        try:
            result = run(["systemctl", "is-active", "--quiet", unit], capture_output=True, timeout=10, check=False)
            active = result.returncode == 0
        except (OSError, subprocess.SubprocessError):
            active = False
        metrics.add("dgxspark_unit_active", "gauge", "1 when the systemd unit is active.", {"unit": unit},
                    1 if active else 0)


def write_atomically(path, text):
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=".dgxspark-node-metrics.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def collect(args, run=subprocess.run, clock=time.time):
    metrics = Metrics()
    errors = []
    if args.nvidia_smi:
        error = collect_gpus(metrics, args.nvidia_smi, run=run)
        if error:
            errors.append(error)
    collect_roce(metrics, args.sysfs_root, args.hca or [], args.expected_rate_gbps)
    collect_units(metrics, args.unit or [], run=run)
    metrics.add("dgxspark_node_metrics_last_run_timestamp_seconds", "gauge",
                "When the collector last wrote this file (Unix time).", {}, round(clock(), 3))
    return metrics, errors


def argument_parser():
    parser = argparse.ArgumentParser(prog="dgxspark-node-metrics", description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--output", required=True, help="the .prom file in node-exporter's textfile directory")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi to query; empty: no GPU metrics")
    parser.add_argument("--sysfs-root", default="/sys")
    parser.add_argument("--hca", action="append", help="an RDMA device to read (repeatable)")
    parser.add_argument("--expected-rate-gbps", type=float, default=0.0)
    parser.add_argument("--unit", action="append", help="a systemd unit whose activity is reported (repeatable)")
    return parser


def main(argv=None):
    args = argument_parser().parse_args(argv)
    metrics, errors = collect(args)
    write_atomically(args.output, metrics.render())
    for error in errors:
        print("dgxspark-node-metrics: %s" % error, file=sys.stderr)  # pylint: disable=ansible-bad-function
    return 0


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
