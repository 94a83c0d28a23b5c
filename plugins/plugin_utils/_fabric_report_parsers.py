# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fabric report's parsers: what ping, iperf3 and perftest print, read into numbers,
and the catalogue of tests they belong to.

Standard library only, so the logic is unit-tested without Ansible.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

LATENCY_TESTS = ("ib_write_lat", "ib_read_lat", "ib_send_lat")

TESTS = ("ping", "iperf3") + LATENCY_TESTS + ("ib_write_bw",)

TEST_TITLES = {
    "ping": "ICMP round-trip time",
    "iperf3": "TCP throughput",
    "ib_write_lat": "RDMA write latency",
    "ib_read_lat": "RDMA read latency",
    "ib_send_lat": "RDMA send latency",
    "ib_write_bw": "RDMA write bandwidth",
}

# perftest's "MB" is 2**20 bytes (format_factor 0x100000 in its report code), its "Gb" 10**9 bits.
_PERFTEST_MB_TO_GBIT = 0x100000 * 8 / 1e9

_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")

# Lines perftest prints when a run breaks; what came before them is not a valid result.
_PERFTEST_FAILURE = re.compile(
    r"^\s*(Completion with error|Failed status|Couldn't|Unable to|Failed to)\b.*$", re.MULTILINE
)

_LATENCY_COLUMNS = {
    "#bytes": "bytes",
    "#iterations": "iterations",
    "t_min[usec]": "t_min",
    "t_max[usec]": "t_max",
    "t_typical[usec]": "t_typical",
    "t_avg[usec]": "t_avg",
    "t_stdev[usec]": "t_stdev",
    "p99[usec]": "p99",
    "p99.9[usec]": "p999",
}

_LATENCY_FIELDS = ("t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p999")

_BANDWIDTH_COLUMNS = {
    "#bytes": ("bytes", None),
    "#iterations": ("iterations", None),
    "BW_peak[Gb/sec]": ("bw_peak_gbps", 1.0),
    "BW_average[Gb/sec]": ("bw_avg_gbps", 1.0),
    "BW_peak[MB/sec]": ("bw_peak_gbps", _PERFTEST_MB_TO_GBIT),
    "BW_average[MB/sec]": ("bw_avg_gbps", _PERFTEST_MB_TO_GBIT),
    "MsgRate[Mpps]": ("msg_rate_mpps", 1.0),
}

_PING_STATS = re.compile(
    r"(?P<transmitted>\d+) packets transmitted, (?P<received>\d+) (?:packets )?received"
    r"(?P<extras>(?:, \+\d+ \w+)*)"
    r"(?:, (?P<loss>\d+(?:\.\d+)?)% packet loss)?"
)

_PING_RTT = re.compile(
    r"(?:rtt|round-trip) min/avg/max(?:/(?:mdev|stddev))? = "
    r"(?P<min>[\d.]+)/(?P<avg>[\d.]+)/(?P<max>[\d.]+)(?:/(?P<mdev>[\d.]+))? ms"
)

# "ping: local error: message too long, mtu=1500" (the sender's own interface is too small) and
# "From <hop> ... Frag needed and DF set (mtu = 1500)" (a hop on the path is too small).
_PING_MTU_EXCEEDED = re.compile(r"message too long|frag(?:mentation)? needed", re.IGNORECASE)

_PING_REPORTED_MTU = re.compile(r"mtu\s*=\s*(\d+)", re.IGNORECASE)


class FabricReportError(ValueError):
    """Raised for input that cannot be scheduled, parsed or reported."""


def _quote(text, limit=240):
    """The unparseable text, shortened, for an error message."""
    text = str(text).strip()
    if not text:
        return "<empty output>"
    if len(text) > limit:
        text = text[:limit] + "..."
    return repr(text)


def _require_text(text, tool):
    if not isinstance(text, str):
        raise FabricReportError(f"{tool} output must be a string, got {type(text).__name__}")
    return text


def _perftest_last_row(text, header_line_index, column_count, kind):
    """The last row of numbers under the header (perftest prints one per message size)."""
    rows = []
    for line in text.splitlines()[header_line_index + 1:]:
        tokens = line.split()
        if len(tokens) == column_count and all(_NUMBER.match(token) for token in tokens):
            rows.append(tokens)
    if not rows:
        raise FabricReportError(
            f"no result row under the perftest {kind} header in the output: {_quote(text)}"
        )
    return rows[-1]


