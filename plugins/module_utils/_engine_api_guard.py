# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The guard in front of the engine's API: who may call which path.

vLLM's own key check (``--api-key`` or ``VLLM_API_KEY``) covers only the
paths under ``/v1``, ``/v2``, ``/inference`` and ``/cohere``. Every other
route answers anyone who reaches the port: ``/invocations`` runs a
completion, ``/tokenize`` reads the model, ``/pause``, ``/abort_requests``
and ``/reset_prefix_cache`` act on the serving engine, ``/metrics`` tells
the traffic. This guard is installed on each replica head as an ASGI
middleware (``vllm serve --middleware dgxspark_api_guard.ApiGuard``; the
engine_service role mounts this file into the container as
``dgxspark_api_guard.py`` and puts its directory on ``PYTHONPATH``), outside
vLLM's own, and decides before any route runs:

* ``/health`` answers everyone: balancers and probes ask it without a key;
* ``/metrics`` answers a caller whose address is one of the listed metrics
  readers (``DGXSPARK_METRICS_CLIENTS``: addresses, networks or host names,
  comma-separated; the monitoring hosts by default) or the node itself, and
  any request that carries the key; anyone else gets 403;
* every other path needs the key (``Authorization: Bearer KEY``) when the
  engine has one; without one (``VLLM_API_KEY`` empty) it is open, as vLLM
  would leave it.

CORS preflights (``OPTIONS``) pass, as vLLM lets them: they run no route.
The caller's address is the TCP peer the server saw, never a header a
client could write. Standard library only: it runs on the engine image's
Python, beside vLLM.
"""

import hashlib
import hmac
import ipaddress
import json
import os
import socket
import sys

KEY_ENV = "VLLM_API_KEY"
METRICS_CLIENTS_ENV = "DGXSPARK_METRICS_CLIENTS"
OPEN_PATHS = ("/health",)
METRICS_PATH = "/metrics"
# The node itself may always read its own metrics (the fleet drain reads the
# replica head's count on the head).
LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


# _exporter_access.py holds the same few lines: each file is installed alone.
def _resolve(name):
    """The addresses a host name resolves to (empty when it does not)."""
    try:
        infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return sorted({info[4][0].split("%", 1)[0] for info in infos})


def metrics_networks(entries, resolve=_resolve):
    """The networks allowed to read C(/metrics) without the key, and the entries that named nothing.

    O(entries) are addresses (C(10.10.0.11)), networks (C(10.10.0.0/24)) or
    host names (resolved once, by O(resolve)); empty entries are skipped. The
    loopback networks are always included.
    """
    networks = list(LOOPBACK_NETWORKS)
    unresolved = []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
            continue
        except ValueError:
            pass
        addresses = resolve(entry)
        if not addresses:
            unresolved.append(entry)
        for address in addresses:
            networks.append(ipaddress.ip_network(address))
    return networks, unresolved


def _client_address(client):
    """The caller's address as an ipaddress object, or None (a Unix socket, no peer)."""
    if not client:
        return None
    try:
        address = ipaddress.ip_address(str(client[0]).split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def key_digest(key):
    """The SHA-256 digest the guard compares keys by (None for no key)."""
    return hashlib.sha256(key.encode("utf-8")).digest() if key else None


def carries_key(authorization, digest):
    """Whether an C(Authorization) header value is C(Bearer) with the key whose digest is O(digest)."""
    if digest is None or not authorization:
        return False
    scheme, _separator, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(hashlib.sha256(token.strip().encode("utf-8")).digest(), digest)


def verdict(path, authorization, client, digest, networks):
    """None when the request may pass, else C((status, message)).

    O(path) is the request path without the root path, O(authorization) the
    C(Authorization) header (or None), O(client) the ASGI C((host, port)) of
    the caller, O(digest) the key's (L(key_digest)), O(networks) the metrics
    readers (L(metrics_networks)).
    """
    if path in OPEN_PATHS:
        return None
    if path == METRICS_PATH or path.startswith(METRICS_PATH + "/"):
        if carries_key(authorization, digest):
            return None
        address = _client_address(client)
        if address is not None and any(address in network for network in networks):
            return None
        return (403, "metrics are served to the monitoring hosts and to requests with the API key only")
    if digest is None or carries_key(authorization, digest):
        return None
    return (401, "Unauthorized")


def _header(scope, name):
    for key, value in scope.get("headers") or []:
        if key.decode("latin-1").lower() == name:
            return value.decode("latin-1")
    return None


class ApiGuard:
    """The ASGI middleware: L(verdict) on every HTTP and WebSocket request."""

    def __init__(self, app, environ=None):
        environ = os.environ if environ is None else environ
        self.app = app
        self.digest = key_digest(environ.get(KEY_ENV, ""))
        self.networks, unresolved = metrics_networks(environ.get(METRICS_CLIENTS_ENV, "").split(","))
        for name in unresolved:
            sys.stderr.write("dgxspark_api_guard: metrics reader %r resolves to no address; it is refused /metrics\n" % name)

    async def __call__(self, scope, receive, send):
        if scope.get("type") not in ("http", "websocket") or scope.get("method") == "OPTIONS":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        root_path = scope.get("root_path", "")
        if root_path and path.startswith(root_path):
            path = path[len(root_path):]
        refusal = verdict(path, _header(scope, "authorization"), scope.get("client"), self.digest, self.networks)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": message}).encode("utf-8")
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii"))]})
        await send({"type": "http.response.body", "body": body})
