# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
from itertools import permutations

import pytest

from unit_support import FIXTURES as UNIT_FIXTURES

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report import (
    build_report,
    counter_increases,
    directed_pairs,
    pair_rounds,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_markdown import render_markdown
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_report_parsers import (
    LATENCY_TESTS,
    TESTS,
    FabricReportError,
    parse_iperf3_json,
    parse_perftest_bandwidth,
    parse_perftest_latency,
    parse_ping,
)

FIXTURES = UNIT_FIXTURES / "fabric"
HOSTS = ["spark1", "spark2", "spark3", "spark4"]
ALL_PAIRS = list(permutations(HOSTS, 2))


def fixture(name):
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------------------------------------
# Scheduling


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8])
def test_rounds_cover_every_directed_pair_exactly_once(count):
    hosts = [f"node{index}" for index in range(count)]
    measured = [tuple(pair) for pair in directed_pairs(pair_rounds(hosts))]
    assert sorted(measured) == sorted(permutations(hosts, 2))
    assert len(measured) == count * (count - 1)


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8])
def test_no_host_is_in_two_tests_of_one_round(count):
    hosts = [f"node{index}" for index in range(count)]
    for round_pairs in pair_rounds(hosts):
        busy = [host for pair in round_pairs for host in pair]
        assert len(busy) == len(set(busy))
        # Only a bye leaves a host idle, and only for an odd count.
        assert len(busy) == count - count % 2


@pytest.mark.parametrize("count, rounds", [(2, 1), (3, 3), (4, 3), (5, 5), (8, 7)])
def test_round_count_is_n_minus_one_for_even_n_and_n_for_odd_n(count, rounds):
    assert len(pair_rounds([f"node{index}" for index in range(count)])) == rounds


def test_four_node_schedule_is_the_circle_method_in_host_order():
    assert pair_rounds(HOSTS) == [
        [["spark1", "spark4"], ["spark2", "spark3"]],
        [["spark1", "spark3"], ["spark2", "spark4"]],
        [["spark1", "spark2"], ["spark3", "spark4"]],
    ]


def test_schedule_depends_only_on_host_order():
    reordered = ["spark3", "spark1", "spark4", "spark2"]
    assert pair_rounds(reordered) == pair_rounds(list(reordered))
    assert pair_rounds(reordered) != pair_rounds(HOSTS)
    for round_pairs in pair_rounds(reordered):
        for first, second in round_pairs:
            assert reordered.index(first) < reordered.index(second)


def test_both_directions_of_a_pair_run_back_to_back():
    ordered = directed_pairs(pair_rounds(HOSTS))
    for forward, backward in zip(ordered[::2], ordered[1::2]):
        assert backward == forward[::-1]


@pytest.mark.parametrize(
    "hosts, message",
    [
        ([], "at least 2 hosts"),
        (["spark1"], "at least 2 hosts"),
        (["spark1", "spark2", "spark1"], "unique, repeated: spark1"),
        (["spark1", ""], "non-empty string"),
        (["spark1", 7], "non-empty string"),
        ("spark1,spark2", "list of host names"),
        (None, "list of host names"),
    ],
)
def test_invalid_host_lists_are_refused(hosts, message):
    with pytest.raises(FabricReportError, match=message):
        pair_rounds(hosts)


@pytest.mark.parametrize("rounds", ["ab", [["ab"]], [[["a", "b", "c"]]], [None]])
def test_malformed_rounds_are_refused(rounds):
    with pytest.raises(FabricReportError):
        directed_pairs(rounds)


# ---------------------------------------------------------------------------------------------
# perftest latency


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "perftest_write_lat_spark.txt",
            {"bytes": 2, "iterations": 1000, "t_min": 1.42, "t_max": 1.93, "t_typical": 1.47,
             "t_avg": 1.47, "t_stdev": 0.0, "p99": 1.57, "p999": 1.93},
        ),
        (
            "perftest_read_lat_cpu_warning.txt",
            {"bytes": 2, "iterations": 1000, "t_min": 2.64, "t_max": 5.50, "t_typical": 2.69,
             "t_avg": 2.69, "t_stdev": 0.02, "p99": 2.75, "p999": 5.50},
        ),
        (
            "perftest_send_lat_legacy.txt",
            {"bytes": 2, "iterations": 1000, "t_min": 2.57, "t_max": 15.38, "t_typical": 2.66,
             "t_avg": None, "t_stdev": None, "p99": None, "p999": None},
        ),
    ],
)
def test_latency_output_is_parsed(name, expected):
    assert parse_perftest_latency(fixture(name)) == expected


