# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/bench.yml on the serving simulated cluster: one full run of the
simulated field profile, one run with a too-short timeout and a wrong
expected answer, one against a port nothing serves; then playbooks/advise.yml
weighing the full run against two traffic shapes sent to the cluster."""

from __future__ import annotations

import json
import re
import statistics
import threading
import time

import pytest

from helpers import (
    API_KEY,
    completion,
    deployed_record,
    engine_head,
    flat,
    group_vars,
    run_playbook,
    run_side_by_side,
)


def run_bench(report_dir, **extra):
    start = time.monotonic()
    result = run_playbook("bench.yml", extra_vars=dict(bench_report_dir=str(report_dir), **extra), timeout=300)
    return result, time.monotonic() - start


def report_files(report_dir):
    found = {path.suffix: path for path in report_dir.iterdir()}
    return found.get(".md"), found.get(".json"), found.get(".png")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    report_dir = tmp_path_factory.mktemp("bench")
    result, seconds = run_bench(report_dir)
    assert result.returncode == 0, flat(result.stdout + result.stderr)[-3000:]
    markdown, raw, png = report_files(report_dir)
    return {"result": result, "seconds": seconds, "markdown": markdown.read_text(), "raw": json.loads(raw.read_text()),
            "png": png.read_bytes(), "names": (markdown.name, raw.name, png.name)}


def row(markdown, *cells):
    """The cells of the table row that starts with cells."""
    prefix = "| " + " | ".join(str(c) for c in cells) + " |"
    for line in markdown.splitlines():
        if line.startswith(prefix):
            return [cell.strip() for cell in line.strip("|").split("|")]
    raise AssertionError("no row %r in:\n%s" % (prefix, markdown))


def test_bench_writes_markdown_json_and_png_named_by_time_and_layout(bench):
    md_name, json_name, png_name = bench["names"]
    assert re.fullmatch(r"\d{8}T\d{6}Z-tp4x1\.md", md_name)
    assert json_name == md_name[:-3] + ".json" and png_name == md_name[:-3] + ".png"
    assert bench["png"].startswith(b"\x89PNG\r\n\x1a\n") and len(bench["png"]) > 1000
    # A bound against a run that hangs, not a measure of speed:
    # the run took 47 to 60 s on two cores, most of it the playbook's own work.
    assert bench["seconds"] < 120, bench["seconds"]


def test_report_records_what_makes_numbers_comparable(bench):
    raw, markdown = bench["raw"], bench["markdown"]
    head, url = engine_head()
    record = deployed_record(head)
    meta = raw["meta"]
    assert (meta["layout"], meta["tensor_parallel"], meta["replicas"], meta["bench_host"]) == ("tp4x1", 4, 1, head)
    assert meta["engine_argv"] == record["vllm_argv"] and meta["deployed_version"] == record["version"]
    assert meta["image_id"] == record["image_id"] and meta["image_ref"] == record["image_ref"]
    assert meta["engine_versions"] == {url: "0.32.0+dgxspark.patched"}
    assert meta["model_revision"] == group_vars()["model_weights_hf_revision"]
    for needle in ("| Layout | tp4x1 |", "| Profile | field |", "| Engine version (/version) | 0.32.0+dgxspark.patched |",
                   "| Image ID | %s |" % record["image_id"], " ".join(record["vllm_argv"]),
                   "Speculative decoding: not measured: no speculative decoding.", "| Prompt source | synthetic"):
        assert needle in markdown
    # The API key reached the node in a file, never the playbook's output or the report.
    assert API_KEY not in bench["result"].stdout and API_KEY not in json.dumps(raw)


def test_progress_line_per_wave_as_it_finishes(bench):
    labels = re.findall(r"([a-z]+(?: \d+)? C=\d+): \d+/\d+ ok, TTFT p50 ", flat(bench["result"].stdout))
    assert labels == ["ctx 96 C=1", "ctx 224 C=1", "cold C=1", "cold C=2", "cold C=4", "shared C=1", "shared C=2",
                      "shared C=4", "quality C=4"]


def test_tables_recomputed_from_the_raw_json(bench):
    raw, markdown = bench["raw"], bench["markdown"]
    waves = {(w["kind"], w["concurrency"]): w for w in raw["waves"] if w["kind"] in ("cold", "shared")}
    assert sorted(waves) == [(k, c) for k in ("cold", "shared") for c in (1, 2, 4)]
    for (kind, concurrency), wave in waves.items():
        good = [r for r in wave["requests"] if r["ok"]]
        assert len(good) == concurrency == len(wave["requests"])
        ttft = statistics.median(r["ttft"] for r in good)
        decode = statistics.median((r["completion_tokens"] - 1) / r["decode_seconds"] for r in good)
        aggregate = sum(r["completion_tokens"] for r in good) / (wave["finished"] - wave["started"])
        assert all(r["completion_tokens"] == 16 for r in good), "ignore_eos and max_tokens fix the output length"
        title = "Cold unique-prompt waves" if kind == "cold" else "Shared-prefix KV cache-hit waves"
        section = markdown.split("## " + title, 1)[1].split("## ", 1)[0]
        cells = row(section, concurrency)
        assert cells[1] == "%d/%d" % (concurrency, concurrency)
        assert cells[2].startswith("%.3fs / " % ttft)
        assert cells[3] == "%.2f tok/s" % decode
        assert cells[4] == "%.2f" % aggregate
        # Power: the nvidia-smi stand-in's power.draw of four nodes, summed.
        assert cells[6].endswith(" W") and float(cells[6][:-2]) > 0
    for context in (96, 224):
        wave = next(w for w in raw["waves"] if w["kind"] == "context" and w["prompt_tokens_target"] == context)
        cold = [r for r in wave["requests"] if r["phase"] == "cold"]
        assert len(cold) == 2 and all(r["prompt_tokens"] == context for r in cold)
        cells = row(markdown, "ctx %d" % context, "Cold prime")
        assert cells[3] == "%.3fs" % statistics.median(r["ttft"] for r in cold)


def test_prefix_cache_hits_where_the_prompt_was_primed_and_nowhere_else(bench):
    """The engine's own counters prove which requests hit the cache: vLLM caches whole
    blocks (engine_service_block_size tokens) and computes at least a prompt's last token."""
    block = group_vars()["engine_service_block_size"]
    repeats = group_vars()["bench_field_context_repeats"]
    shared_blocks = (group_vars()["bench_field_wave_tokens"] - 1) // block
    summary = {(w["label"], w["concurrency"]): w for w in bench["raw"]["summary"]["waves"]}
    for concurrency in (1, 2, 4):
        assert summary[("cold", concurrency)]["metrics"]["prefix_cache_hits"] == 0
        # Every request of a shared wave finds the blocks its prime left.
        assert summary[("shared", concurrency)]["metrics"]["prefix_cache_hits"] == shared_blocks * block * concurrency
    # Each cache-hit request reuses the blocks its cold prime left, and only those.
    for context in (96, 224):
        assert summary[("ctx %d" % context, 1)]["metrics"]["prefix_cache_hits"] == repeats * ((context - 1) // block) * block
    assert "| shared | 4 | — | — | " in bench["markdown"]


def test_a_cache_hit_answers_sooner_than_its_cold_prime_at_the_longest_context(bench):
    """The field report's cold vs KV-cache-hit TTFT, on the real engine: at the longest
    simulated context the cache hit prefills one chunk where the cold prime prefills seven."""
    longest = max(group_vars()["bench_field_contexts"])
    wave = next(w for w in bench["raw"]["waves"] if w["kind"] == "context" and w["prompt_tokens_target"] == longest)
    ttft = {phase: statistics.median(r["ttft"] for r in wave["requests"] if r["phase"] == phase)
            for phase in ("cold", "cache_hit")}
    print("ctx %d TTFT: cold %.3f s, cache hit %.3f s" % (longest, ttft["cold"], ttft["cache_hit"]))
    assert ttft["cache_hit"] < ttft["cold"], ttft
    cold_cells = row(bench["markdown"], "ctx %d" % longest, "Cold prime")
    hit_cells = row(bench["markdown"], "ctx %d" % longest, "KV cache hit")
    assert (cold_cells[3], hit_cells[3]) == ("%.3fs" % ttft["cold"], "%.3fs" % ttft["cache_hit"])


def test_power_and_nic_counters_sampled_on_every_node_during_the_run(bench):
    raw = bench["raw"]
    assert sorted(raw["samples"]) == ["spark1", "spark2", "spark3", "spark4"]
    for host, text in raw["samples"].items():
        samples = [json.loads(line) for line in text.splitlines()]
        assert len(samples) >= 10, host
        assert samples[0]["t"] <= raw["waves"][0]["started"] and samples[-1]["t"] >= raw["waves"][-1]["finished"]
        assert all(s["power"] for s in samples), host
        # The fabric HCA's error counters (the stand-in's sysfs tree), before and after every wave.
        assert "roceP2p1s0f1/symbol_error" in samples[-1]["counters"], host
    for wave in raw["summary"]["waves"]:
        assert sorted(wave["power_by_host"]) == sorted(raw["samples"])
        assert wave["power_watts"] == sum(entry["watts"] for entry in wave["power_by_host"].values())
        assert wave["nic_errors"] == {}


def test_quality_gate_passed_at_the_highest_concurrency(bench):
    quality = bench["raw"]["summary"]["quality"]
    assert len(quality) == 4 and all(v["ok"] for v in quality)
    assert "Quality gate passed" in bench["result"].stdout


def test_short_timeout_wave_fails_requests_finishes_and_a_wrong_answer_fails_the_gate(tmp_path):
    result, _seconds = run_bench(tmp_path, bench_field_contexts=[], bench_field_waves=["cold"],
                                 bench_field_concurrency=[2], bench_request_timeout=0.05,
                                 bench_quality_pairs=[{"prompt": "2 + 2 =", "expect": "^4$"}])
    output = flat(result.stdout)
    assert result.returncode != 0
    assert "cold C=2: 0/2 ok" in output and "timeout after 0.05s" in output
    assert "The quality gate failed: 2 of 2 answers wrong" in output
    markdown, raw, _png = report_files(tmp_path)
    text = markdown.read_text()
    assert row(text, 2)[1] == "0/2"
    assert "| 2 + 2 = | `^4$` |" in text and "WRONG" in text
    waves = json.loads(raw.read_text())["waves"]
    assert [r["error"] for r in waves[0]["requests"]] == ["timeout after 0.05s"] * 2
    # The engine is not hurt by the abandoned requests.
    assert completion()[0] == 200


def test_a_cluster_that_does_not_serve_fails_at_once(tmp_path):
    result, seconds = run_bench(tmp_path, bench_api_port=8001)
    output = flat(result.stdout)
    assert result.returncode != 0
    assert "the cluster does not serve tiny at http://192.168.100.11:8001" in output
    assert "Connection refused" in output and "Nothing was measured" in output
    assert "Wave " not in output and not list(tmp_path.iterdir())
    assert seconds < 30


def traffic(streams, seconds, max_tokens=24):
    """Keep O(streams) completions in flight for O(seconds), each stream sending its next
    request as soon as the last is answered; (start, end, statuses) in epoch seconds. The
    request is built once: a stream spends its time waiting on the engine, not on the client."""
    import urllib.request

    _head, url = engine_head()
    body = json.dumps({"model": group_vars()["engine_service_served_model_name"], "prompt": "Traffic for the advice",
                       "max_tokens": max_tokens, "min_tokens": max_tokens, "ignore_eos": True}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY}
    deadline = time.monotonic() + seconds
    statuses = []

    def stream():
        while time.monotonic() < deadline:
            request = urllib.request.Request(url + "/v1/completions", data=body, headers=headers)
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
                statuses.append(response.status)

    started = time.time()
    threads = [threading.Thread(target=stream) for _stream in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return started, time.time(), statuses


def test_advise_weighs_the_layouts_by_the_recorded_traffic_and_its_advice_changes_with_it(bench, tmp_path):
    """advise.yml reads what Prometheus recorded while one stream, then four, were in flight,
    and weighs two layout curves by it: the lane as the bench run above measured it, and a
    fleet derived from it that decodes a lone stream at 0.6 of the lane's rate and four
    streams at 1.6 of it (switching layouts to measure the fleet would cost two coordinated
    starts, and on two shared cores its real curve promises no crossing to test against).
    One stream in flight keeps the lane; four switch to the fleet; the default minimum
    history (a day) decides nothing and says why."""
    reports = tmp_path / "reports"
    reports.mkdir()
    lane = bench["raw"]
    (reports / (lane["meta"]["name"] + ".json")).write_text(json.dumps(lane))
    fleet = json.loads(json.dumps(lane))
    fleet["meta"].update(layout="tp2x2", name=lane["meta"]["date"][:-3] + "59Z-tp2x2")
    for wave in fleet["summary"]["waves"]:
        factor = {1: 0.6, 2: 1.0}.get(wave["concurrency"], 1.6)
        wave.update(decode_p50=wave["decode_p50"] * factor, aggregate_tps=wave["aggregate_tps"] * factor)
    (reports / (fleet["meta"]["name"] + ".json")).write_text(json.dumps(fleet))

    shapes = {"one": traffic(1, 12), "four": traffic(4, 12)}
    assert all(status == 200 for _start, _end, statuses in shapes.values() for status in statuses)
    # Each window ends a second before its shape did, at a scrape already taken; a second
    # more lets Prometheus make the last one queryable.
    time.sleep(1)

    def advise_run(shape, dest, **extra):
        start, end, _statuses = shapes[shape]
        # A sample holds the last scrape, up to 2 s old: the window starts 3 s into the
        # shape, so that none holds the shape before, and ends a second before its end.
        extra_vars = dict(advise_report_dir=str(reports), advise_dest=str(tmp_path / dest), advise_end=end - 1,
                          advise_window="%ds" % int(end - start - 4), **extra)
        return ("advise.yml", (), extra_vars)

    runs = run_side_by_side({
        "one": advise_run("one", "one", advise_min_history="6s", advise_min_requests=3),
        "four": advise_run("four", "four", advise_min_history="6s", advise_min_requests=3),
        "undecided": advise_run("four", "undecided"),
    })
    advice = {}
    for name, result in runs.items():
        assert result.returncode == 0, (name, flat(result.stdout + result.stderr)[-3000:])
        written = list((tmp_path / name).glob("*-advice.json"))
        assert len(written) == 1, written
        advice[name] = json.loads(written[0].read_text())

    one, four, undecided = advice["one"], advice["four"], advice["undecided"]
    # The head's watchdog sends its own checked completion once a minute: a sample may catch it.
    assert one["traffic"]["in_flight"].get("1", 0) >= 0.7 and one["traffic"]["max_in_flight"] <= 2, one["traffic"]
    assert four["traffic"]["p95_in_flight"] >= 3, four["traffic"]
    for shape, statuses in ((one, shapes["one"][2]), (four, shapes["four"][2])):
        # The window leaves out the shape's ends: most of its requests, never more than were sent.
        assert 3 <= shape["traffic"]["requests"] <= len(statuses) + 1, (shape["traffic"], len(statuses))
        # Each request decodes 24 tokens; Prometheus's increase() extrapolates a short window's
        # counters to its ends, which moves the mean a little.
        assert shape["traffic"]["output_tokens_mean"] == pytest.approx(24, rel=0.25), shape["traffic"]
        assert set(shape["layouts"]) == {"tp4x1", "tp2x2"}
    assert one["decided"] and one["recommendation"] == "tp4x1" and not one["switch"] and one["command"] is None
    lane_one, fleet_one = one["layouts"]["tp4x1"], one["layouts"]["tp2x2"]
    assert lane_one["decode_tps_per_stream"] > fleet_one["decode_tps_per_stream"]
    assert four["decided"] and four["recommendation"] == "tp2x2" and four["switch"]
    assert four["settings"] == {"engine_service_tensor_parallel_size": 2, "engine_service_replicas": 2}
    assert "engine_service_replicas: 2" in four["command"] and "playbooks/site.yml" in four["command"]
    assert four["layouts"]["tp2x2"]["mean_request_s"] < four["layouts"]["tp4x1"]["mean_request_s"]
    assert not undecided["decided"] and undecided["recommendation"] is None
    assert any("history is too short" in reason and "1.0 d" in reason for reason in undecided["undecided"])
    assert undecided["layouts"] == four["layouts"]
    output = flat(runs["four"].stdout)
    assert "**Switch to tp2x2** (now tp4x1)" in output, output[-3000:]
    assert "**Keep tp4x1**" in flat(runs["one"].stdout)
