# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node collector: nvidia-smi parsing ([N/A] left out, unknown fields dropped), the
RoCE sysfs tree (the cx7 stand-in's shape), the text format and the atomic write."""

from __future__ import annotations

import argparse
import os
import subprocess

import pytest

from unit_support import load_cx7_standin

from ansible_collections.dgxspark.cluster.plugins.module_utils import _node_metrics as nm

GB10_LINE = "4.05, 36, 0, 2418, [N/A], [N/A], [N/A]\n"


def fake_run(outputs):
    """A subprocess.run stand-in answering nvidia-smi from O(outputs) in turn, systemctl from its unit name."""
    calls = []

    def run(argv, **_kwargs):
        calls.append(argv)
        if argv[0] == "systemctl":
            return subprocess.CompletedProcess(argv, 0 if argv[-1] == "up.service" else 3, b"", b"")
        rc, out, err = outputs.pop(0)
        return subprocess.CompletedProcess(argv, rc, out, err)

    run.calls = calls
    return run


def test_na_values_are_left_out_not_written():
    fields = [f for f, _m, _h, _x in nm.GPU_FIELDS]
    assert nm.parse_gpu_csv(GB10_LINE, fields) == [
        (0, {"power.draw": 4.05, "temperature.gpu": 36.0, "utilization.gpu": 0.0, "clocks.sm": 2418.0})
    ]
    assert nm.parse_gpu_csv("1, [Not Supported], , nan, inf, 5, 6\n", fields)[0][1] == {
        "power.draw": 1.0, "memory.used": 5.0, "memory.total": 6.0}
    with pytest.raises(ValueError, match="printed 2 values for 7 fields"):
        nm.parse_gpu_csv("1, 2\n", fields)


def test_a_field_the_driver_does_not_know_is_dropped_and_asked_again():
    run = fake_run([
        (2, 'Field "clocks.mem" is not a valid field to query.\n\n', ""),
        (0, "4.05, 36, 0, 2418, [N/A], [N/A]\n", ""),
    ])
    gpus, error = nm.query_gpus("nvidia-smi", run=run)
    assert error is None
    assert gpus == [(0, {"power.draw": 4.05, "temperature.gpu": 36.0, "utilization.gpu": 0.0, "clocks.sm": 2418.0})]
    assert "clocks.mem" in run.calls[0][1] and "clocks.mem" not in run.calls[1][1]


def test_a_failing_nvidia_smi_gives_no_gpu_values_and_says_why():
    metrics = nm.Metrics()
    error = nm.collect_gpus(metrics, "nvidia-smi", run=fake_run([(9, "", "NVIDIA-SMI has failed\n")]))
    assert error == "nvidia-smi exited 9: NVIDIA-SMI has failed"
    assert metrics.render() == (
        "# HELP dgxspark_gpu_query_success 1 when nvidia-smi answered the query.\n"
        "# TYPE dgxspark_gpu_query_success gauge\n"
        "dgxspark_gpu_query_success 0\n"
    )


def standin_tree(tmp_path, down=False, rate="200 Gb/sec (4X HDR)"):
    cx7 = load_cx7_standin()
    net = tmp_path / "net"
    (net / "enP2p1s0f1np1").mkdir(parents=True)
    cx7.sync_tree(tmp_path / "sys", "roceP2p1s0f1", 1, "enP2p1s0f1np1", "02:00:00:00:00:01", ["192.168.100.11"],
                  net_dir=str(net), down=down, rate=rate, bump_counters=["symbol_error=3"])
    return tmp_path / "sys"


def test_roce_ports_from_the_standin_tree(tmp_path):
    root = standin_tree(tmp_path)
    hw = root / "class/infiniband/roceP2p1s0f1/ports/1/hw_counters"
    hw.mkdir()
    (hw / "out_of_sequence").write_text("7\n")
    os.mkdir(hw / "refuses_reads")  # reading it fails, as some firmware's counters do
    metrics = nm.Metrics()
    nm.collect_roce(metrics, str(root), ["roceP2p1s0f1", "roceP9p9s0f9"], 200)
    text = metrics.render()
    assert 'dgxspark_roce_port_counter{counter="symbol_error",hca="roceP2p1s0f1",port="1"} 3\n' in text
    assert 'dgxspark_roce_port_counter{counter="port_xmit_discards",hca="roceP2p1s0f1",port="1"} 0\n' in text
    assert 'dgxspark_roce_port_hw_counter{counter="out_of_sequence",hca="roceP2p1s0f1",port="1"} 7\n' in text
    assert "refuses_reads" not in text
    assert 'dgxspark_roce_port_active{hca="roceP2p1s0f1",port="1"} 1\n' in text
    assert 'dgxspark_roce_port_state{hca="roceP2p1s0f1",port="1"} 4\n' in text
    assert 'dgxspark_roce_port_rate_gbps{hca="roceP2p1s0f1",port="1"} 200\n' in text
    assert 'dgxspark_roce_port_expected_rate_gbps{hca="roceP2p1s0f1",port="1"} 200\n' in text
    assert 'dgxspark_roce_hca_present{hca="roceP9p9s0f9"} 0\n' in text


def test_a_port_down_at_half_rate(tmp_path):
    root = standin_tree(tmp_path, down=True, rate="100 Gb/sec (2X HDR)")
    metrics = nm.Metrics()
    nm.collect_roce(metrics, str(root), ["roceP2p1s0f1"], 200)
    text = metrics.render()
    assert 'dgxspark_roce_port_active{hca="roceP2p1s0f1",port="1"} 0\n' in text
    assert 'dgxspark_roce_port_rate_gbps{hca="roceP2p1s0f1",port="1"} 100\n' in text


def test_the_file_is_replaced_atomically_with_every_part(tmp_path):
    root = standin_tree(tmp_path)
    out = tmp_path / "textfile" / "dgxspark.prom"
    out.parent.mkdir()
    out.write_text("old\n")
    args = argparse.Namespace(output=str(out), nvidia_smi="nvidia-smi", sysfs_root=str(root), hca=["roceP2p1s0f1"],
                              expected_rate_gbps=200.0, unit=["up.service", "down.service"])
    metrics, errors = nm.collect(args, run=fake_run([(0, GB10_LINE, "")]), clock=lambda: 1700000000.5)
    assert errors == []
    nm.write_atomically(str(out), metrics.render())
    text = out.read_text()
    assert 'dgxspark_gpu_clock_sm_hertz{gpu="0"} 2418000000\n' in text
    assert 'dgxspark_gpu_utilization_ratio{gpu="0"} 0\n' in text
    assert "dgxspark_gpu_memory" not in text
    assert 'dgxspark_unit_active{unit="up.service"} 1\n' in text
    assert 'dgxspark_unit_active{unit="down.service"} 0\n' in text
    assert "dgxspark_node_metrics_last_run_timestamp_seconds 1700000000.5\n" in text
    assert sorted(os.listdir(out.parent)) == ["dgxspark.prom"]  # no temporary file left
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    # Every sample line is NAME{labels} VALUE and every family has HELP and TYPE.
    for line in text.splitlines():
        assert line.startswith(("# HELP ", "# TYPE ")) or len(line.rsplit(" ", 1)) == 2
    assert text.count("# TYPE ") == len(metrics.names())


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "dgxspark.prom"
    out.write_text("old\n")

    def broken(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(nm.os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        nm.write_atomically(str(out), "new\n")
    assert out.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["dgxspark.prom"]


def test_label_values_are_escaped():
    metrics = nm.Metrics()
    metrics.add("m", "gauge", "h", {"a": 'x"y\\z\n'}, 1)
    assert 'm{a="x\\"y\\\\z\\n"} 1\n' in metrics.render()
