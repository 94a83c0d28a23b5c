# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fabric report as Markdown: FROM\\TO matrices per test, a summary and the counters.

Standard library only, so the logic is unit-tested without Ansible.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report import (
    _counter_value,
    _fmt,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_parsers import (
    TEST_TITLES,
    FabricReportError,
)


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
