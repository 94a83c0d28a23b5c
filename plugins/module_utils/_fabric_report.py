# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic behind the fabric validation report: schedule the full mesh of pair tests,
parse what ping, iperf3 and perftest print, check thresholds and render Markdown.

Standard library only, so the logic is unit-tested without Ansible.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence

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

THRESHOLD_DEFAULTS = {
    "max_ping_rtt_ms": None,
    "max_ping_loss_pct": 0,
    "min_tcp_gbps": None,
    "max_lat_p99_us": None,
    "min_rdma_gbps": None,
    "max_counter_increase": 0,
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


def _validated_hosts(hosts):
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, Sequence):
        raise FabricReportError(f"hosts must be a list of host names, got {type(hosts).__name__}")
    names = list(hosts)
    for name in names:
        if not isinstance(name, str) or not name:
            raise FabricReportError(f"every host name must be a non-empty string, got {name!r}")
    if len(names) < 2:
        raise FabricReportError(f"a fabric test needs at least 2 hosts, got {len(names)}")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise FabricReportError(f"host names must be unique, repeated: {', '.join(duplicates)}")
    return names


def pair_rounds(hosts):
    """Schedule every unordered host pair into rounds of disjoint pairs (circle method).

    N-1 rounds for an even N; for an odd N, N rounds in which one host sits out each round.
    Each pair is ``[a, b]`` with ``a`` earlier than ``b`` in ``hosts``.
    """
    names = _validated_hosts(hosts)
    position = {name: index for index, name in enumerate(names)}
    # The bye slot (None) gives odd meshes a resting host per round.
    circle = names + [None] if len(names) % 2 else list(names)
    size = len(circle)
    rounds = []
    for _round in range(size - 1):
        pairs = []
        for index in range(size // 2):
            first, second = circle[index], circle[size - 1 - index]
            if first is None or second is None:
                continue
            pairs.append(sorted([first, second], key=position.__getitem__))
        rounds.append(pairs)
        circle = [circle[0], circle[-1]] + circle[1:-1]
    return rounds


def directed_pairs(rounds):
    """Flatten rounds into ``[src, dst]`` pairs in run order: per pair, a->b then b->a."""
    if isinstance(rounds, (str, bytes)) or not isinstance(rounds, Sequence):
        raise FabricReportError("rounds must be a list of rounds, each a list of [a, b] pairs")
    ordered = []
    for round_pairs in rounds:
        if isinstance(round_pairs, (str, bytes)) or not isinstance(round_pairs, Sequence):
            raise FabricReportError(f"a round must be a list of [a, b] pairs, got {round_pairs!r}")
        for pair in round_pairs:
            if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
                raise FabricReportError(f"a pair must be [a, b], got {pair!r}")
            first, second = pair
            ordered.append([first, second])
            ordered.append([second, first])
    return ordered


def _require_text(text, tool):
    if not isinstance(text, str):
        raise FabricReportError(f"{tool} output must be a string, got {type(text).__name__}")
    return text


def _perftest_rows(text, header_line_index, column_count):
    rows = []
    for line in text.splitlines()[header_line_index + 1:]:
        tokens = line.split()
        if len(tokens) == column_count and all(_NUMBER.match(token) for token in tokens):
            rows.append(tokens)
    return rows


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
    rows = _perftest_rows(text, index, len(columns))
    if not rows:
        raise FabricReportError(
            f"no result row under the perftest latency header in the output: {_quote(text)}"
        )
    values = dict(zip(keys, rows[-1]))
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
    rows = _perftest_rows(text, index, len(columns))
    if not rows:
        raise FabricReportError(
            f"no result row under the perftest bandwidth header in the output: {_quote(text)}"
        )
    parsed = dict.fromkeys(("bytes", "iterations", "bw_peak_gbps", "bw_avg_gbps", "msg_rate_mpps"))
    for entry, token in zip(mapped, rows[-1]):
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


def _counter_value(value):
    """A counter as int; sysfs and ethtool readings often arrive as strings like '0\\n'."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        return int(value)
    return None


def _require_counter_readings(before, after):
    for name, reading in (("before", before), ("after", after)):
        if not isinstance(reading, Mapping):
            raise FabricReportError(
                f"counters {name} must map host -> {{counter: value}}, got {type(reading).__name__}"
            )


def counter_increases(before, after, hosts=None):
    """Compare NIC counters read before and after the run.

    ``before`` and ``after`` map host -> {counter name: value}. Returns
    ``{"increases": {host: {name: delta}}, "problems": [str, ...]}``: every host appears in
    ``increases`` (empty when nothing rose); a host or counter read only once, a value that is
    not an integer, or a counter that went down (reset, so the delta is unknown) is a problem.
    ``hosts``, when given, names hosts that must appear in both readings.
    """
    _require_counter_readings(before, after)
    order = list(hosts) if hosts is not None else []
    for host in list(before) + list(after):
        if host not in order:
            order.append(host)
    increases = {}
    problems = []
    for host in order:
        increases[host] = {}
        missing = [name for name, reading in (("before", before), ("after", after)) if host not in reading]
        if missing:
            problems.append(f"{host}: no error counters read {' or '.join(missing)} the run")
            continue
        host_before, host_after = before[host], after[host]
        if not isinstance(host_before, Mapping) or not isinstance(host_after, Mapping):
            problems.append(f"{host}: error counters must be a mapping of counter name to value")
            continue
        names = list(host_before) + [name for name in host_after if name not in host_before]
        for name in sorted(names):
            if name not in host_after or name not in host_before:
                when = "after" if name not in host_after else "before"
                problems.append(f"{host}: error counter {name} was not read {when} the run")
                continue
            old, new = _counter_value(host_before[name]), _counter_value(host_after[name])
            if old is None or new is None:
                problems.append(
                    f"{host}: error counter {name} has a non-integer reading "
                    f"(before {host_before[name]!r}, after {host_after[name]!r})"
                )
            elif new < old:
                problems.append(
                    f"{host}: error counter {name} went down from {old} to {new} (reset during the run?)"
                )
            elif new > old:
                increases[host][name] = new - old
    return {"increases": increases, "problems": problems}


def _threshold_number(name, value):
    if isinstance(value, bool):
        raise FabricReportError(f"threshold {name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise FabricReportError(f"threshold {name} must be a number, got {value!r}") from exc
    if not math.isfinite(number) or number < 0:
        raise FabricReportError(f"threshold {name} must be a finite number >= 0, got {value!r}")
    return number


def _normalise_thresholds(thresholds):
    """Validated thresholds with defaults applied; None switches a check off."""
    if thresholds is None:
        thresholds = {}
    if not isinstance(thresholds, Mapping):
        raise FabricReportError(f"thresholds must be a mapping, got {type(thresholds).__name__}")
    unknown = sorted(set(thresholds) - set(THRESHOLD_DEFAULTS))
    if unknown:
        raise FabricReportError(
            f"unknown threshold(s) {', '.join(map(str, unknown))}; known: {', '.join(THRESHOLD_DEFAULTS)}"
        )
    merged = dict(THRESHOLD_DEFAULTS, **thresholds)
    effective = {}
    for name, value in merged.items():
        if name == "max_lat_p99_us":
            continue
        effective[name] = None if value is None else _threshold_number(name, value)
    p99 = merged["max_lat_p99_us"]
    if isinstance(p99, Mapping):
        unknown_tests = sorted(set(p99) - set(LATENCY_TESTS))
        if unknown_tests:
            raise FabricReportError(
                f"max_lat_p99_us names unknown test(s) {', '.join(map(str, unknown_tests))}; "
                f"known: {', '.join(LATENCY_TESTS)}"
            )
        effective["max_lat_p99_us"] = {
            test: None if p99.get(test) is None else _threshold_number(f"max_lat_p99_us.{test}", p99[test])
            for test in LATENCY_TESTS
        }
    else:
        limit = None if p99 is None else _threshold_number("max_lat_p99_us", p99)
        effective["max_lat_p99_us"] = {test: limit for test in LATENCY_TESTS}
    return effective


def _validated_results(results, names):
    if isinstance(results, (str, bytes)) or not isinstance(results, Sequence):
        raise FabricReportError(
            f"results must be a list of {{src, dst, test, stdout, rc}}, got {type(results).__name__}"
        )
    seen = set()
    validated = []
    for entry in results:
        if not isinstance(entry, Mapping):
            raise FabricReportError(
                f"every result must be a mapping with src, dst, test, stdout, rc; got {entry!r}"
            )
        src, dst, test = entry.get("src"), entry.get("dst"), entry.get("test")
        if test not in TESTS:
            raise FabricReportError(f"result test must be one of {', '.join(TESTS)}, got {test!r}")
        for role, host in (("src", src), ("dst", dst)):
            if host not in names:
                raise FabricReportError(f"{test} result {role} {host!r} is not one of the hosts")
        if src == dst:
            raise FabricReportError(f"{test} result measures {src} against itself")
        if (test, src, dst) in seen:
            raise FabricReportError(f"{test} {src}->{dst} appears more than once in the results")
        seen.add((test, src, dst))
        rc = entry.get("rc")
        if rc is not None and (isinstance(rc, bool) or not re.fullmatch(r"-?\d+", str(rc).strip())):
            raise FabricReportError(f"{test} {src}->{dst} rc must be an integer, got {rc!r}")
        validated.append(entry)
    return validated


def _last_line(text):
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _measure(entry):
    """The parsed measurement of one result, or {"error": message}."""
    test = entry["test"]
    stdout = entry.get("stdout")
    rc = None if entry.get("rc") is None else int(str(entry["rc"]).strip())
    try:
        parsed = PARSERS[test]("" if stdout is None else stdout)
    except FabricReportError as exc:
        message = str(exc)
        if rc not in (None, 0):
            message = f"exited with rc {rc}: {message}"
        stderr_tail = _last_line(entry.get("stderr"))
        if stderr_tail:
            message = f"{message} (stderr: {stderr_tail!r})"
        return {"error": message}
    # ping exits 1 when replies are lost; the loss checks report that more precisely.
    if rc not in (None, 0) and test != "ping":
        return {"error": f"exited with rc {rc} although it printed a result"}
    return parsed


def _summary_values(test, cells):
    """(avg values, p99 values, extras) of the successfully parsed cells of one test."""
    if test == "ping":
        return (
            [cell["rtt_avg"] for cell in cells if cell["rtt_avg"] is not None],
            [],
            {"loss_pct_max": max((cell["loss_pct"] for cell in cells), default=None)},
        )
    if test == "iperf3":
        retransmits = [cell["retransmits"] for cell in cells if cell["retransmits"] is not None]
        return (
            [cell["received_gbps"] for cell in cells],
            [],
            {"retransmits_total": sum(retransmits) if retransmits else None},
        )
    if test == "ib_write_bw":
        return [cell["bw_avg_gbps"] for cell in cells], [], {}
    averages = [cell["t_avg"] if cell["t_avg"] is not None else cell["t_typical"] for cell in cells]
    p99s = [cell["p99"] for cell in cells if cell["p99"] is not None]
    return [value for value in averages if value is not None], p99s, {}


_UNITS = {"ping": "ms", "iperf3": "Gbit/s", "ib_write_bw": "Gbit/s"}


def _summarise(test, matrix, names):
    expected = len(names) * (len(names) - 1)
    cells = [cell for row in matrix.values() for cell in row.values()]
    good = [cell for cell in cells if "error" not in cell]
    averages, p99s, extras = _summary_values(test, good)
    summary = {
        "title": TEST_TITLES[test],
        "unit": _UNITS.get(test, "us"),
        "expected": expected,
        "measured": len(good),
        "failed": len(cells) - len(good),
        "missing": expected - len(cells),
        "avg_min": min(averages, default=None),
        "avg_max": max(averages, default=None),
        "p99_min": min(p99s, default=None),
        "p99_max": max(p99s, default=None),
    }
    summary.update(extras)
    return summary


def _fmt(value):
    return f"{value:g}"


def _cell_violations(test, src, dst, cell, limits):
    where = f"{test} {src}->{dst}"
    if "error" in cell:
        return [f"{where}: measurement failed: {cell['error']}"]
    found = []
    if test == "ping":
        if cell["mtu_exceeded"]:
            mtu = f"mtu={cell['reported_mtu']}" if cell["reported_mtu"] is not None else "no MTU reported"
            found.append(f"{where}: packets of the tested size do not fit the path MTU ({mtu})")
        elif limits["max_ping_loss_pct"] is not None and cell["loss_pct"] > limits["max_ping_loss_pct"]:
            found.append(
                f"{where}: packet loss {_fmt(cell['loss_pct'])}% exceeds the limit of "
                f"{_fmt(limits['max_ping_loss_pct'])}%"
            )
        rtt_limit = limits["max_ping_rtt_ms"]
        if rtt_limit is not None and cell["rtt_avg"] is not None and cell["rtt_avg"] > rtt_limit:
            found.append(
                f"{where}: average RTT {cell['rtt_avg']:.3f} ms exceeds the limit of {_fmt(rtt_limit)} ms"
            )
    elif test == "iperf3":
        floor = limits["min_tcp_gbps"]
        if floor is not None and cell["received_gbps"] < floor:
            found.append(
                f"{where}: TCP throughput {cell['received_gbps']:.2f} Gbit/s "
                f"is below the minimum of {_fmt(floor)} Gbit/s"
            )
    elif test == "ib_write_bw":
        floor = limits["min_rdma_gbps"]
        if floor is not None and cell["bw_avg_gbps"] < floor:
            found.append(
                f"{where}: RDMA bandwidth {cell['bw_avg_gbps']:.2f} Gbit/s "
                f"is below the minimum of {_fmt(floor)} Gbit/s"
            )
    else:
        ceiling = limits["max_lat_p99_us"][test]
        if ceiling is not None:
            if cell["p99"] is None:
                found.append(
                    f"{where}: this perftest does not report a p99 latency, so max_lat_p99_us cannot be checked"
                )
            elif cell["p99"] > ceiling:
                found.append(
                    f"{where}: p99 latency {cell['p99']:.2f} us exceeds the limit of {_fmt(ceiling)} us"
                )
    return found


def build_report(hosts, results, counters_before=None, counters_after=None, thresholds=None, metadata=None):
    """Parse every measurement, check the thresholds and assemble a JSON-serialisable report.

    ``results``: list of ``{src, dst, test, stdout, rc}`` (``stderr`` optional), ``test`` one
    of TESTS. A test that appears in the results must cover every directed pair; a test that
    does not appear is not part of the report. Counters (host -> {name: value}) are not
    checked when both readings are None. ``metadata`` (device, gid, size, iters, ...) is kept
    for the rendered header.
    """
    names = _validated_hosts(hosts)
    limits = _normalise_thresholds(thresholds)
    entries = _validated_results(results, names)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        raise FabricReportError(f"metadata must be a mapping, got {type(metadata).__name__}")

    present = [test for test in TESTS if any(entry["test"] == test for entry in entries)]
    matrices = {test: {src: {} for src in names} for test in present}
    for entry in entries:
        matrices[entry["test"]][entry["src"]][entry["dst"]] = _measure(entry)

    violations = []
    for test in present:
        for src in names:
            for dst in names:
                if src == dst:
                    continue
                cell = matrices[test][src].get(dst)
                if cell is None:
                    violations.append(f"{test} {src}->{dst}: not measured")
                else:
                    violations.extend(_cell_violations(test, src, dst, cell, limits))

    counters = {"collected": False, "before": {}, "after": {}, "increases": {}, "problems": []}
    if counters_before is not None or counters_after is not None:
        before, after = ({} if reading is None else reading for reading in (counters_before, counters_after))
        _require_counter_readings(before, after)
        # Readings of hosts outside the mesh (the controller, a spare node) are not judged.
        before = {host: values for host, values in before.items() if host in names}
        after = {host: values for host, values in after.items() if host in names}
        compared = counter_increases(before, after, hosts=names)
        counters = {
            "collected": True,
            "before": {host: dict(values) for host, values in before.items() if isinstance(values, Mapping)},
            "after": {host: dict(values) for host, values in after.items() if isinstance(values, Mapping)},
            "increases": compared["increases"],
            "problems": compared["problems"],
        }
        violations.extend(compared["problems"])
        allowed = limits["max_counter_increase"]
        if allowed is not None:
            for host, deltas in compared["increases"].items():
                for name, delta in deltas.items():
                    if delta > allowed:
                        violations.append(
                            f"{host}: error counter {name} rose by {delta} during the run (limit {_fmt(allowed)})"
                        )

    return {
        "hosts": names,
        "rounds": pair_rounds(names),
        "metadata": dict(metadata),
        "thresholds": limits,
        "tests": present,
        "matrices": matrices,
        "summaries": {test: _summarise(test, matrices[test], names) for test in present},
        "counters": counters,
        "violations": violations,
        "passed": not violations,
    }


def _md(text):
    """Keep a value from breaking a Markdown table row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cell_text(test, cell):
    if cell is None:
        return "not run"
    if "error" in cell:
        return "FAILED"
    if test == "ping":
        if cell["mtu_exceeded"]:
            return "MTU exceeded"
        if cell["rtt_avg"] is None:
            return f"no reply ({_fmt(cell['loss_pct'])}% loss)"
        text = f"{cell['rtt_avg']:.3f} ms"
        return text if cell["loss_pct"] == 0 else f"{text} loss={_fmt(round(cell['loss_pct'], 2))}%"
    if test == "iperf3":
        return f"{cell['received_gbps']:.1f} Gbit/s"
    if test == "ib_write_bw":
        return f"{cell['bw_avg_gbps']:.2f} Gbit/s"
    average = cell["t_avg"] if cell["t_avg"] is not None else cell["t_typical"]
    text = f"{average:.2f}us"
    return text if cell["p99"] is None else f"{text} p99={cell['p99']:.2f}"


def _table(header, rows, align=None):
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(_md(item) for item in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_md(item) for item in row) + " |" for row in rows]
    return lines