def test_latency_takes_the_last_row_of_a_size_sweep():
    legacy = fixture("perftest_send_lat_legacy.txt")
    first_row = " 2       1000          2.57           15.38        2.66\n"
    swept = legacy.replace(first_row, first_row + " 4       1000          2.49           9.48         2.54\n")
    parsed = parse_perftest_latency(swept)
    assert (parsed["bytes"], parsed["t_min"], parsed["t_max"], parsed["t_typical"]) == (4, 2.49, 9.48, 2.54)


def test_duration_mode_latency_reports_only_the_average():
    # Header and row layout of perftest's RESULT_FMT_LAT_DUR / REPORT_FMT_LAT_DUR (run with -D).
    text = (
        " #bytes        #iterations       t_avg[usec]    tps average\n"
        " 2       4263012            1.17        854207.53\n"
    )
    parsed = parse_perftest_latency(text)
    assert parsed["iterations"] == 4263012
    assert parsed["t_avg"] == 1.17
    assert parsed["t_typical"] is None and parsed["p99"] is None


@pytest.mark.parametrize(
    "text, message",
    [
        (fixture("perftest_read_lat_completion_error.txt"), "Completion with error at client"),
        (fixture("perftest_connect_error.txt"), "Couldn't connect to 192.168.125.211:18515"),
        (fixture("perftest_write_lat_spark.txt").replace("[usec]", "[cycles]"), "cycles instead of usec"),
        (fixture("perftest_write_bw_spark_gbits.txt"), "no perftest latency result header"),
        (fixture("ping_jumbo_ok.txt"), "no perftest latency result header"),
        ("", "<empty output>"),
        (
            "\n".join(fixture("perftest_write_lat_spark.txt").splitlines()[:-2]),
            "no result row under the perftest latency header",
        ),
    ],
)
def test_latency_garbage_and_failures_raise_with_the_offending_text(text, message):
    with pytest.raises(FabricReportError, match=message):
        parse_perftest_latency(text)


def test_latency_parser_refuses_non_text():
    with pytest.raises(FabricReportError, match="must be a string"):
        parse_perftest_latency(None)


# ---------------------------------------------------------------------------------------------
# perftest bandwidth


def test_bandwidth_in_gbit_is_taken_as_printed():
    assert parse_perftest_bandwidth(fixture("perftest_write_bw_spark_gbits.txt")) == {
        "bytes": 65536,
        "iterations": 20000,
        "bw_peak_gbps": 111.72,
        "bw_avg_gbps": 111.71,
        "msg_rate_mpps": 0.213070,
    }


def test_bandwidth_in_mbytes_is_converted_with_perftest_binary_megabytes():
    parsed = parse_perftest_bandwidth(fixture("perftest_write_bw_mbytes.txt"))
    assert parsed["bytes"] == 65536 and parsed["iterations"] == 5000
    assert parsed["bw_avg_gbps"] == pytest.approx(11024.71 * 2**20 * 8 / 1e9)
    assert parsed["bw_avg_gbps"] == pytest.approx(92.482, abs=1e-3)
    assert parsed["bw_peak_gbps"] == pytest.approx(92.488, abs=1e-3)
    assert parsed["msg_rate_mpps"] == 0.176395


@pytest.mark.parametrize(
    "text, message",
    [
        (fixture("perftest_write_lat_spark.txt"), "no perftest bandwidth result header"),
        (fixture("perftest_connect_error.txt"), "Couldn't connect"),
        ("random words", "no perftest bandwidth result header"),
        (
            fixture("perftest_write_bw_spark_gbits.txt").replace(
                " 65536      20000            111.72             111.71             0.213070\n", ""
            ),
            "no result row under the perftest bandwidth header",
        ),
    ],
)
def test_bandwidth_garbage_raises_with_the_offending_text(text, message):
    with pytest.raises(FabricReportError, match=message):
        parse_perftest_bandwidth(text)


