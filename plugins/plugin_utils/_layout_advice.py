# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which layout serves this cluster's own traffic best (playbooks/advise.yml).

The traffic is what Prometheus recorded: the requests in flight on every
replica head over a window (running and waiting, summed over the heads, one
sample per step), and the window's prompt and output lengths and prefix-cache
hit rate. Each layout's curve is the newest field-profile report of
playbooks/bench.yml in that layout: per concurrency, TTFT cold and on a
prefix-cache hit, decode tok/s per stream and aggregate tok/s. The curves are
weighed by the traffic, and the layout that answers the traffic's mean request
soonest is recommended, with the reasons and the settings that switch to it.

Used by the layout_advice action. Standard library only (and the collection's
own _bench_compare and _bench), so it runs without Ansible and is unit-tested so.
"""

from __future__ import annotations

import json
import math
import os
import re
from datetime import UTC, datetime

from ansible_collections.dgxspark.cluster.plugins.module_utils._bench import BenchError, markdown_table
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._bench_compare import (
    REPORT_NAME,
    load_report,
    write_report_files,
)

LAYOUT = re.compile(r"^tp(?P<tensor_parallel>[1-9]\d*)x(?P<replicas>[1-9]\d*)$")
DURATION = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[smhdw]?)\s*$")
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# The totals playbooks/advise.yml asks Prometheus for, each the increase over the window.
TOTALS = ("requests", "prompt_tokens_sum", "prompt_tokens_count", "generation_tokens_sum",
          "generation_tokens_count", "prefix_cache_hits", "prefix_cache_queries")
CURVE_FIELDS = ("ttft_cold", "ttft_hit", "decode", "aggregate")
# Layouts whose mean request is answered within this fraction of each other are
# called even: the current one is kept rather than restarting every rank for noise.
EVEN_MARGIN = 0.05


class AdviceError(BenchError):
    """The traffic or the reports cannot be weighed; the message says why and what to do."""


def duration_seconds(value, name):
    """Seconds from a number or a Prometheus-style duration (V(45s), V(30m), V(12h), V(14d), V(2w))."""
    if isinstance(value, bool):
        raise AdviceError("%s is %r; expected seconds or a duration such as 14d, 12h or 30m" % (name, value))
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = DURATION.match(str(value))
        if not match:
            raise AdviceError("%s is %r; expected seconds or a duration such as 14d, 12h or 30m" % (name, value))
        seconds = float(match["number"]) * UNIT_SECONDS[match["unit"]]
    if not math.isfinite(seconds) or seconds <= 0:
        raise AdviceError("%s is %r; expected a duration above zero" % (name, value))
    return seconds


def query_step(window, scrape_interval):
    """The step of the range query: the scrape interval, or coarser where the window
    would hold more than Prometheus's 11,000 points a series."""
    return float(max(scrape_interval, math.ceil(window / 10000.0)))


def prometheus_data(response, query):
    """The C(data.result) of a Prometheus HTTP API answer (the JSON uri returned), or an
    AdviceError naming the query and Prometheus's own error."""
    if not isinstance(response, dict) or response.get("status") != "success":
        error = response.get("error") if isinstance(response, dict) else None
        raise AdviceError("Prometheus did not answer %s: %s" % (query, error or "no answer (is prometheus.service running?)"))
    return response["data"]["result"]


def range_values(response, query):
    """[(time, value)] of the one series a C(sum(...)) range query returns; none when
    nothing was recorded in the window."""
    result = prometheus_data(response, query)
    if not result:
        return []
    return [(float(t), float(v)) for t, v in result[0]["values"] if v not in ("NaN", "+Inf", "-Inf")]


def instant_value(response, query):
    """The value of the one series a C(sum(...)) instant query returns; None when nothing
    was recorded."""
    result = prometheus_data(response, query)
    if not result:
        return None
    value = float(result[0]["value"][1])
    return value if math.isfinite(value) else None


def _ratio(numerator, denominator):
    return numerator / denominator if numerator is not None and denominator else None