def _header_line(report):
    metadata = dict(report.get("metadata") or {})
    parts = []
    for key in ("device", "gid", "size", "iters"):
        if metadata.get(key) is not None:
            value = metadata.pop(key)
            parts.append(f"{key}={value}B" if key == "size" and isinstance(value, int) else f"{key}={value}")
        else:
            metadata.pop(key, None)
    parts += [f"{key}={value}" for key, value in metadata.items() if value is not None]
    if not any(part.startswith("tests=") for part in parts):
        parts.append("tests=" + " ".join(report.get("tests") or []))
    return " ".join(parts)


def _range(low, high, unit, digits):
    if low is None:
        return "-"
    return f"{low:.{digits}f}-{high:.{digits}f} {unit}"


_RANGE_DIGITS = {"ping": 3, "iperf3": 1, "ib_write_bw": 2}


def _summary_rows(report):
    rows = []
    for test in report["tests"]:
        summary = report["summaries"][test]
        digits = _RANGE_DIGITS.get(test, 2)
        notes = []
        if test == "ping" and summary.get("loss_pct_max") is not None:
            notes.append(f"max loss {_fmt(round(summary['loss_pct_max'], 2))}%")
        if test == "iperf3" and summary.get("retransmits_total") is not None:
            notes.append(f"{summary['retransmits_total']} retransmits")
        if summary["failed"]:
            notes.append(f"{summary['failed']} failed")
        if summary["missing"]:
            notes.append(f"{summary['missing']} not run")
        rows.append([
            summary["title"],
            f"{summary['measured']}/{summary['expected']}",
            _range(summary["avg_min"], summary["avg_max"], summary["unit"], digits),
            _range(summary["p99_min"], summary["p99_max"], summary["unit"], digits),
            "; ".join(notes),
        ])
    return rows