# ---------------------------------------------------------------------------------------------
# iperf3


def test_iperf3_json_gives_both_sums_retransmits_and_streams():
    parsed = parse_iperf3_json(fixture("iperf3_tcp.json"))
    assert parsed["sent_gbps"] == pytest.approx(0.37029675614)
    assert parsed["received_gbps"] == pytest.approx(0.34818366006)
    assert parsed["retransmits"] == 15
    assert parsed["streams"] == 1


def test_iperf3_accepts_the_decoded_object_and_leading_warnings():
    text = fixture("iperf3_tcp.json")
    expected = parse_iperf3_json(text)
    assert parse_iperf3_json(json.loads(text)) == expected
    assert parse_iperf3_json("warning: JSON data length overflow\n" + text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        (fixture("iperf3_error.json"), "iperf3 reported an error: error - unable to connect to server: No route to host"),
        (
            fixture("iperf3_tcp.json") + "iperf3: error - unable to send control message: Broken pipe\n",
            "error after its JSON: .*Broken pipe",
        ),
        ('{"start": {}, "intervals": [], "end": {}}', "no end.sum_sent / end.sum_received"),
        ("iperf3: error - unable to connect to server: Connection refused", "no JSON object"),
        ('{"start": {', "not valid JSON"),
        ("", "no JSON object in the iperf3 output: <empty output>"),
    ],
)
def test_iperf3_errors_are_raised_with_their_message(text, message):
    with pytest.raises(FabricReportError, match=message):
        parse_iperf3_json(text)


# ---------------------------------------------------------------------------------------------
# ping


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "ping_jumbo_ok.txt",
            {"transmitted": 3, "received": 3, "errors": 0, "loss_pct": 0.0, "rtt_min": 0.191, "rtt_avg": 0.217,
             "rtt_max": 0.255, "rtt_mdev": 0.029, "no_reply": False, "mtu_exceeded": False, "reported_mtu": None},
        ),
        (
            "ping_jumbo_local_error.txt",
            {"transmitted": 4, "received": 0, "errors": 4, "loss_pct": 100.0, "rtt_min": None, "rtt_avg": None,
             "rtt_max": None, "rtt_mdev": None, "no_reply": True, "mtu_exceeded": True, "reported_mtu": 1500},
        ),
        (
            "ping_frag_needed.txt",
            {"transmitted": 0, "received": 0, "errors": 1, "loss_pct": 100.0, "rtt_min": None, "rtt_avg": None,
             "rtt_max": None, "rtt_mdev": None, "no_reply": True, "mtu_exceeded": True, "reported_mtu": 1500},
        ),
        (
            "ping_frag_needed_partial.txt",
            {"transmitted": 3, "received": 2, "errors": 1, "loss_pct": 33.3333, "rtt_min": 0.880, "rtt_avg": 1.067,
             "rtt_max": 1.255, "rtt_mdev": 0.190, "no_reply": False, "mtu_exceeded": True, "reported_mtu": 1500},
        ),
        (
            "ping_no_reply.txt",
            {"transmitted": 1, "received": 0, "errors": 0, "loss_pct": 100.0, "rtt_min": None, "rtt_avg": None,
             "rtt_max": None, "rtt_mdev": None, "no_reply": True, "mtu_exceeded": False, "reported_mtu": None},
        ),
    ],
)
def test_ping_output_is_parsed(name, expected):
    assert parse_ping(fixture(name)) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("ping: spark9: Name or service not known", "no ping statistics line.*Name or service not known"),
        (fixture("perftest_write_lat_spark.txt"), "no ping statistics line"),
        ("", "<empty output>"),
    ],
)
def test_ping_garbage_raises_with_the_offending_text(text, message):
    with pytest.raises(FabricReportError, match=message):
        parse_ping(text)


# ---------------------------------------------------------------------------------------------
# NIC counters


def test_only_counters_that_rose_are_reported_with_their_delta():
    before = {"spark1": {"rx_crc_errors_phy": 0, "rx_symbol_err_phy": "7\n", "link_down_events_phy": 1}}
    after = {"spark1": {"rx_crc_errors_phy": 3, "rx_symbol_err_phy": "9", "link_down_events_phy": 1}}
    assert counter_increases(before, after) == {
        "increases": {"spark1": {"rx_crc_errors_phy": 3, "rx_symbol_err_phy": 2}},
        "problems": [],
    }