def traffic_summary(samples, step, totals):
    """The recorded traffic: how long the window holds samples, the share of the busy
    time (a request or more in flight) at each number in flight, and the window's
    requests, mean prompt and output tokens and prefix-cache hit rate."""
    busy = {}
    for _time, value in samples:
        in_flight = round(value)
        if in_flight >= 1:
            busy[in_flight] = busy.get(in_flight, 0) + 1
    busy_samples = sum(busy.values())
    ordered = sorted(busy)
    p95 = max_in_flight = None
    if ordered:
        max_in_flight = ordered[-1]
        seen = 0
        for in_flight in ordered:
            seen += busy[in_flight]
            if seen >= 0.95 * busy_samples:
                p95 = in_flight
                break
    return {
        "samples": len(samples),
        "step": step,
        "seconds": len(samples) * step,
        "busy_seconds": busy_samples * step,
        "busy_fraction": _ratio(busy_samples, len(samples)),
        "in_flight": {in_flight: busy[in_flight] / busy_samples for in_flight in ordered},
        "p95_in_flight": p95,
        "max_in_flight": max_in_flight,
        "requests": totals.get("requests"),
        "prompt_tokens_mean": _ratio(totals.get("prompt_tokens_sum"), totals.get("prompt_tokens_count")),
        "output_tokens_mean": _ratio(totals.get("generation_tokens_sum"), totals.get("generation_tokens_count")),
        "prefix_cache_hit_rate": _ratio(totals.get("prefix_cache_hits"), totals.get("prefix_cache_queries")),
    }


def layout_curve(report):
    """{concurrency: {ttft_cold, ttft_hit, decode, aggregate}} of a field-profile report:
    the cold waves give TTFT cold, decode p50 per stream and the aggregate; the shared
    waves TTFT on a prefix-cache hit (TTFT cold where none was measured)."""
    points = {}
    for wave in report["summary"]["waves"]:
        if wave.get("kind") not in ("cold", "shared") or wave.get("concurrency") is None:
            continue
        point = points.setdefault(int(wave["concurrency"]), {})
        if wave["kind"] == "cold":
            point.update(ttft_cold=wave.get("ttft_p50"), decode=wave.get("decode_p50"), aggregate=wave.get("aggregate_tps"))
        else:
            point["ttft_hit"] = wave.get("ttft_p50")
    curve = {}
    for concurrency, point in points.items():
        if all(point.get(field) for field in ("ttft_cold", "decode", "aggregate")):
            curve[concurrency] = dict(point, ttft_hit=point.get("ttft_hit") or point["ttft_cold"])
    if not curve:
        raise AdviceError("%s has no cold wave with TTFT, decode and aggregate rates to weigh; run playbooks/bench.yml "
                          "with bench_profile=field in that layout" % report["meta"]["name"])
    return curve


def newest_field_reports(report_dir, names, read=load_report):
    """{layout: report} of the newest field-profile report of each layout among the file
    names of report_dir (a community-profile run measures other things and is passed over)."""
    chosen = {}
    for name in sorted(names, reverse=True):
        match = REPORT_NAME.match(name)
        if not match or match["layout"] in chosen:
            continue
        report = read(os.path.join(report_dir, name))
        if report["config"]["profile"] == "field":
            chosen[match["layout"]] = report
    return chosen


def point_at(curve, in_flight):
    """The curve at a number in flight: measured, linear between the two measured around
    it, or the highest measured past the curve's end (then flagged True)."""
    measured = sorted(curve)
    if in_flight in curve:
        return curve[in_flight], False
    if in_flight < measured[0]:
        return curve[measured[0]], False
    if in_flight > measured[-1]:
        return curve[measured[-1]], True
    low = max(c for c in measured if c < in_flight)
    high = min(c for c in measured if c > in_flight)
    share = (in_flight - low) / (high - low)
    return {field: curve[low][field] + share * (curve[high][field] - curve[low][field]) for field in CURVE_FIELDS}, False


