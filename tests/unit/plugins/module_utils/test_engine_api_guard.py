# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import asyncio
import json

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._engine_api_guard import (
    ApiGuard,
    key_digest,
    metrics_networks,
    verdict,
)

KEY = "sk-test-key"
DIGEST = key_digest(KEY)
MONITORING = ("10.10.0.11", 43210)
OUTSIDER = ("203.0.113.7", 50000)
NETWORKS = metrics_networks(["10.10.0.11"], resolve=lambda name: [])[0]


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize", "/invocations", "/pause", "/abort_requests",
                                  "/reset_prefix_cache", "/version", "/load", "/v1/completions", "/v1/models", "/"])
def test_every_path_but_health_and_metrics_needs_the_key(path):
    assert verdict(path, None, OUTSIDER, DIGEST, NETWORKS) == (401, "Unauthorized")
    assert verdict(path, "Bearer wrong", MONITORING, DIGEST, NETWORKS) == (401, "Unauthorized")
    assert verdict(path, "Basic " + KEY, OUTSIDER, DIGEST, NETWORKS) == (401, "Unauthorized")
    assert verdict(path, "Bearer " + KEY, OUTSIDER, DIGEST, NETWORKS) is None
    assert verdict(path, "bearer " + KEY, OUTSIDER, DIGEST, NETWORKS) is None


def test_health_answers_anyone():
    assert verdict("/health", None, OUTSIDER, DIGEST, NETWORKS) is None
    assert verdict("/health", None, None, DIGEST, NETWORKS) is None


@pytest.mark.parametrize("path", ["/metrics", "/metrics/"])
def test_metrics_answer_the_readers_the_node_itself_and_the_key_only(path):
    assert verdict(path, None, MONITORING, DIGEST, NETWORKS) is None
    assert verdict(path, None, ("127.0.0.1", 1), DIGEST, NETWORKS) is None
    assert verdict(path, None, ("::1", 1), DIGEST, NETWORKS) is None
    assert verdict(path, None, ("::ffff:10.10.0.11", 1), DIGEST, NETWORKS) is None
    assert verdict(path, "Bearer " + KEY, OUTSIDER, DIGEST, NETWORKS) is None
    refused = verdict(path, None, OUTSIDER, DIGEST, NETWORKS)
    assert refused[0] == 403 and "monitoring hosts" in refused[1]
    assert verdict(path, None, ("10.10.0.12", 1), DIGEST, NETWORKS)[0] == 403
    assert verdict(path, None, None, DIGEST, NETWORKS)[0] == 403
    # Without a key, metrics still go to the readers only.
    assert verdict(path, None, OUTSIDER, None, NETWORKS)[0] == 403


def test_a_path_that_only_starts_like_metrics_or_health_needs_the_key():
    assert verdict("/metricsX", None, MONITORING, DIGEST, NETWORKS) == (401, "Unauthorized")
    assert verdict("/health/../tokenize", None, OUTSIDER, DIGEST, NETWORKS) == (401, "Unauthorized")
    assert verdict("/healthz", None, OUTSIDER, DIGEST, NETWORKS) == (401, "Unauthorized")


def test_without_a_key_every_other_path_is_open_as_vllm_leaves_it():
    assert verdict("/tokenize", None, OUTSIDER, None, NETWORKS) is None


def test_readers_are_addresses_networks_or_names_and_loopback_is_always_one():
    names = {"prometheus.example": ["10.20.0.5", "fd00::5"], "gone.example": []}
    networks, unresolved = metrics_networks([" 10.10.0.0/24", "", "prometheus.example", "gone.example"],
                                            resolve=names.__getitem__)
    assert [str(network) for network in networks] == ["127.0.0.0/8", "::1/128", "10.10.0.0/24", "10.20.0.5/32",
                                                      "fd00::5/128"]
    assert unresolved == ["gone.example"]


def _request(guard, path, headers=(), client=OUTSIDER, kind="http", method="GET"):
    sent, called = [], []

    async def app(scope, receive, send):
        called.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    scope = {"type": kind, "path": path, "root_path": "", "method": method, "client": client,
             "headers": [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]}
    asyncio.run(ApiGuard(app, environ=guard)(scope, receive, send))
    return called, sent


GUARD_ENV = {"VLLM_API_KEY": KEY, "DGXSPARK_METRICS_CLIENTS": "10.10.0.11"}


def test_the_middleware_refuses_before_the_route_runs_and_passes_what_it_allows():
    called, sent = _request(GUARD_ENV, "/invocations")
    assert called == [] and sent[0]["status"] == 401
    assert json.loads(sent[1]["body"]) == {"error": "Unauthorized"}
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(sent[1]["body"])).encode()
    called, sent = _request(GUARD_ENV, "/invocations", headers=[("Authorization", "Bearer " + KEY)])
    assert called == ["/invocations"] and sent[0]["status"] == 200
    called, sent = _request(GUARD_ENV, "/metrics", client=MONITORING)
    assert called == ["/metrics"]
    called, sent = _request(GUARD_ENV, "/metrics")
    assert called == [] and sent[0]["status"] == 403


def test_a_websocket_without_the_key_is_closed_and_a_cors_preflight_passes():
    called, sent = _request(GUARD_ENV, "/v1/realtime", kind="websocket")
    assert called == [] and sent == [{"type": "websocket.close", "code": 1008}]
    called = _request(GUARD_ENV, "/tokenize", method="OPTIONS")[0]
    assert called == ["/tokenize"]


def test_a_lifespan_event_passes_untouched():
    called = _request(GUARD_ENV, "", kind="lifespan")[0]
    assert called == [""]


def test_the_root_path_is_taken_off_before_judging():
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/api/health", "root_path": "/api", "method": "GET", "client": OUTSIDER,
             "headers": []}
    asyncio.run(ApiGuard(app, environ=GUARD_ENV)(scope, None, send))
    assert sent[0]["status"] == 200


def test_a_reader_name_that_resolves_to_nothing_is_said_on_stderr(capsys):
    ApiGuard(None, environ={"DGXSPARK_METRICS_CLIENTS": "no-such-host.invalid"})
    assert "no-such-host.invalid" in capsys.readouterr().err
