# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._balancer import (
    BalancerError,
    balancer_config_problems,
    balancer_drain_lines,
    balancer_nginx_config,
    balancer_upstreams,
    engine_requests_in_flight,
)

HOSTS = {"spark%d" % (rank + 1): {"rank": rank, "fabric_address": "192.168.100.1%d" % (rank + 1)} for rank in range(4)}
TP4 = {"tensor_parallel_size": 4, "replicas": 1, "api_port": 8000}
FLEET = {"tensor_parallel_size": 2, "replicas": 2, "api_port": 8000}
SETTINGS = {"port": 8080, "session_header": "X-Session-ID", "upstream_header": "X-Upstream", "max_fails": 2,
            "fail_timeout": "10s", "read_timeout": "1h", "connect_timeout": "5s", "drained": [], "drain_timeout": 300,
            "reserved_ports": [8000, 29501]}


def test_one_upstream_in_the_tp4_layout_and_one_per_replica_head_in_the_fleet():
    assert balancer_upstreams(HOSTS, TP4) == [{"name": "spark1", "address": "192.168.100.11", "port": 8000, "replica": 0}]
    assert [(u["name"], u["replica"]) for u in balancer_upstreams(HOSTS, FLEET)] == [("spark1", 0), ("spark3", 1)]


def test_the_head_is_found_by_rank_not_by_host_order():
    hosts = {"b": {"rank": 0, "fabric_address": "10.0.0.2"}, "a": {"rank": 1, "fabric_address": "10.0.0.1"}}
    assert [u["name"] for u in balancer_upstreams(hosts, {"tensor_parallel_size": 1, "replicas": 2, "api_port": 9})] \
        == ["b", "a"]


def test_a_replica_without_head_or_address_is_refused_by_name():
    with pytest.raises(BalancerError, match="no head for replica"):
        balancer_upstreams({"spark1": {"rank": 0, "fabric_address": "a"}}, FLEET)
    with pytest.raises(BalancerError, match="spark3 .head of replica 1. has no fabric_address"):
        balancer_upstreams(dict(HOSTS, spark3={"rank": 2}), FLEET)
    with pytest.raises(BalancerError, match="spark9: rank 9 is outside"):
        balancer_upstreams(dict(HOSTS, spark9={"rank": 9, "fabric_address": "x"}), TP4)


@pytest.mark.parametrize(("change", "message"), [
    ({"port": 0}, "balancer_port is 0; expected a port 1-65535"),
    ({"port": 8000}, "balancer_port is 8000, a port the engine takes"),
    ({"session_header": "X Session"}, "balancer_session_header is 'X Session'"),
    ({"upstream_header": ""}, "balancer_upstream_header is ''"),
    ({"max_fails": -1}, "balancer_max_fails is -1"),
    ({"drain_timeout": -5}, "balancer_drain_timeout is -5"),
    ({"drain_timeout": "soon"}, "balancer_drain_timeout is 'soon'"),
    ({"fail_timeout": "ten"}, "balancer_fail_timeout is 'ten'; expected an nginx duration"),
    ({"drained": ["spark2"]}, "balancer_drained_hosts names spark2, not a replica head; expected some of: spark1, spark3"),
    ({"drained": ["spark1", "spark3"]}, "drains every replica"),
])
def test_bad_inputs_are_refused_naming_the_variable(change, message):
    problems = balancer_config_problems(dict(SETTINGS, **change), balancer_upstreams(HOSTS, FLEET))
    assert any(message in problem for problem in problems), problems
    with pytest.raises(BalancerError):
        balancer_nginx_config(dict(SETTINGS, **change), balancer_upstreams(HOSTS, FLEET))


def test_sound_inputs_have_no_problems():
    assert balancer_config_problems(SETTINGS, balancer_upstreams(HOSTS, FLEET)) == []
    assert balancer_config_problems(dict(SETTINGS, drained=["spark3"]), balancer_upstreams(HOSTS, FLEET)) == []


def test_the_config_routes_sticky_by_the_session_header_and_falls_back_to_the_client_address():
    text = balancer_nginx_config(dict(SETTINGS, session_header="X-Conversation"), balancer_upstreams(HOSTS, FLEET))
    assert "map $http_x_conversation $dgxspark_session_key {" in text
    assert '"" $remote_addr;' in text and "default $http_x_conversation;" in text
    assert "hash $dgxspark_session_key consistent;" in text
    assert re.search(r"server 192\.168\.100\.11:8000 max_fails=2 fail_timeout=10s;", text)
    assert re.search(r"server 192\.168\.100\.13:8000 max_fails=2 fail_timeout=10s;", text)
    assert r"~192\.168\.100\.13:8000$ spark3;" in text
    assert "add_header X-Upstream $dgxspark_upstream_name always;" in text


