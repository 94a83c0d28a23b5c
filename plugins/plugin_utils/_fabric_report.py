# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fabric report itself: schedule the full mesh of pair tests, read the NIC error counters,
check thresholds and assemble the report from the parsed results (Markdown:
_fabric_report_markdown; parsers: _fabric_report_parsers).

Standard library only, so the logic is unit-tested without Ansible.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_parsers import (
    LATENCY_TESTS,
    PARSERS,
    TEST_TITLES,
    TESTS,
    FabricReportError,
)

THRESHOLD_DEFAULTS = {
    "max_ping_rtt_ms": None,
    "max_ping_loss_pct": 0,
    "min_tcp_gbps": None,
    "max_lat_p99_us": None,
    "min_rdma_gbps": None,
    "max_counter_increase": 0,
}


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


# The bandwidth tests: what the message calls the figure, the cell's field and
# the threshold that is its floor.
_BANDWIDTH_FLOORS = {
    "iperf3": ("TCP throughput", "received_gbps", "min_tcp_gbps"),
    "ib_write_bw": ("RDMA bandwidth", "bw_avg_gbps", "min_rdma_gbps"),
}


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
    elif test in _BANDWIDTH_FLOORS:
        label, measured, limit = _BANDWIDTH_FLOORS[test]
        floor = limits[limit]
        if floor is not None and cell[measured] < floor:
            found.append(
                f"{where}: {label} {cell[measured]:.2f} Gbit/s "
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