def _perftest_header(text, marker, tool):
    """(line index, header line) of the result table; raises on a perftest failure line instead."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if "#bytes" in line and marker in line:
            # Setup chatter before the table is harmless; a failure after it voids the rows.
            _raise_on_perftest_failure("\n".join(lines[index + 1:]))
            return index, line
    _raise_on_perftest_failure(text)
    raise FabricReportError(f"no {tool} result header (#bytes ... {marker}) in the output: {_quote(text)}")


def _raise_on_perftest_failure(text):
    failure = _PERFTEST_FAILURE.search(text)
    if failure:
        raise FabricReportError(f"perftest reported a failure: {failure.group(0).strip()!r}")


def parse_perftest_latency(text):
    """Parse the client output of ib_write_lat, ib_read_lat or ib_send_lat.

    Returns the last result row as ``bytes``, ``iterations`` and the usec floats
    ``t_min``, ``t_max``, ``t_typical``, ``t_avg``, ``t_stdev``, ``p99``, ``p999``;
    columns an older perftest does not print are None.
    """
    text = _require_text(text, "perftest latency")
    index, header = _perftest_header(text, "t_", "perftest latency")
    normalised = re.sub(r"(\d+(?:\.\d+)?)% percentile\[", r"p\1[", header)
    normalised = normalised.replace("tps average", "tps_average")
    columns = normalised.split()
    if any("[cycles]" in column for column in columns):
        raise FabricReportError(
            "perftest reported CPU cycles instead of usec; run it without -C / --report-cycles"
        )
    keys = [_LATENCY_COLUMNS.get(column) for column in columns]
    if "bytes" not in keys or "iterations" not in keys or not {"t_avg", "t_typical"} & set(keys):
        raise FabricReportError(
            f"perftest latency header lacks #bytes, #iterations or a latency column: {header.strip()!r}"
        )
    row = _perftest_last_row(text, index, len(columns), "latency")
    values = dict(zip(keys, row))
    parsed = {"bytes": int(float(values["bytes"])), "iterations": int(float(values["iterations"]))}
    for field in _LATENCY_FIELDS:
        parsed[field] = float(values[field]) if field in values else None
    return parsed


def parse_perftest_bandwidth(text):
    """Parse the client output of ib_write_bw (MB/sec by default, Gb/sec with --report_gbits).

    Returns the last result row as ``bytes``, ``iterations``, ``bw_peak_gbps``,
    ``bw_avg_gbps`` (always Gbit/s) and ``msg_rate_mpps`` (None when not printed).
    """
    text = _require_text(text, "perftest bandwidth")
    index, header = _perftest_header(text, "BW ", "perftest bandwidth")
    columns = re.sub(r"\b(BW|MsgRate) (\w+)\[", r"\1_\2[", header).split()
    mapped = [_BANDWIDTH_COLUMNS.get(column) for column in columns]
    keys = [entry[0] if entry else None for entry in mapped]
    if not {"bytes", "iterations", "bw_avg_gbps"} <= set(keys):
        raise FabricReportError(
            f"perftest bandwidth header lacks #bytes, #iterations or BW average: {header.strip()!r}"
        )
    row = _perftest_last_row(text, index, len(columns), "bandwidth")
    parsed = dict.fromkeys(("bytes", "iterations", "bw_peak_gbps", "bw_avg_gbps", "msg_rate_mpps"))
    for entry, token in zip(mapped, row):
        if entry is None:
            continue
        key, factor = entry
        parsed[key] = int(float(token)) if factor is None else float(token) * factor
    return parsed


def parse_iperf3_json(text):
    """Parse ``iperf3 -c ... -J`` output (a string, or the already decoded object).

    Returns ``sent_gbps``, ``received_gbps``, ``retransmits`` (None where the sender's OS
    does not count them) and ``streams``.
    """
    if isinstance(text, Mapping):
        data = text
    else:
        text = _require_text(text, "iperf3")
        start = text.find("{")
        if start < 0:
            raise FabricReportError(f"no JSON object in the iperf3 output: {_quote(text)}")
        try:
            data, end = json.JSONDecoder().raw_decode(text, start)
        except ValueError as exc:
            raise FabricReportError(
                f"iperf3 output is not valid JSON ({exc}): {_quote(text[start:])}"
            ) from exc
        trailer = text[end:].strip()
        # iperf3 can finish the JSON and still print a plain-text error after it.
        if "error" in trailer.lower():
            raise FabricReportError(f"iperf3 printed an error after its JSON: {_quote(trailer)}")
    if not isinstance(data, Mapping):
        raise FabricReportError(f"iperf3 JSON must be an object, got {type(data).__name__}")
    if data.get("error"):
        raise FabricReportError(f"iperf3 reported an error: {data['error']}")
    end_section = data.get("end") if isinstance(data.get("end"), Mapping) else {}
    sent = end_section.get("sum_sent")
    received = end_section.get("sum_received")
    if not isinstance(sent, Mapping) or not isinstance(received, Mapping):
        raise FabricReportError(
            "iperf3 JSON has no end.sum_sent / end.sum_received (not a finished TCP test): "
            f"{_quote(json.dumps(end_section))}"
        )
    try:
        sent_gbps = float(sent["bits_per_second"]) / 1e9
        received_gbps = float(received["bits_per_second"]) / 1e9
    except (KeyError, TypeError, ValueError) as exc:
        raise FabricReportError(
            f"iperf3 JSON sums lack a numeric bits_per_second: {_quote(json.dumps(end_section))}"
        ) from exc
    start_section = data.get("start") if isinstance(data.get("start"), Mapping) else {}
    test_start = start_section.get("test_start") if isinstance(start_section.get("test_start"), Mapping) else {}
    streams = test_start.get("num_streams")
    if not isinstance(streams, int):
        streams = len(end_section.get("streams") or [])
    retransmits = sent.get("retransmits")
    return {
        "sent_gbps": sent_gbps,
        "received_gbps": received_gbps,
        "retransmits": int(retransmits) if isinstance(retransmits, (int, float)) else None,
        "streams": streams,
    }


def parse_ping(text):
    """Parse Linux (iputils) ping output.

    Returns ``transmitted``, ``received``, ``errors``, ``loss_pct``, ``rtt_min``,
    ``rtt_avg``, ``rtt_max``, ``rtt_mdev`` (ms, None without replies), ``no_reply``,
    ``mtu_exceeded`` (a don't-fragment packet was too big for the path) and
    ``reported_mtu`` (the MTU ping named, or None).
    """
    text = _require_text(text, "ping")
    stats = _PING_STATS.search(text)
    if not stats:
        raise FabricReportError(
            f"no ping statistics line ('N packets transmitted, M received') in the output: {_quote(text)}"
        )
    transmitted = int(stats.group("transmitted"))
    received = int(stats.group("received"))
    errors = re.search(r"\+(\d+) errors", stats.group("extras"))
    if stats.group("loss") is not None:
        loss_pct = float(stats.group("loss"))
    else:
        # iputils leaves out the loss figure when nothing could be sent at all.
        loss_pct = 100.0 if received == 0 else 100.0 * (transmitted - received) / transmitted
    rtt = _PING_RTT.search(text)
    mtu = _PING_REPORTED_MTU.search(text)
    return {
        "transmitted": transmitted,
        "received": received,
        "errors": int(errors.group(1)) if errors else 0,
        "loss_pct": loss_pct,
        "rtt_min": float(rtt.group("min")) if rtt else None,
        "rtt_avg": float(rtt.group("avg")) if rtt else None,
        "rtt_max": float(rtt.group("max")) if rtt else None,
        "rtt_mdev": float(rtt.group("mdev")) if rtt and rtt.group("mdev") else None,
        "no_reply": received == 0,
        "mtu_exceeded": bool(_PING_MTU_EXCEEDED.search(text)),
        "reported_mtu": int(mtu.group(1)) if mtu else None,
    }


PARSERS = {
    "ping": parse_ping,
    "iperf3": parse_iperf3_json,
    "ib_write_lat": parse_perftest_latency,
    "ib_read_lat": parse_perftest_latency,
    "ib_send_lat": parse_perftest_latency,
    "ib_write_bw": parse_perftest_bandwidth,
}