@pytest.mark.parametrize(
    "before, after, problem",
    [
        ({"spark1": {"a": 0}}, {}, "spark1: no error counters read after the run"),
        ({}, {"spark1": {"a": 0}}, "spark1: no error counters read before the run"),
        ({"spark1": {"a": 0, "b": 0}}, {"spark1": {"a": 0}}, "spark1: error counter b was not read after the run"),
        ({"spark1": {"a": 0}}, {"spark1": {"a": 0, "b": 0}}, "spark1: error counter b was not read before the run"),
        ({"spark1": {"a": 5}}, {"spark1": {"a": 2}}, "spark1: error counter a went down from 5 to 2"),
        ({"spark1": {"a": 0}}, {"spark1": {"a": "n/a"}}, "spark1: error counter a has a non-integer reading"),
        ({"spark1": {"a": True}}, {"spark1": {"a": 1}}, "spark1: error counter a has a non-integer reading"),
        ({"spark1": ["a"]}, {"spark1": {"a": 1}}, "spark1: error counters must be a mapping"),
    ],
)
def test_incomplete_or_odd_counter_readings_are_problems(before, after, problem):
    result = counter_increases(before, after)
    assert len(result["problems"]) == 1
    assert result["problems"][0].startswith(problem)
    assert result["increases"]["spark1"] == {}


def test_named_hosts_must_appear_in_both_readings():
    result = counter_increases({"spark1": {"a": 0}}, {"spark1": {"a": 0}}, hosts=["spark1", "spark2"])
    assert result["problems"] == ["spark2: no error counters read before or after the run"]
    assert list(result["increases"]) == ["spark1", "spark2"]


def test_counter_readings_must_be_mappings():
    with pytest.raises(FabricReportError, match="counters after must map host"):
        counter_increases({}, ["spark1"])


# ---------------------------------------------------------------------------------------------
# build_report

MESH_OUTPUTS = {
    "ping": "ping_jumbo_ok.txt",
    "iperf3": "iperf3_tcp.json",
    "ib_write_lat": "perftest_write_lat_spark.txt",
    "ib_read_lat": "perftest_read_lat_cpu_warning.txt",
    "ib_send_lat": "perftest_write_lat_spark.txt",
    "ib_write_bw": "perftest_write_bw_spark_gbits.txt",
}
CLEAN_COUNTERS = {host: {"rx_crc_errors_phy": 0, "rx_symbol_err_phy": 0} for host in HOSTS}
WITHIN_LIMITS = {"max_ping_rtt_ms": 1, "min_tcp_gbps": 0.3, "max_lat_p99_us": 3, "min_rdma_gbps": 100}


def mesh_results(outputs=None, overrides=None, tests=TESTS):
    """One result per test and directed pair from real fixtures; overrides maps (test, src, dst) to fields."""
    outputs = dict(MESH_OUTPUTS, **(outputs or {}))
    results = []
    for test in tests:
        for src, dst in ALL_PAIRS:
            entry = {"src": src, "dst": dst, "test": test, "rc": 0, "stdout": fixture(outputs[test])}
            entry.update((overrides or {}).get((test, src, dst), {}))
            results.append(entry)
    return results


def test_a_clean_mesh_within_limits_has_no_violations():
    report = build_report(HOSTS, mesh_results(), CLEAN_COUNTERS, CLEAN_COUNTERS, WITHIN_LIMITS)
    assert report["violations"] == []
    assert report["passed"] is True
    assert report["tests"] == list(TESTS)
    assert report["rounds"] == pair_rounds(HOSTS)
    assert report["matrices"]["ib_write_bw"]["spark3"]["spark1"]["bw_avg_gbps"] == 111.71
    assert set(report["matrices"]["ping"]["spark2"]) == {"spark1", "spark3", "spark4"}