def test_the_config_refuses_metrics_streams_unbuffered_and_never_logs_the_api_key():
    text = balancer_nginx_config(SETTINGS, balancer_upstreams(HOSTS, TP4))
    assert re.search(r"location \^~ /metrics \{\s*return 404;", text)
    assert "proxy_buffering off;" in text and "proxy_read_timeout 1h;" in text
    assert "listen 8080;" in text
    log_format = text[text.index("log_format"):text.index("upstream dgxspark_engine")]
    assert "authorization" not in log_format.lower() and "$http_" not in log_format
    assert text.count("server 192.168") == 1


def test_a_drained_head_is_marked_down_and_only_it():
    text = balancer_nginx_config(dict(SETTINGS, drained=["spark3"]), balancer_upstreams(HOSTS, FLEET))
    assert re.search(r"server 192\.168\.100\.13:8000 [^;]* down;", text)
    assert not re.search(r"server 192\.168\.100\.11:8000 [^;]* down;", text)


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed here")
def test_nginx_accepts_the_config(tmp_path):
    snippet = tmp_path / "balancer.conf"
    snippet.write_text(balancer_nginx_config(dict(SETTINGS, drained=["spark1"]), balancer_upstreams(HOSTS, FLEET)))
    main = tmp_path / "nginx.conf"
    main.write_text("error_log %s/error.log;\npid %s/nginx.pid;\nevents {}\nhttp {\n include %s;\n}\n"
                    % (tmp_path, tmp_path, snippet))
    result = subprocess.run(["nginx", "-t", "-q", "-c", str(main), "-e", str(tmp_path / "e.log")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# A head's /metrics as vLLM 0.x prints it: the by-reason gauge and the histograms share
# the prefix and must not count.
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} %s
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} %s
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 7.0
vllm:num_requests_running_total 9
vllm:e2e_request_latency_seconds_count{engine="0",model_name="tiny"} 12.0
"""


@pytest.mark.parametrize(("running", "waiting", "expected"), [("0.0", "0.0", 0), ("2.0", "0.0", 2), ("1.0", "3.0", 4)])
def test_requests_in_flight_are_the_running_and_waiting_gauges_only(running, waiting, expected):
    assert engine_requests_in_flight(METRICS % (running, waiting)) == expected


def test_requests_in_flight_sum_every_engine_of_a_head():
    text = (METRICS % ("1.0", "0.0")) + 'vllm:num_requests_running{engine="1",model_name="tiny"} 2.0\n'
    assert engine_requests_in_flight(text) == 3


def test_requests_in_flight_cannot_be_told_without_the_gauges_and_refuse_a_bad_value():
    assert engine_requests_in_flight("# no vllm here\nprocess_cpu_seconds_total 3.0\n") is None
    with pytest.raises(BalancerError, match="vllm:num_requests_running has the value 'many'"):
        engine_requests_in_flight('vllm:num_requests_running{engine="0"} many\n')
    with pytest.raises(BalancerError, match="expected the text"):
        engine_requests_in_flight(None)


def _wait(name, running, attempts, status=200):
    return {"item": {"name": name}, "status": status, "attempts": attempts,
            "content": METRICS % (running, "0.0") if status == 200 else "", "msg": "Status code was -1"}


def test_the_drain_says_what_each_replica_held_and_what_a_timeout_cuts():
    lines = balancer_drain_lines([_wait("spark1", "0.0", 1), _wait("spark3", "0.0", 7)], 300)
    assert lines == ["The replica of spark1 held no request when drained.",
                     "The replica of spark3 finished its requests in flight 6 s after the drain."]
    cut = balancer_drain_lines([_wait("spark1", "2.0", 31)], 30)
    assert cut == ["The replica of spark1 still held 2 request(s) after balancer_drain_timeout (30 s): stopping it cuts them."]
    down = balancer_drain_lines([_wait("spark3", "0.0", 1, status=-1), {"item": {"name": "spark1"}, "skipped": True}], 300)
    assert down == ["The replica of spark3: its head did not answer on /metrics (Status code was -1); nothing to wait for."]
    with pytest.raises(BalancerError, match="expected a loop result"):
        balancer_drain_lines([{"status": 200}], 300)
