# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark arithmetic of playbooks/bench.yml: pure functions, no I/O.

The client on the bench host (_bench_client.py) records raw per-request
timings, the selected lines of every replica head's /metrics before and after
each wave, and every node's power and NIC counter samples. Everything here
turns those raw records into the report's numbers, so the report can always
be recomputed from its own JSON (and the tests do).
"""

from __future__ import annotations

import math
import re

# The counters read around every wave (vLLM v1 names; counters end in _total).
METRIC_NAMES = (
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:num_preemptions",
    "vllm:request_success",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
)
NOT_MEASURED_SPEC = "not measured: no speculative decoding"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class BenchError(Exception):
    pass


def percentile(values, fraction):
    """Linear-interpolated percentile (numpy's default) of values; None when empty."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def parse_prometheus(lines):
    """Prometheus text lines -> list of (name, labels dict, value); comments and
    unparsable lines are skipped."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    samples = []
    for line in lines:
        match = _SAMPLE.match(line)
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(4))
        except ValueError:
            continue
        samples.append((match.group(1), dict(_LABEL.findall(match.group(3) or "")), value))
    return samples


def counter_total(samples, name, exclude=None):
    """Sum of the counter `name` (with or without its _total suffix) over all
    label sets, leaving out those whose labels match exclude {label: values}."""
    names = {name, name + "_total"}
    total = None
    for sample_name, labels, value in samples:
        if sample_name not in names:
            continue
        if exclude and any(labels.get(label) in values for label, values in exclude.items()):
            continue
        total = (total or 0.0) + value
    return total


def metric_deltas(before, after):
    """Counter increases between two /metrics readings of one head:
    {short name: delta or None when the engine does not export it}."""
    first, second = parse_prometheus(before), parse_prometheus(after)
    deltas = {}
    for name in METRIC_NAMES:
        exclude = {"finished_reason": ("abort", "error")} if name == "vllm:request_success" else None
        a, b = counter_total(first, name, exclude), counter_total(second, name, exclude)
        deltas[name.split(":", 1)[1]] = None if a is None or b is None else b - a
    return deltas


def sum_deltas(per_head):
    """Deltas of several replica heads added up; None stays None only when no head has it."""
    total = {}
    for deltas in per_head:
        for name, value in deltas.items():
            if value is None:
                total.setdefault(name, None)
            else:
                total[name] = (total.get(name) or 0.0) + value
    return total


def spec_decode_stats(deltas):
    """Acceptance rate = accepted / draft tokens; mean accepted length =
    1 + accepted / drafts (the bonus token included). None when nothing was drafted."""
    drafts = deltas.get("spec_decode_num_drafts")
    draft_tokens = deltas.get("spec_decode_num_draft_tokens")
    accepted = deltas.get("spec_decode_num_accepted_tokens")
    if not drafts or not draft_tokens or accepted is None:
        return {"acceptance_rate": None, "mean_accepted_length": None}
    return {"acceptance_rate": accepted / draft_tokens, "mean_accepted_length": 1 + accepted / drafts}


def prefix_cache_hit_rate(deltas):
    queries = deltas.get("prefix_cache_queries")
    hits = deltas.get("prefix_cache_hits")
    if not queries or hits is None:
        return None
    return hits / queries


def decode_rate(record):
    """Per-request decode tok/s: the tokens after the first over the time after it."""
    seconds = record.get("decode_seconds")
    tokens = record.get("completion_tokens") or 0
    if not record.get("ok") or not seconds or seconds <= 0 or tokens < 2:
        return None
    return (tokens - 1) / seconds


def request_stats(records, wall):
    """Success count, TTFT p50/p95, per-request decode p50 and aggregate output
    tok/s (successful requests' tokens over the wave's wall time) of records."""
    good = [r for r in records if r.get("ok")]
    ttfts = [r["ttft"] for r in good]
    tokens = sum(r.get("completion_tokens") or 0 for r in good)
    prompt_tokens = [r.get("prompt_tokens") for r in good if r.get("prompt_tokens")]
    return {
        "success": len(good),
        "total": len(records),
        "ttft_p50": percentile(ttfts, 0.5),
        "ttft_p95": percentile(ttfts, 0.95),
        "decode_p50": percentile([decode_rate(r) for r in good], 0.5),
        "aggregate_tps": tokens / wall if wall and wall > 0 else None,
        "output_tokens": tokens,
        "prompt_tokens": max(prompt_tokens) if prompt_tokens else None,
        "errors": sorted({r["error"] for r in records if r.get("error")}),
    }


def _host_power(samples, started, finished):
    inside = [s for s in samples if started <= s["t"] <= finished and s.get("power")]
    if not inside:
        # A wave shorter than the sampling interval: the nearest sample.
        candidates = [s for s in samples if s.get("power")]
        if not candidates:
            return None, 0
        middle = (started + finished) / 2
        inside = [min(candidates, key=lambda s: abs(s["t"] - middle))]
    return sum(sum(s["power"]) for s in inside) / len(inside), len(inside)


def wave_power(samples_by_host, started, finished):
    """GPU power during a wave: each node's mean of its samples' summed
    power.draw, added over nodes. None when no node reported power."""
    total, per_host = None, {}
    for host, samples in sorted(samples_by_host.items()):
        watts, count = _host_power(samples, started, finished)
        per_host[host] = {"watts": watts, "samples": count}
        if watts is not None:
            total = (total or 0.0) + watts
    return total, per_host


def wave_nic_errors(samples_by_host, started, finished):
    """NIC error counter increases across a wave: per node, the last sample
    read before it started against the first read after it finished."""
    increases = {}
    for host, samples in sorted(samples_by_host.items()):
        if not samples:
            continue
        before = [s for s in samples if s["t"] <= started] or samples[:1]
        after = [s for s in samples if s["t"] >= finished] or samples[-1:]
        first, last = before[-1]["counters"], after[0]["counters"]
        for name, value in last.items():
            if name in first and value - first[name]:
                increases["%s:%s" % (host, name)] = value - first[name]
    return increases


def parse_samples(text):
    """The sampler's JSON lines -> list of samples (a torn last line is skipped)."""
    import json

    samples = []
    for line in text.splitlines():
        try:
            samples.append(json.loads(line))
        except ValueError:
            continue
    return samples


def summarize_wave(wave, samples_by_host=None):
    """Everything the tables show about one wave, from its raw record."""
    wall = wave["finished"] - wave["started"]
    deltas = sum_deltas(metric_deltas("\n".join(wave["metrics_before"][url].get("lines", [])),
                                      "\n".join(wave["metrics_after"][url].get("lines", [])))
                        for url in sorted(wave["metrics_after"]))
    records = wave["requests"]
    summary = {"label": wave.get("label", wave["kind"]), "kind": wave["kind"], "concurrency": wave["concurrency"],
               "wall": wall, "metrics": deltas}
    summary.update(request_stats(records, wall))
    if wave["kind"] == "context":
        summary["cold"] = request_stats([r for r in records if r.get("phase") == "cold"], None)
        summary["cache_hit"] = request_stats([r for r in records if r.get("phase") == "cache_hit"], None)
    if wave.get("prime"):
        summary["prime"] = request_stats(wave["prime"], None)
    summary.update(spec_decode_stats(deltas))
    summary["prefix_cache_hit_rate"] = prefix_cache_hit_rate(deltas)
    summary["preemptions"] = deltas.get("num_preemptions")
    ours = summary["success"] + len(wave.get("prime") or [])
    completed = deltas.get("request_success")
    # Requests the engine completed that this wave did not send: the head
    # watchdog's health probe (one short completion per interval) or another user.
    summary["other_requests"] = None if completed is None else max(0, int(completed) - ours)
    summary["power_watts"], summary["power_by_host"] = wave_power(samples_by_host or {}, wave["started"], wave["finished"])
    summary["nic_errors"] = wave_nic_errors(samples_by_host or {}, wave["started"], wave["finished"])
    return summary


def wave_line(wave):
    """The progress line printed as each wave finishes."""
    s = summarize_wave(wave)
    line = "%s C=%d: %d/%d ok, TTFT p50 %s, decode p50 %s, aggregate %s" % (
        s["label"], s["concurrency"], s["success"], s["total"], fmt_seconds(s["ttft_p50"]),
        fmt_rate(s["decode_p50"]), fmt_rate(s["aggregate_tps"]))
    if s["errors"]:
        line += " (failed: %s)" % "; ".join(s["errors"][:2])
    return line


def quality_verdicts(wave, pairs):
    """Each quality answer against its expected pattern (a regular expression
    searched in the completion text)."""
    verdicts = []
    for record in wave["requests"]:
        pair = pairs[record["pair"]]
        ok = bool(record.get("ok")) and re.search(pair["expect"], record.get("text") or "") is not None
        verdicts.append({"prompt": pair["prompt"], "expect": pair["expect"], "answer": record.get("text"),
                         "error": record.get("error"), "ok": ok})
    return verdicts


def fmt_seconds(value):
    return "—" if value is None else "%.3fs" % value


def fmt_rate(value):
    return "—" if value is None else "%.2f tok/s" % value


def fmt_number(value, digits=2):
    return "—" if value is None else "%.*f" % (digits, value)


def fmt_percent(value):
    return "—" if value is None else "%.2f%%" % (100 * value)


def fmt_watts(value):
    return "not measured" if value is None else "%.1f W" % value


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def build_summary(raw):
    """The report's numbers from the raw run: per wave, the quality verdicts,
    whether speculative decoding was measured."""
    samples = {host: parse_samples(text) for host, text in (raw.get("samples") or {}).items()}
    waves = [summarize_wave(wave, samples) for wave in raw["waves"]]
    quality = [quality_verdicts(wave, raw["config"]["quality_pairs"]) for wave in raw["waves"] if wave["kind"] == "quality"]
    verdicts = [v for group in quality for v in group]
    measured = any(w["acceptance_rate"] is not None for w in waves)
    return {"waves": waves, "quality": verdicts, "quality_passed": all(v["ok"] for v in verdicts),
            "spec_decode_measured": measured}


def _acceptance(wave):
    return fmt_percent(wave["acceptance_rate"]) if wave["acceptance_rate"] is not None else "—"


def markdown(raw, summary):
    """The report: what was measured and the tables shaped like the field report's."""
    meta = raw["meta"]
    out = ["# Benchmark %s: %s" % (meta["date"], meta["layout"]), ""]
    out.append(markdown_table(["Item", "Value"], [
        ["Date", meta["date"]], ["Profile", raw["config"]["profile"]], ["Tool", meta["tool"]],
        ["Layout", meta["layout"]], ["Engine version (/version)", ", ".join(sorted(set(meta["engine_versions"].values())))],
        ["Image", meta["image_ref"]], ["Image ID", meta["image_id"]], ["Model", meta["model"]],
        ["Model revision", meta["model_revision"]], ["Deployed version", meta["deployed_version"]],
        ["Prompt source", meta["prompt_source"]], ["Bench host", meta["bench_host"]],
        ["Output tokens per request", raw["config"]["max_tokens"]]]))
    out += ["", "Engine argv (rank 0): `%s`" % " ".join(meta["engine_argv"]), ""]
    if not summary["spec_decode_measured"]:
        out += ["Speculative decoding: %s." % NOT_MEASURED_SPEC, ""]
    if raw.get("community"):
        out += ["## llama-benchy (community profile)", "",
                "Its JSON is kept raw in the report's JSON (key community); t/s are means over its runs.", "",
                llama_benchy_markdown(raw["community"]), ""]
    waves = summary["waves"]
    contexts = [w for w in waves if w["kind"] == "context"]
    if contexts:
        out += ["## C=1: cold start vs KV cache hit", "",
                "One fresh prompt primes the cache, then the exact same prompt is sent again; effective FFTS is "
                "prompt tokens / TTFT.", ""]
        rows = []
        for wave in contexts:
            for mode, stats in (("Cold prime", wave["cold"]), ("KV cache hit", wave["cache_hit"])):
                ffts = (stats["prompt_tokens"] / stats["ttft_p50"]) if stats["prompt_tokens"] and stats["ttft_p50"] else None
                rows.append([wave["label"], mode, "%d/%d" % (stats["success"], stats["total"]),
                             fmt_seconds(stats["ttft_p50"]), fmt_number(ffts, 0) + " tok/s" if ffts else "—",
                             fmt_rate(stats["decode_p50"])])
        out += [markdown_table(["Context", "Mode", "Success", "TTFT p50", "Prefill / Effective FFTS", "Decode p50"], rows), ""]
    for kind, title in (("cold", "Cold unique-prompt waves"), ("shared", "Shared-prefix KV cache-hit waves")):
        group = [w for w in waves if w["kind"] == kind]
        if not group:
            continue
        out += ["## " + title, ""]
        if kind == "shared":
            out += ["One C=1 request per replica primes the cache with the prompt every request of the wave then sends; "
                    "these rows are not comparable with cold-prompt numbers.", ""]
        out.append(markdown_table(["C", "Success", "TTFT p50 / p95", "Decode p50", "Aggregate TPS", "Acceptance", "Power"],
                                  [[w["concurrency"], "%d/%d" % (w["success"], w["total"]),
                                    "%s / %s" % (fmt_seconds(w["ttft_p50"]), fmt_seconds(w["ttft_p95"])),
                                    fmt_rate(w["decode_p50"]), fmt_number(w["aggregate_tps"]), _acceptance(w),
                                    fmt_watts(w["power_watts"])] for w in group]))
        out.append("")
    out += ["## Engine metrics per wave", "",
            "Deltas of each replica head's /metrics across the wave, summed over replicas. Other requests: completions "
            "the engine finished that the wave did not send (the head watchdog's health probe); they are counted, "
            "not subtracted.", ""]
    out.append(markdown_table(["Wave", "C", "Acceptance", "Mean accepted length", "Prefix-cache hit rate", "Preemptions",
                               "Other requests", "Power", "NIC errors"],
                              [[w["label"], w["concurrency"], _acceptance(w), fmt_number(w["mean_accepted_length"]),
                                fmt_percent(w["prefix_cache_hit_rate"]), fmt_number(w["preemptions"], 0),
                                "—" if w["other_requests"] is None else w["other_requests"], fmt_watts(w["power_watts"]),
                                ", ".join("%s +%d" % item for item in sorted(w["nic_errors"].items())) or "0"]
                               for w in waves]))
    out.append("")
    if summary["quality"]:
        out += ["## Quality gate", "",
                "Prompt/answer pairs at the highest concurrency, temperature 0: %s." % (
                    "passed" if summary["quality_passed"] else "FAILED")]
        out.append("")
        out.append(markdown_table(["Prompt", "Expected", "Answer", "Verdict"],
                                  [[_cell(v["prompt"]), "`%s`" % v["expect"], _cell(v["answer"] or v["error"] or ""),
                                    "ok" if v["ok"] else "WRONG"] for v in summary["quality"]]))
        out.append("")
    return "\n".join(out)


def _cell(text):
    return (text or "").replace("|", "\\|").replace("\n", " ").strip()[:80]


def plot_series(summary, prefix="", dashed=False):
    """(label, [(concurrency, value)], dashed) for the plot: aggregate and
    per-request decode against concurrency, per wave kind."""
    series = []
    for kind in ("cold", "shared"):
        group = sorted((w for w in summary["waves"] if w["kind"] == kind), key=lambda w: w["concurrency"])
        if group:
            series.append((prefix + "%s aggregate" % kind, [(w["concurrency"], w["aggregate_tps"]) for w in group], dashed))
            series.append((prefix + "%s per-req" % kind, [(w["concurrency"], w["decode_p50"]) for w in group], dashed))
    return series


# llama-benchy (the community profile): its command line and its JSON.
def llama_benchy_args(settings):
    """llama-benchy's arguments for settings (the bench_community_* values
    without prefix); the API key is not among them: the wrapper adds it inside
    the process, from a 0600 file."""
    args = ["--base-url", settings["base_url"], "--model", settings["model"],
            "--served-model-name", settings["served_model_name"], "--format", "json",
            "--save-result", settings["result_file"], "--runs", str(settings["runs"]),
            "--latency-mode", settings["latency_mode"]]
    if settings.get("tokenizer"):
        args += ["--tokenizer", settings["tokenizer"]]
    for flag, key in (("--pp", "pp"), ("--tg", "tg"), ("--depth", "depth"), ("--concurrency", "concurrency")):
        values = settings[key]
        if not values:
            raise BenchError("bench_community_%s is empty: it needs at least one value" % key)
        args += [flag] + [str(int(v)) for v in values]
    if settings.get("prefix_caching"):
        args.append("--enable-prefix-caching")
    if settings.get("exact_tg", True):
        args.append("--exact-tg")
    if settings.get("book_url"):
        args += ["--book-url", settings["book_url"]]
    return args + [str(a) for a in settings.get("extra_args") or []]


def llama_benchy_rows(result):
    """llama-benchy's JSON -> rows: test name in its notation (pp2048 @ d4096
    (c2)), total and per-request t/s, TTFT ms."""
    benchmarks = result.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise BenchError("llama-benchy's JSON has no list 'benchmarks' (keys: %s)" % sorted(result))
    many = (result.get("max_concurrency") or 1) > 1
    rows = []
    for run in benchmarks:
        c_suffix = " (c%d)" % run["concurrency"] if many else ""
        depth = " @ d%d" % run["context_size"] if run.get("context_size") else ""
        prefix = "ctx_" if run.get("is_context_prefill_phase") else ""
        for phase, size_key, total, per_req in (("pp", "prompt_size", "pp_throughput", "pp_req_throughput"),
                                                ("tg", "response_size", "tg_throughput", "tg_req_throughput")):
            if not run.get(total):
                continue
            name = ("%s%s%s%s" % (prefix, phase, "" if prefix else run[size_key], depth) + c_suffix)
            ttft = run.get("e2e_ttft") if phase == "pp" else None
            rows.append({"test": name, "concurrency": run["concurrency"], "tps": run[total]["mean"],
                         "tps_std": run[total]["std"], "tps_req": (run.get(per_req) or {}).get("mean"),
                         "ttft_ms": ttft["mean"] if ttft else None})
    return rows


def llama_benchy_markdown(result):
    rows = llama_benchy_rows(result)
    return markdown_table(["Test", "t/s (total)", "t/s (per request)", "TTFT"],
                          [[r["test"], "%.2f ± %.2f" % (r["tps"], r["tps_std"]), fmt_number(r["tps_req"]),
                            "—" if r["ttft_ms"] is None else "%.0f ms" % r["ttft_ms"]] for r in rows])