@pytest.mark.parametrize(
    "thresholds, test, example",
    [
        ({"max_ping_rtt_ms": 0.2}, "ping", "ping spark1->spark2: average RTT 0.217 ms exceeds the limit of 0.2 ms"),
        (
            {"min_tcp_gbps": 0.4},
            "iperf3",
            "iperf3 spark1->spark2: TCP throughput 0.35 Gbit/s is below the minimum of 0.4 Gbit/s",
        ),
        (
            {"max_lat_p99_us": {"ib_read_lat": 2.7}},
            "ib_read_lat",
            "ib_read_lat spark1->spark2: p99 latency 2.75 us exceeds the limit of 2.7 us",
        ),
        (
            {"max_lat_p99_us": 1.5, "min_tcp_gbps": None},
            None,
            "ib_send_lat spark4->spark3: p99 latency 1.57 us exceeds the limit of 1.5 us",
        ),
        (
            {"min_rdma_gbps": 112},
            "ib_write_bw",
            "ib_write_bw spark1->spark2: RDMA bandwidth 111.71 Gbit/s is below the minimum of 112 Gbit/s",
        ),
    ],
)
def test_a_limit_just_past_the_measured_value_flags_every_pair(thresholds, test, example):
    report = build_report(HOSTS, mesh_results(), CLEAN_COUNTERS, CLEAN_COUNTERS, thresholds)
    assert example in report["violations"]
    if test is None:
        # One limit for all three latency tests.
        assert len(report["violations"]) == len(LATENCY_TESTS) * len(ALL_PAIRS)
        assert {violation.split()[0] for violation in report["violations"]} == set(LATENCY_TESTS)
    else:
        assert len(report["violations"]) == len(ALL_PAIRS)
        assert all(violation.startswith(f"{test} ") for violation in report["violations"])
    assert report["passed"] is False


def test_thresholds_from_extra_vars_may_be_numeric_strings():
    report = build_report(HOSTS, mesh_results(), thresholds={"min_tcp_gbps": "0.4"})
    assert len(report["violations"]) == len(ALL_PAIRS)
    assert report["thresholds"]["min_tcp_gbps"] == 0.4


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            {"stdout": fixture("ping_jumbo_local_error.txt"), "rc": 1},
            "ping spark3->spark1: packets of the tested size do not fit the path MTU (mtu=1500)",
        ),
        (
            {"stdout": fixture("ping_frag_needed_partial.txt"), "rc": 0},
            "ping spark3->spark1: packets of the tested size do not fit the path MTU (mtu=1500)",
        ),
        (
            {"stdout": fixture("ping_no_reply.txt"), "rc": 1},
            "ping spark3->spark1: packet loss 100% exceeds the limit of 0%",
        ),
        (
            {"stdout": "ping: spark1: Name or service not known", "rc": 2},
            "ping spark3->spark1: measurement failed: exited with rc 2: no ping statistics line",
        ),
    ],
)
def test_one_bad_ping_pair_is_the_only_violation(override, expected):
    results = mesh_results(tests=["ping"], overrides={("ping", "spark3", "spark1"): override})
    violations = build_report(HOSTS, results)["violations"]
    assert len(violations) == 1
    assert violations[0].startswith(expected)


def test_loss_check_can_be_switched_off():
    lost = {("ping", "spark3", "spark1"): {"stdout": fixture("ping_no_reply.txt")}}
    results = mesh_results(tests=["ping"], overrides=lost)
    assert build_report(HOSTS, results, thresholds={"max_ping_loss_pct": None})["violations"] == []


@pytest.mark.parametrize(
    "test, override, expected",
    [
        (
            "iperf3",
            {"stdout": fixture("iperf3_error.json"), "rc": 1},
            "iperf3 spark2->spark4: measurement failed: exited with rc 1: iperf3 reported an error: "
            "error - unable to connect to server: No route to host",
        ),
        (
            "ib_write_lat",
            {"stdout": "", "stderr": fixture("perftest_connect_error.txt"), "rc": 1},
            "ib_write_lat spark2->spark4: measurement failed: exited with rc 1: no perftest latency result header "
            "(#bytes ... t_) in the output: <empty output> (stderr: 'Unable to open file descriptor for socket "
            "connection Unable to init the socket connection')",
        ),
        (
            "ib_read_lat",
            {"stdout": fixture("perftest_read_lat_completion_error.txt"), "rc": 1},
            "ib_read_lat spark2->spark4: measurement failed: exited with rc 1: perftest reported a failure: "
            "'Completion with error at client'",
        ),
        (
            "ib_write_bw",
            {"rc": "1"},
            "ib_write_bw spark2->spark4: measurement failed: exited with rc 1 although it printed a result",
        ),
    ],
)
def test_failed_measurements_are_violations(test, override, expected):
    results = mesh_results(tests=[test], overrides={(test, "spark2", "spark4"): override})
    report = build_report(HOSTS, results)
    assert report["violations"] == [expected]
    assert "error" in report["matrices"][test]["spark2"]["spark4"]
    assert report["summaries"][test]["failed"] == 1
    assert report["summaries"][test]["measured"] == len(ALL_PAIRS) - 1