def expectation(curve, traffic):
    """What the traffic would see on a layout. Per request (TTFT, decode per stream, the
    mean request's answer time): weighed by streams, each number in flight by its busy
    share times the streams it holds, since every stream in flight lives it; the
    aggregate by busy share alone. TTFT mixes hit and cold by the prefix-cache hit rate."""
    hit_rate = traffic["prefix_cache_hit_rate"] or 0.0
    stream_weights = {c: share * c for c, share in traffic["in_flight"].items()}
    total = sum(stream_weights.values())
    ttft = decode = aggregate = 0.0
    beyond = []
    for in_flight, share in traffic["in_flight"].items():
        point, past_end = point_at(curve, in_flight)
        if past_end:
            beyond.append(in_flight)
        weight = stream_weights[in_flight] / total
        ttft += weight * (hit_rate * point["ttft_hit"] + (1 - hit_rate) * point["ttft_cold"])
        decode += weight * point["decode"]
        aggregate += share * point["aggregate"]
    output = traffic["output_tokens_mean"]
    return {
        "ttft_s": ttft,
        "decode_tps_per_stream": decode,
        "aggregate_tps": aggregate,
        "mean_request_s": ttft + output / decode if output else ttft,
        "measured_up_to": max(curve),
        "beyond_measured": sorted(beyond),
    }


def layout_settings(layout):
    """The engine settings of a layout name (tp4x1: one lane of four ranks)."""
    match = LAYOUT.match(layout)
    if not match:
        raise AdviceError("%r is not a layout name; expected tpTxR (tensor parallel T, R replicas)" % layout)
    return {"engine_service_tensor_parallel_size": int(match["tensor_parallel"]),
            "engine_service_replicas": int(match["replicas"])}


def _percent(value):
    return "%.1f%%" % (100 * value)


def _seconds(value):
    return "%.2f s" % value if value < 10 else "%.0f s" % value


def _duration(seconds):
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return "%.1f %s" % (seconds / size, unit)
    return "%.0f s" % seconds


