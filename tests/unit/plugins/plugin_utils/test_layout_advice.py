# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Weighing each layout's benchmark by the recorded traffic (plugin_utils/_layout_advice.py),
the logic behind playbooks/advise.yml: the traffic from Prometheus's answers, the curves
from bench reports, the recommendation, its refusals and the files it writes.

The layouts of these tests: a lane (tp4x1) that decodes one stream fast and slows as
streams are added, and a fleet (tp2x2) that decodes one stream slower and holds its rate."""

from __future__ import annotations

import json

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._layout_advice import (
    AdviceError,
    advise,
    duration_seconds,
    expectation,
    history_traffic,
    layout_curve,
    layout_settings,
    newest_field_reports,
    point_at,
    prometheus_window,
    query_step,
    traffic_summary,
    write_advice,
)

LANE = {1: (0.5, 0.1, 20.0, 20.0), 2: (0.6, 0.1, 15.0, 30.0), 4: (0.8, 0.2, 8.0, 32.0)}
FLEET = {1: (0.7, 0.2, 12.0, 12.0), 2: (0.7, 0.2, 12.0, 24.0), 4: (0.8, 0.2, 11.0, 44.0)}
TOTALS = {"requests": 500.0, "prompt_tokens_sum": 50000.0, "prompt_tokens_count": 500.0,
          "generation_tokens_sum": 100000.0, "generation_tokens_count": 500.0,
          "prefix_cache_hits": 10.0, "prefix_cache_queries": 100.0}
DAY = 86400.0


def report(layout, name, points, profile="field"):
    """A report of playbooks/bench.yml cut to what the advice reads: per concurrency a cold
    wave (TTFT, decode p50, aggregate) and a shared wave (TTFT on a hit)."""
    waves = []
    for concurrency, (ttft_cold, ttft_hit, decode, aggregate) in points.items():
        waves.append({"kind": "cold", "label": "cold", "concurrency": concurrency, "ttft_p50": ttft_cold,
                      "decode_p50": decode, "aggregate_tps": aggregate, "prefix_cache_hit_rate": 0.0})
        waves.append({"kind": "shared", "label": "shared", "concurrency": concurrency, "ttft_p50": ttft_hit,
                      "decode_p50": decode, "aggregate_tps": aggregate, "prefix_cache_hit_rate": 0.8})
    waves.append({"kind": "quality", "label": "quality", "concurrency": 4, "ttft_p50": 9.0, "decode_p50": 1.0,
                  "aggregate_tps": 1.0, "prefix_cache_hit_rate": 0.0})
    return {"meta": {"name": name, "layout": layout}, "config": {"profile": profile}, "summary": {"waves": waves}}


def reports():
    return {"tp4x1": report("tp4x1", "20260101T100000Z-tp4x1", LANE),
            "tp2x2": report("tp2x2", "20260101T110000Z-tp2x2", FLEET)}


def samples(counts, step=15.0):
    """Range-query samples: counts {in flight: how many samples}, in that order."""
    values = [n for n, times in counts.items() for _sample in range(times)]
    return [(1000.0 + i * step, float(v)) for i, v in enumerate(values)]


def traffic(counts, step=15.0, **totals):
    return traffic_summary(samples(counts, step), step, dict(TOTALS, **totals))


def long_traffic(counts):
    """A day and more of samples with the shares of O(counts)."""
    scale = int(DAY / 15 / sum(counts.values())) + 1
    return traffic({n: times * scale for n, times in counts.items()})


def test_durations_read_as_prometheus_writes_them_and_refused_otherwise():
    assert duration_seconds("14d", "advise_window") == 14 * DAY
    assert duration_seconds("2w", "w") == 14 * DAY
    assert duration_seconds("90", "w") == duration_seconds(90, "w") == 90.0
    assert duration_seconds("1.5h", "w") == 5400.0
    for bad in ("two weeks", "0s", -3, True, "5y"):
        with pytest.raises(AdviceError, match=r"advise_min_history is .*expected"):
            duration_seconds(bad, "advise_min_history")


def test_the_step_is_the_scrape_interval_unless_the_window_would_hold_more_than_prometheus_returns():
    assert query_step(3600, 15) == 15
    assert query_step(14 * DAY, 15) == 121  # 14 days at 15 s are 80,640 points
    window = prometheus_window("10m", 2000.0, "2s")
    assert window == {"start": 1400.0, "end": 2000.0, "seconds": 600.0, "step": 2.0, "range": "600s"}
    with pytest.raises(AdviceError, match=r"advise_end is 'soon'; expected epoch seconds"):
        prometheus_window("10m", "soon", "2s")


def test_traffic_is_the_share_of_busy_time_at_each_number_in_flight():
    summary = traffic({0: 10, 1: 6, 2: 3, 4: 1})
    assert summary["samples"] == 20 and summary["seconds"] == 300.0
    assert summary["busy_seconds"] == 150.0 and summary["busy_fraction"] == 0.5
    assert summary["in_flight"] == {1: 0.6, 2: 0.3, 4: 0.1}
    assert summary["p95_in_flight"] == 4 and summary["max_in_flight"] == 4
    assert summary["prompt_tokens_mean"] == 100.0 and summary["output_tokens_mean"] == 200.0
    assert summary["prefix_cache_hit_rate"] == 0.1 and summary["requests"] == 500.0
    # Running and waiting summed over heads are whole numbers; a sample between is rounded.
    assert traffic_summary([(0, 2.4), (15, 0.4)], 15, {})["in_flight"] == {2: 1.0}
    idle = traffic_summary([], 15, {})
    assert idle["in_flight"] == {} and idle["p95_in_flight"] is None and idle["prefix_cache_hit_rate"] is None


def test_a_curve_takes_cold_waves_for_rates_and_shared_waves_for_hits():
    curve = layout_curve(reports()["tp4x1"])
    assert curve[1] == {"ttft_cold": 0.5, "ttft_hit": 0.1, "decode": 20.0, "aggregate": 20.0}
    assert sorted(curve) == [1, 2, 4]
    only_cold = report("tp4x1", "x", {})
    only_cold["summary"]["waves"] = [{"kind": "cold", "concurrency": 1, "ttft_p50": 0.5, "decode_p50": 9.0,
                                      "aggregate_tps": 9.0}]
    assert layout_curve(only_cold)[1]["ttft_hit"] == 0.5
    with pytest.raises(AdviceError, match=r"x has no cold wave .* bench_profile=field"):
        layout_curve(report("tp4x1", "x", {}))


def test_between_two_measured_concurrencies_the_curve_is_read_on_the_line_past_the_end_at_the_end():
    curve = layout_curve(reports()["tp4x1"])
    point, beyond = point_at(curve, 3)
    assert not beyond and point["decode"] == pytest.approx(11.5) and point["aggregate"] == pytest.approx(31.0)
    assert point_at(curve, 8) == (curve[4], True)
    assert point_at(curve, 2) == (curve[2], False)


def test_per_request_numbers_are_weighed_by_streams_and_the_aggregate_by_time():
    curve = layout_curve(reports()["tp4x1"])
    expected = expectation(curve, traffic({1: 1, 4: 1}, prefix_cache_hits=0.0))
    # Half the time one stream, half four: four of every five streams see the four-stream numbers.
    assert expected["decode_tps_per_stream"] == pytest.approx(0.2 * 20 + 0.8 * 8)
    assert expected["ttft_s"] == pytest.approx(0.2 * 0.5 + 0.8 * 0.8)
    assert expected["aggregate_tps"] == pytest.approx(0.5 * 20 + 0.5 * 32)
    assert expected["mean_request_s"] == pytest.approx(expected["ttft_s"] + 200 / expected["decode_tps_per_stream"])
    hits = expectation(curve, traffic({1: 1}, prefix_cache_hits=100.0))
    assert hits["ttft_s"] == pytest.approx(0.1)
    assert expectation(curve, traffic({6: 1}))["beyond_measured"] == [6]


def test_one_request_in_flight_keeps_the_lane_and_many_switch_to_the_fleet():
    alone = advise(long_traffic({0: 3, 1: 96, 2: 1}), reports(), "tp4x1", DAY, 100)
    assert alone["decided"] and alone["recommendation"] == "tp4x1" and not alone["switch"]
    assert alone["command"] is None
    assert alone["settings"] == {"engine_service_tensor_parallel_size": 4, "engine_service_replicas": 1}
    assert alone["reasons"][0].startswith("Requests in flight while busy (97.0% of the 1.0 d recorded): 1: 99.0%, 2: 1.0%")
    assert any(r.startswith("tp4x1 answers the mean request in") and "sooner than tp2x2" in r for r in alone["reasons"])

    busy = advise(long_traffic({4: 9, 2: 1}), reports(), "tp4x1", DAY, 100)
    assert busy["decided"] and busy["recommendation"] == "tp2x2" and busy["switch"]
    assert busy["settings"] == {"engine_service_tensor_parallel_size": 2, "engine_service_replicas": 2}
    assert busy["command"] == ("set engine_service_tensor_parallel_size: 2, engine_service_replicas: 2 in the "
                               "inventory's group_vars, then: ansible-playbook playbooks/site.yml")
    # The same traffic on a cluster already in the fleet layout: keep it, no command.
    kept = advise(long_traffic({4: 9, 2: 1}), reports(), "tp2x2", DAY, 100)
    assert kept["recommendation"] == "tp2x2" and not kept["switch"] and kept["command"] is None


def test_layouts_within_five_percent_keep_the_current_one():
    even = reports()
    even["tp2x2"] = report("tp2x2", "20260101T110000Z-tp2x2", {c: (t0, t1, d * 1.03, a) for c, (t0, t1, d, a) in LANE.items()})
    advice = advise(long_traffic({1: 1}), even, "tp4x1", DAY, 100)
    assert advice["recommendation"] == "tp4x1" and not advice["switch"]
    assert any("within 5% of tp2x2" in reason for reason in advice["reasons"])


def test_a_short_history_few_requests_no_traffic_or_one_layout_decide_nothing_and_say_why():
    short = advise(traffic({1: 10}), reports(), "tp4x1", DAY, 100)
    assert not short["decided"] and short["recommendation"] is None and short["command"] is None
    assert short["undecided"] == ["the history is too short to decide: the window holds 2.5 m of samples, "
                                  "advise_min_history asks for 1.0 d; advise again later, or over a longer advise_window"]
    # Each measured layout's expectation is still reported.
    assert set(short["layouts"]) == {"tp4x1", "tp2x2"}
    few = advise(long_traffic({1: 1}), reports(), "tp4x1", DAY, 1000)
    assert few["undecided"] == ["the window holds 500 requests, advise_min_requests asks for 1000"]
    idle = advise(long_traffic({0: 1}), reports(), "tp4x1", DAY, 100)
    assert "no request was in flight at any sample of the window" in idle["undecided"] and idle["layouts"] == {}
    lone = advise(long_traffic({1: 1}), {"tp4x1": reports()["tp4x1"]}, "tp4x1", DAY, 100)
    assert lone["undecided"] == ["tp4x1 measured in bench_report_dir; run playbooks/bench.yml in the other layout "
                                 "(switch with site.yml and the settings of the layout) so that the two can be weighed"]


def test_layout_names_give_the_engine_settings():
    assert layout_settings("tp1x4") == {"engine_service_tensor_parallel_size": 1, "engine_service_replicas": 4}
    with pytest.raises(AdviceError, match=r"'lane' is not a layout name"):
        layout_settings("lane")


def test_the_newest_field_report_of_each_layout_is_weighed(tmp_path):
    written = {}
    for name, profile in (("20260101T100000Z-tp4x1", "field"), ("20260102T100000Z-tp4x1", "community"),
                          ("20260101T090000Z-tp2x2", "field"), ("20260101T110000Z-tp2x2", "field")):
        data = report(name[-5:], name, LANE, profile)
        written[name] = data
        (tmp_path / (name + ".json")).write_text(json.dumps(data))
    (tmp_path / "compare-a-vs-b.json").write_text("{}")
    chosen = newest_field_reports(str(tmp_path), [p.name for p in tmp_path.iterdir()])
    assert {layout: r["meta"]["name"] for layout, r in chosen.items()} == {
        "tp4x1": "20260101T100000Z-tp4x1", "tp2x2": "20260101T110000Z-tp2x2"}


def uri_result(key, answer):
    return {"item": {"key": key, "value": "query " + key}, "status": 200, "json": answer}


def history(counts, step=15.0, totals=None):
    values = [[t, str(v)] for t, v in samples(counts, step)]
    return {
        "host": "spark1",
        "window": {"start": 1000.0, "end": 1000.0 + len(values) * step, "seconds": len(values) * step, "step": step},
        "in_flight": uri_result("in_flight", {"status": "success", "data": {"result": [{"metric": {}, "values": values}]}}),
        "totals": [uri_result(key, {"status": "success", "data": {"result": [{"metric": {}, "value": [0, str(value)]}]}})
                   for key, value in (totals or TOTALS).items()],
    }


def test_the_history_is_read_from_prometheus_answers_and_its_errors_are_named():
    summary = history_traffic(history({1: 3, 2: 1}))
    assert summary["in_flight"] == {1: 0.75, 2: 0.25} and summary["output_tokens_mean"] == 200.0
    empty = history({1: 1})
    empty["in_flight"]["json"]["data"]["result"] = []
    empty["totals"][0]["json"]["data"]["result"] = []
    assert history_traffic(empty)["samples"] == 0 and history_traffic(empty)["requests"] is None
    refused = history({1: 1})
    refused["in_flight"] = {"item": {"key": "in_flight", "value": "sum(x)"}, "status": -1,
                            "msg": "Status code was -1: Connection refused"}
    with pytest.raises(AdviceError, match=r"Prometheus did not answer sum\(x\): Status code was -1: Connection refused"):
        history_traffic(refused)
    bad = history({1: 1})
    bad["totals"][0]["json"] = {"status": "error", "error": "parse error"}
    with pytest.raises(AdviceError, match=r"Prometheus did not answer query requests: parse error"):
        history_traffic(bad)
    partial = history({1: 1}, totals={"requests": 1.0})
    with pytest.raises(AdviceError, match=r"lacks the totals prompt_tokens_sum"):
        history_traffic(partial)


def test_the_advice_is_written_once_as_markdown_and_json_and_not_in_check_mode(tmp_path):
    report_dir = tmp_path / "bench"
    report_dir.mkdir()
    for data in reports().values():
        (report_dir / (data["meta"]["name"] + ".json")).write_text(json.dumps(data))
    names = [p.name for p in report_dir.iterdir()]
    long = history({1: 5760, 2: 100})
    dest = tmp_path / "advise"
    checked = write_advice(long, str(report_dir), names, "tp4x1", "1d", 100, str(dest), check_mode=True)
    assert checked["changed"] and not dest.exists()
    first = write_advice(long, str(report_dir), names, "tp4x1", "1d", 100, str(dest))
    assert first["changed"] and first["advice"]["recommendation"] == "tp4x1"
    assert first["paths"]["markdown"].endswith("-advice.md")
    saved = json.loads((dest / first["paths"]["json"].split("/")[-1]).read_text())
    assert saved["traffic"]["in_flight"] == {"1": pytest.approx(5760 / 5860), "2": pytest.approx(100 / 5860)}
    assert saved["window"]["seconds"] == 5860 * 15.0 and saved["monitoring_host"] == "spark1"
    markdown = (dest / first["paths"]["markdown"].split("/")[-1]).read_text()
    assert "**Keep tp4x1**: it serves this traffic best." in markdown
    assert "| tp4x1 | 20260101T100000Z-tp4x1 |" in markdown
    again = write_advice(long, str(report_dir), names, "tp4x1", "1d", 100, str(dest))
    assert not again["changed"]