def test_a_pair_left_out_of_a_measured_test_is_a_violation():
    results = [
        entry for entry in mesh_results(tests=["ib_write_bw"])
        if (entry["src"], entry["dst"]) != ("spark4", "spark3")
    ]
    report = build_report(HOSTS, results)
    assert report["violations"] == ["ib_write_bw spark4->spark3: not measured"]
    assert report["summaries"]["ib_write_bw"]["missing"] == 1


def test_tests_without_any_result_are_left_out():
    report = build_report(HOSTS, mesh_results(tests=["ping", "iperf3"]))
    assert report["tests"] == ["ping", "iperf3"]
    assert set(report["matrices"]) == {"ping", "iperf3"}
    assert report["violations"] == []


def test_a_p99_limit_on_perftest_without_percentiles_cannot_pass():
    results = mesh_results(outputs={"ib_send_lat": "perftest_send_lat_legacy.txt"}, tests=["ib_send_lat"])
    violations = build_report(HOSTS, results, thresholds={"max_lat_p99_us": 5})["violations"]
    assert len(violations) == len(ALL_PAIRS)
    assert violations[0] == (
        "ib_send_lat spark1->spark2: this perftest does not report a p99 latency, so max_lat_p99_us cannot be checked"
    )


def test_latency_summary_spans_the_mesh():
    fast = {"stdout": fixture("perftest_write_lat_spark.txt")}
    fast_pairs = {("ib_read_lat", src, dst): fast for src, dst in ALL_PAIRS[:6]}
    report = build_report(HOSTS, mesh_results(tests=["ib_read_lat"], overrides=fast_pairs))
    summary = report["summaries"]["ib_read_lat"]
    assert (summary["avg_min"], summary["avg_max"]) == (1.47, 2.69)
    assert (summary["p99_min"], summary["p99_max"]) == (1.57, 2.75)
    assert (summary["measured"], summary["expected"], summary["failed"], summary["missing"]) == (12, 12, 0, 0)
    assert summary["unit"] == "us"


def test_ping_and_iperf3_summaries_carry_loss_and_retransmits():
    summaries = build_report(HOSTS, mesh_results(tests=["ping", "iperf3"]))["summaries"]
    assert summaries["ping"]["loss_pct_max"] == 0.0
    assert (summaries["ping"]["avg_min"], summaries["ping"]["avg_max"]) == (0.217, 0.217)
    assert summaries["iperf3"]["retransmits_total"] == 15 * len(ALL_PAIRS)
    assert summaries["iperf3"]["p99_min"] is None


@pytest.mark.parametrize(
    "after_spark2, thresholds, expected",
    [
        ({"rx_crc_errors_phy": 3, "rx_symbol_err_phy": 0}, {},
         ["spark2: error counter rx_crc_errors_phy rose by 3 during the run (limit 0)"]),
        ({"rx_crc_errors_phy": 3, "rx_symbol_err_phy": 0}, {"max_counter_increase": 5}, []),
        ({"rx_crc_errors_phy": 3, "rx_symbol_err_phy": 0}, {"max_counter_increase": None}, []),
        ({"rx_crc_errors_phy": 0}, {}, ["spark2: error counter rx_symbol_err_phy was not read after the run"]),
    ],
)
def test_counter_increases_are_checked_against_the_limit(after_spark2, thresholds, expected):
    after = dict(CLEAN_COUNTERS, spark2=after_spark2)
    report = build_report(HOSTS, mesh_results(tests=["ping"]), CLEAN_COUNTERS, after, thresholds)
    assert report["violations"] == expected