def _counter_lines(report):
    counters = report.get("counters") or {}
    if not counters.get("collected"):
        return ["Error counters were not collected."]
    lines = []
    for host in report["hosts"]:
        before = counters["before"].get(host, {})
        after = counters["after"].get(host, {})
        names = sorted(set(before) | set(after))
        lines += ["", f"### {host}", ""]
        if not names:
            lines.append("No counters read.")
            continue
        rows = []
        for name in names:
            old, new = _counter_value(before.get(name)), _counter_value(after.get(name))
            increase = new - old if old is not None and new is not None else "-"
            rows.append([name, before.get(name, "-"), after.get(name, "-"), increase])
        lines += _table(["Counter", "Before", "After", "Increase"], rows, ["---", "---:", "---:", "---:"])
    return lines


def render_markdown(report):
    """Render a build_report() result as Markdown: matrices, summary, counters, violations."""
    required = ("hosts", "tests", "matrices", "summaries", "counters", "violations")
    if not isinstance(report, Mapping) or any(key not in report for key in required):
        raise FabricReportError(
            f"render_markdown needs a build_report() result with keys {', '.join(required)}"
        )
    names = list(report["hosts"])
    violations = list(report["violations"])
    plural = "" if len(violations) == 1 else "s"
    verdict = f"FAIL ({len(violations)} violation{plural})" if violations else "PASS"
    lines = ["# Fabric validation report", "", f"`{_header_line(report)}`", "", f"Result: **{verdict}**"]
    for test in report["tests"]:
        matrix = report["matrices"][test]
        rows = [
            [src] + [
                "self" if src == dst else _cell_text(test, matrix.get(src, {}).get(dst)) for dst in names
            ]
            for src in names
        ]
        lines += ["", f"## {TEST_TITLES[test]} ({test})", ""]
        lines += _table(["FROM\\TO"] + names, rows)
    lines += ["", "## Summary", ""]
    lines += _table(["Test", "Measured", "Avg range", "p99 range", "Notes"], _summary_rows(report),
                    ["---", "---:", "---:", "---:", "---"])
    lines += ["", "## Error counters", ""]
    lines += _counter_lines(report)
    lines += ["", "## Violations", ""]
    lines += [f"- {_md(violation)}" for violation in violations] if violations else ["none"]
    return "\n".join(lines) + "\n"