def advise(traffic, reports, current, min_history, min_requests):
    """The advice as data: the traffic, each measured layout's expectation, and either a
    recommendation (with its reasons and the settings and command that switch to it) or
    why the traffic and the reports cannot decide yet."""
    curves = {layout: layout_curve(report) for layout, report in sorted(reports.items())}
    undecided = []
    if traffic["seconds"] < min_history:
        undecided.append("the history is too short to decide: the window holds %s of samples, advise_min_history "
                         "asks for %s; advise again later, or over a longer advise_window"
                         % (_duration(traffic["seconds"]), _duration(min_history)))
    if (traffic["requests"] or 0) < min_requests:
        undecided.append("the window holds %d requests, advise_min_requests asks for %d"
                         % (traffic["requests"] or 0, min_requests))
    if not traffic["in_flight"]:
        undecided.append("no request was in flight at any sample of the window")
    if len(curves) < 2:
        other = "the other layout" if curves else "each layout"
        undecided.append("%s measured in %s; run playbooks/bench.yml in %s (switch with site.yml and the settings "
                         "of the layout) so that the two can be weighed" % (
                             ", ".join(curves) or "no layout is", "bench_report_dir", other))
    expectations = {layout: expectation(curve, traffic) for layout, curve in curves.items()} if traffic["in_flight"] else {}
    advice = {"traffic": traffic, "current": current, "layouts": {}, "decided": not undecided, "undecided": undecided,
              "recommendation": None, "switch": False, "settings": None, "command": None, "reasons": []}
    for layout, expected in expectations.items():
        advice["layouts"][layout] = dict(expected, report=reports[layout]["meta"]["name"])
    if undecided:
        return advice

    ranked = sorted(expectations, key=lambda layout: expectations[layout]["mean_request_s"])
    best = ranked[0]
    best_time = expectations[best]["mean_request_s"]
    keep = current in expectations and expectations[current]["mean_request_s"] <= best_time * (1 + EVEN_MARGIN)
    chosen = current if keep else best
    shares = ", ".join("%d: %s" % (c, _percent(share)) for c, share in traffic["in_flight"].items())
    reasons = [
        "Requests in flight while busy (%s of the %s recorded): %s; 95%% of the busy time at %d or fewer, at most %d."
        % (_percent(traffic["busy_fraction"]), _duration(traffic["seconds"]), shares, traffic["p95_in_flight"],
           traffic["max_in_flight"]),
        "Mean prompt %s tokens, mean output %s tokens, prefix-cache hit rate %s, %d requests."
        % ("%.0f" % traffic["prompt_tokens_mean"] if traffic["prompt_tokens_mean"] is not None else "unknown",
           "%.0f" % traffic["output_tokens_mean"] if traffic["output_tokens_mean"] is not None else "unknown",
           _percent(traffic["prefix_cache_hit_rate"]) if traffic["prefix_cache_hit_rate"] is not None else "unknown",
           traffic["requests"] or 0),
    ]
    for layout in ranked:
        expected = expectations[layout]
        reasons.append("%s (%s): TTFT %s, %.1f tok/s per stream, the mean request answered in %s, %.1f tok/s in all."
                       % (layout, reports[layout]["meta"]["name"], _seconds(expected["ttft_s"]),
                          expected["decode_tps_per_stream"], _seconds(expected["mean_request_s"]), expected["aggregate_tps"]))
        if expected["beyond_measured"]:
            reasons.append("%s was measured up to %d in flight; the traffic reached %s, weighed at %d's numbers."
                           % (layout, expected["measured_up_to"], ", ".join(map(str, expected["beyond_measured"])),
                              expected["measured_up_to"]))
    runner_up = ranked[1]
    if keep and chosen != best:
        reasons.append("%s answers the mean request within %d%% of %s: the current layout is kept rather than "
                       "restarting every rank." % (current, 100 * EVEN_MARGIN, best))
    else:
        other = expectations[runner_up]["mean_request_s"]
        reasons.append("%s answers the mean request in %s, %s sooner than %s (%s)."
                       % (best, _seconds(best_time), _percent(1 - best_time / other) if other else "n/a",
                          runner_up, _seconds(other)))
    settings = layout_settings(chosen)
    advice.update(recommendation=chosen, switch=chosen != current, settings=settings, reasons=reasons)
    if chosen != current:
        advice["command"] = ("set %s in the inventory's group_vars, then: ansible-playbook playbooks/site.yml"
                             % ", ".join("%s: %d" % item for item in settings.items()))
    return advice


def advice_markdown(advice, window):
    """The advice for a person: the verdict first, then the reasons and the table."""
    traffic = advice["traffic"]
    lines = ["# Layout advice", "", "Window: %s to %s (%s)." % (window["start"], window["end"], _duration(window["seconds"])), ""]
    if advice["decided"]:
        if advice["switch"]:
            lines += ["**Switch to %s** (now %s): %s" % (advice["recommendation"], advice["current"], advice["command"]), ""]
        else:
            lines += ["**Keep %s**: it serves this traffic best." % advice["recommendation"], ""]
        lines += ["- " + reason for reason in advice["reasons"]] + [""]
    else:
        lines += ["**No recommendation yet** (now %s):" % advice["current"], ""]
        lines += ["- " + reason for reason in advice["undecided"]] + [""]
    if advice["layouts"]:
        rows = [[layout, expected["report"], _seconds(expected["ttft_s"]), "%.1f" % expected["decode_tps_per_stream"],
                 _seconds(expected["mean_request_s"]), "%.1f" % expected["aggregate_tps"]]
                for layout, expected in advice["layouts"].items()]
        lines += [markdown_table(["Layout", "Bench report", "TTFT", "Decode tok/s per stream", "Mean request",
                                  "Aggregate tok/s"], rows), ""]
    if traffic["in_flight"]:
        lines += [markdown_table(["In flight", "Share of busy time"],
                                 [[c, _percent(share)] for c, share in traffic["in_flight"].items()]), ""]
    return "\n".join(lines)