def test_counters_read_only_before_the_run_are_a_violation_per_host():
    report = build_report(HOSTS, mesh_results(tests=["ping"]), counters_before=CLEAN_COUNTERS)
    assert report["violations"] == [f"{host}: no error counters read after the run" for host in HOSTS]


def test_counters_of_hosts_outside_the_mesh_are_not_judged():
    before = dict(CLEAN_COUNTERS, controller={"rx_crc_errors_phy": 0})
    after = dict(CLEAN_COUNTERS, controller={"rx_crc_errors_phy": 9})
    report = build_report(HOSTS, mesh_results(tests=["ping"]), before, after)
    assert report["violations"] == []
    assert "controller" not in report["counters"]["increases"]


def test_counters_are_not_collected_when_both_readings_are_absent():
    counters = build_report(HOSTS, mesh_results(tests=["ping"]))["counters"]
    assert counters["collected"] is False


def test_report_is_json_serialisable():
    after = dict(CLEAN_COUNTERS, spark4={"rx_crc_errors_phy": 1, "rx_symbol_err_phy": 0})
    report = build_report(HOSTS, mesh_results(), CLEAN_COUNTERS, after, WITHIN_LIMITS, {"device": "roceP2p1s0f1"})
    assert json.loads(json.dumps(report)) == report


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"thresholds": {"max_ping_rtt": 1}}, "unknown threshold.*max_ping_rtt"),
        ({"thresholds": {"min_tcp_gbps": -1}}, "finite number >= 0"),
        ({"thresholds": {"min_tcp_gbps": True}}, "must be a number"),
        ({"thresholds": {"min_tcp_gbps": "fast"}}, "must be a number"),
        ({"thresholds": {"max_lat_p99_us": {"ib_atomic_lat": 3}}}, "unknown test.*ib_atomic_lat"),
        ({"thresholds": [1]}, "thresholds must be a mapping"),
        ({"metadata": "roceP2p1s0f1"}, "metadata must be a mapping"),
        ({"counters_before": ["spark1"]}, "counters before must map host"),
    ],
)
def test_invalid_report_options_are_refused(kwargs, message):
    with pytest.raises(FabricReportError, match=message):
        build_report(HOSTS, mesh_results(tests=["ping"]), **kwargs)


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"src": "spark1", "dst": "spark2", "test": "ib_atomic_lat", "stdout": ""}, "test must be one of"),
        ({"src": "spark9", "dst": "spark2", "test": "ping", "stdout": ""}, "src 'spark9' is not one of the hosts"),
        ({"src": "spark1", "dst": "spark1", "test": "ping", "stdout": ""}, "against itself"),
        ({"src": "spark1", "dst": "spark2", "test": "ping", "stdout": "", "rc": "x"}, "rc must be an integer"),
        ("ping spark1 spark2", "every result must be a mapping"),
    ],
)
def test_malformed_results_are_refused(entry, message):
    with pytest.raises(FabricReportError, match=message):
        build_report(HOSTS, [entry])


def test_a_measurement_listed_twice_is_refused():
    results = mesh_results(tests=["ping"])
    with pytest.raises(FabricReportError, match="ping spark1->spark2 appears more than once"):
        build_report(HOSTS, results + results[:1])


# ---------------------------------------------------------------------------------------------
# render_markdown

METADATA = {"device": "roceP2p1s0f1", "gid": 11, "size": 2, "iters": 10000}


def table_after(markdown, heading):
    """The rows (lists of cell texts) of the first table under a heading."""
    lines = markdown.splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
        elif rows:
            break
    return rows


def test_markdown_has_a_four_by_four_matrix_with_self_on_the_diagonal():
    markdown = render_markdown(build_report(HOSTS, mesh_results(), metadata=METADATA))
    rows = table_after(markdown, "## RDMA write latency (ib_write_lat)")
    assert rows[0] == ["FROM\\TO"] + HOSTS
    body = rows[2:]
    assert [row[0] for row in body] == HOSTS
    for index, row in enumerate(body):
        assert len(row) == 1 + len(HOSTS)
        for column, cell in enumerate(row[1:]):
            assert cell == ("self" if column == index else "1.47us p99=1.57")