def advice_files(advice, window):
    """{suffix: bytes} of the report: .md for a person, .json for tools (in-flight keys as text)."""
    data = dict(advice, window=window,
                traffic=dict(advice["traffic"], in_flight={str(c): s for c, s in advice["traffic"]["in_flight"].items()}))
    return {".md": advice_markdown(advice, window).encode(),
            ".json": (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()}


def window_of(end, seconds):
    """The window as the report names it: UTC start and end, and its length."""
    def stamp(epoch):
        return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"start": stamp(end - seconds), "end": stamp(end), "seconds": seconds, "end_epoch": end}


def report_name(end):
    """<time>-advice, the time being the window's end (UTC)."""
    return datetime.fromtimestamp(end, UTC).strftime("%Y%m%dT%H%M%SZ") + "-advice"


def prometheus_window(window, end, scrape_interval):
    """The window a history query covers: C(window) (seconds or a duration) ending at
    C(end) (epoch seconds), with the range query's step and the window as a PromQL range."""
    seconds = duration_seconds(window, "advise_window")
    try:
        end = float(end)
    except (TypeError, ValueError):
        raise AdviceError("advise_end is %r; expected epoch seconds (date +%%s prints them)" % (end,)) from None
    step = query_step(seconds, duration_seconds(scrape_interval, "monitoring_scrape_interval"))
    return {"start": end - seconds, "end": end, "seconds": seconds, "step": step, "range": "%ds" % math.ceil(seconds)}


def _uri_answer(result, query):
    """Prometheus's JSON answer in a uri result (the monitoring role's history entry), or an
    AdviceError naming the query and why there is none."""
    if not isinstance(result, dict):
        raise AdviceError("the history holds no answer for %s; run playbooks/advise.yml, which asks for it" % query)
    answer = result.get("json")
    if not isinstance(answer, dict):
        raise AdviceError("Prometheus did not answer %s: %s (is prometheus.service running on the monitoring host?)"
                          % (query, result.get("msg") or "HTTP %s" % result.get("status")))
    return answer


def history_traffic(history):
    """traffic_summary() of the monitoring role's C(monitoring_history): its window and
    Prometheus's answers as uri returned them."""
    window = history["window"]
    query = history["in_flight"]["item"]["value"]
    samples = range_values(_uri_answer(history["in_flight"], query), query)
    totals = {}
    for result in history["totals"]:
        name, total_query = result["item"]["key"], result["item"]["value"]
        totals[name] = instant_value(_uri_answer(result, total_query), total_query)
    missing = [name for name in TOTALS if name not in totals]
    if missing:
        raise AdviceError("the history lacks the totals %s; the monitoring role's monitoring_history_total_queries "
                          "names them" % ", ".join(missing))
    return traffic_summary(samples, float(window["step"]), totals)


def write_advice(history, report_dir, names, current, min_history, min_requests, dest, check_mode=False):
    """Weigh the history against the newest field report of each layout in report_dir and
    write <dest>/<window end>-advice.md and .json. A file that already holds the advice is
    left alone; in check mode nothing is written. Returns the advice, its Markdown, the
    paths and whether a file changed (or would)."""
    window = window_of(float(history["window"]["end"]), float(history["window"]["seconds"]))
    advice = advise(history_traffic(history), newest_field_reports(report_dir, names), current,
                    duration_seconds(min_history, "advise_min_history"), int(min_requests))
    advice["monitoring_host"] = history.get("host")
    files = advice_files(advice, window)
    prefix = os.path.join(dest, report_name(window["end_epoch"]))
    paths = {"markdown": prefix + ".md", "json": prefix + ".json"}
    contents = {paths["markdown"]: files[".md"], paths["json"]: files[".json"]}
    return {"advice": advice, "markdown": files[".md"].decode(), "paths": paths,
            "changed": write_report_files(dest, contents, check_mode)}