@pytest.mark.parametrize(
    "heading, cell",
    [
        ("## ICMP round-trip time (ping)", "0.217 ms"),
        ("## TCP throughput (iperf3)", "0.3 Gbit/s"),
        ("## RDMA read latency (ib_read_lat)", "2.69us p99=2.75"),
        ("## RDMA write bandwidth (ib_write_bw)", "111.71 Gbit/s"),
    ],
)
def test_markdown_cells_follow_the_unit_of_each_test(heading, cell):
    rows = table_after(render_markdown(build_report(HOSTS, mesh_results())), heading)
    assert rows[2][2] == cell


def test_markdown_header_line_names_the_run():
    markdown = render_markdown(build_report(HOSTS, mesh_results(tests=LATENCY_TESTS), metadata=METADATA))
    assert "`device=roceP2p1s0f1 gid=11 size=2B iters=10000 tests=ib_write_lat ib_read_lat ib_send_lat`" in markdown


def test_markdown_marks_failed_missing_and_oversized_cells():
    overrides = {
        ("ping", "spark1", "spark2"): {"stdout": fixture("ping_jumbo_local_error.txt"), "rc": 1},
        ("ping", "spark1", "spark3"): {"stdout": "garbage", "rc": 2},
    }
    results = [
        entry for entry in mesh_results(tests=["ping"], overrides=overrides)
        if (entry["src"], entry["dst"]) != ("spark1", "spark4")
    ]
    report = build_report(HOSTS, results)
    markdown = render_markdown(report)
    first_row = table_after(markdown, "## ICMP round-trip time (ping)")[2]
    assert first_row == ["spark1", "self", "MTU exceeded", "FAILED", "not run"]
    assert "Result: **FAIL (3 violations)**" in markdown
    summary = table_after(markdown, "## Summary")
    assert summary[2][:2] == ["ICMP round-trip time", "10/12"]
    assert summary[2][4] == "max loss 100%; 1 failed; 1 not run"
    violations = markdown.split("## Violations\n\n", 1)[1].splitlines()
    assert violations == [f"- {violation}" for violation in report["violations"]]


def test_markdown_summary_gives_average_and_p99_ranges():
    summary = table_after(render_markdown(build_report(HOSTS, mesh_results())), "## Summary")
    assert summary[0] == ["Test", "Measured", "Avg range", "p99 range", "Notes"]
    rows = {row[0]: row[1:] for row in summary[2:]}
    assert rows["RDMA write latency"] == ["12/12", "1.47-1.47 us", "1.57-1.57 us", ""]
    assert rows["RDMA write bandwidth"] == ["12/12", "111.71-111.71 Gbit/s", "-", ""]
    assert rows["TCP throughput"][3] == "180 retransmits"


def test_markdown_has_a_counter_table_per_host_and_says_none_when_clean():
    after = dict(CLEAN_COUNTERS, spark3={"rx_crc_errors_phy": 2, "rx_symbol_err_phy": 0})
    markdown = render_markdown(build_report(HOSTS, mesh_results(tests=["ping"]), CLEAN_COUNTERS, after,
                                            {"max_counter_increase": 2}))
    for host in HOSTS:
        rows = table_after(markdown, f"### {host}")
        assert rows[0] == ["Counter", "Before", "After", "Increase"]
        crc_after = "2" if host == "spark3" else "0"
        expected_crc = ["rx_crc_errors_phy", "0", crc_after, crc_after]
        assert rows[2:] == [expected_crc, ["rx_symbol_err_phy", "0", "0", "0"]]
    assert markdown.endswith("## Violations\n\nnone\n")
    assert "Result: **PASS**" in markdown


def test_markdown_says_when_counters_were_not_collected():
    markdown = render_markdown(build_report(HOSTS, mesh_results(tests=["ping"])))
    assert "## Error counters\n\nError counters were not collected.\n" in markdown


@pytest.mark.parametrize("report", [None, {}, {"hosts": HOSTS}, "report"])
def test_markdown_needs_a_report(report):
    with pytest.raises(FabricReportError, match="needs a build_report"):
        render_markdown(report)
