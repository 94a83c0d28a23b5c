# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""The balancer in front of the engine replicas, as pure functions.

:func:`balancer_upstreams` finds the replica heads from the engine inventory (each
replica's first rank serves the API); :func:`balancer_config_problems` judges the
balancer's inputs; :func:`balancer_nginx_config` renders the ``conf.d`` file nginx
loads: consistent-hash sticky routing on a session header (the client address when a
request has none), passive health, a response header naming the replica that answered,
``/metrics`` refused (a per-replica series must be scraped from each head, never through
the balancer), no buffering for streamed tokens and long read timeouts;
:func:`engine_requests_in_flight` reads from a head's ``/metrics`` how many requests a
drained replica still runs or queues, so that the roll stops it only once they finished.
Standard library only, unit-tested without Ansible.
"""

from __future__ import annotations

import re

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_argv import replica_layout


class BalancerError(Exception):
    """Inputs the balancer cannot be configured from."""


UPSTREAM = "dgxspark_engine"
_HEADER_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9-]*\Z")
_HOST_RE = re.compile(r"\A[A-Za-z0-9_.:-]+\Z")
_DURATION_RE = re.compile(r"\A[0-9]+(ms|s|m|h)?\Z")


def _variable(name):
    return "balancer_" + name


def balancer_upstreams(hosts, settings, address_key="fabric_address"):
    """The replica heads in replica order: [{name, address, port, replica}].

    O(hosts) maps each engine host to its C(rank) and addresses (C(address_key) names the one
    the balancer reaches it on); O(settings) holds C(tensor_parallel_size), C(replicas) and
    C(api_port) as the engine role takes them.
    """
    if not isinstance(hosts, dict) or not hosts:
        raise BalancerError("no engine hosts: the balancer needs the engine group's hosts and their ranks")
    heads = {}
    for host, facts in sorted(hosts.items()):
        if not isinstance(facts, dict):
            raise BalancerError("engine host %s: %r is not a mapping of its rank and addresses" % (host, facts))
        try:
            layout = replica_layout(settings, facts.get("rank"))
        except Exception as exc:  # EngineConfigError: the preflight play names the fix
            raise BalancerError("engine host %s: %s" % (host, exc)) from exc
        if layout["node_rank"] == 0:
            address = facts.get(address_key)
            if not isinstance(address, str) or not address:
                raise BalancerError("engine host %s (head of replica %d) has no %s" % (host, layout["replica"], address_key))
            heads[layout["replica"]] = {"name": host, "address": address, "port": int(settings["api_port"]),
                                        "replica": layout["replica"]}
    replicas = 1 if settings.get("replicas") is None else settings["replicas"]
    missing = [replica for replica in range(replicas) if replica not in heads]
    if missing:
        raise BalancerError("no head for replica(s) %s: every replica's first rank must be an engine host"
                            % ", ".join(str(replica) for replica in missing))
    return [heads[replica] for replica in sorted(heads)]


def balancer_config_problems(settings, upstreams):
    """Messages for balancer inputs nginx would refuse or misroute; [] when sound."""
    problems = []
    if not isinstance(settings, dict):
        return ["the balancer settings must be a mapping, found %r" % (settings,)]
    port = settings.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        problems.append("%s is %r; expected a port 1-65535. Set it to a free port of the balancer host."
                        % (_variable("port"), port))
    elif port in (settings.get("reserved_ports") or []):
        problems.append("%s is %d, a port the engine takes on the balancer host; expected another port"
                        " (the default is 8080)." % (_variable("port"), port))
    header = settings.get("session_header")
    if not isinstance(header, str) or not _HEADER_RE.match(header):
        problems.append("%s is %r; expected an HTTP header name (letters, digits, dashes), such as X-Session-ID."
                        % (_variable("session_header"), header))
    response_header = settings.get("upstream_header")
    if not isinstance(response_header, str) or not _HEADER_RE.match(response_header):
        problems.append("%s is %r; expected an HTTP header name, such as X-Upstream."
                        % (_variable("upstream_header"), response_header))
    max_fails = settings.get("max_fails")
    if not isinstance(max_fails, int) or isinstance(max_fails, bool) or max_fails < 0:
        problems.append("%s is %r; expected an integer of 0 or more (0 turns passive health off)."
                        % (_variable("max_fails"), max_fails))
    drain_timeout = settings.get("drain_timeout", 0)
    if not isinstance(drain_timeout, int) or isinstance(drain_timeout, bool) or drain_timeout < 0:
        problems.append("%s is %r; expected whole seconds, 0 or more (0 stops a drained replica at once)."
                        % (_variable("drain_timeout"), drain_timeout))
    for key in ("fail_timeout", "read_timeout", "connect_timeout"):
        value = settings.get(key)
        if not isinstance(value, str) or not _DURATION_RE.match(value):
            problems.append("%s is %r; expected an nginx duration such as 10s or 1h." % (_variable(key), value))
    names = [upstream["name"] for upstream in upstreams]
    drained = settings.get("drained") or []
    if not isinstance(drained, list):
        problems.append("%s is %r; expected a list of replica heads." % (_variable("drained_hosts"), drained))
    else:
        unknown = [host for host in drained if host not in names]
        if unknown:
            problems.append("%s names %s, not a replica head; expected some of: %s."
                            % (_variable("drained_hosts"), ", ".join(map(str, unknown)), ", ".join(names)))
        elif names and set(drained) >= set(names):
            problems.append("%s drains every replica (%s): nothing would serve; drain one at a time."
                            % (_variable("drained_hosts"), ", ".join(names)))
    for upstream in upstreams:
        if not _HOST_RE.match(str(upstream.get("address"))):
            problems.append("replica head %s: address %r is not a host name or address"
                            % (upstream.get("name"), upstream.get("address")))
    return problems


def _header_variable(header):
    return "$http_" + header.lower().replace("-", "_")


def balancer_nginx_config(settings, upstreams):
    """The text of the nginx ``conf.d`` file (an ``http`` context snippet)."""
    problems = balancer_config_problems(settings, upstreams)
    if problems:
        raise BalancerError("; ".join(problems))
    if not upstreams:
        raise BalancerError("no replica heads to balance over")
    drained = set(settings.get("drained") or [])
    max_fails = settings["max_fails"]
    fail_timeout = settings["fail_timeout"]
    lines = [
        "# Managed by dgxspark.cluster (role balancer); changes here are overwritten.",
        "# Sticky sessions: the session header picks the replica (its prefix cache",
        "# holds the conversation); requests without one spread by client address.",
        "map %s $dgxspark_session_key {" % _header_variable(settings["session_header"]),
        '    "" $remote_addr;',
        "    default %s;" % _header_variable(settings["session_header"]),
        "}",
        "# The replica that answered, by its head's name: the last address of",
        "# $upstream_addr (after a retry it lists every replica tried).",
        "map $upstream_addr $dgxspark_upstream_name {",
    ]
    for upstream in upstreams:
        lines.append("    ~%s$ %s;" % (re.escape("%s:%d" % (upstream["address"], upstream["port"])), upstream["name"]))
    lines += [
        "    default $upstream_addr;",
        "}",
        "# No Authorization header (the API key) and no request body in the log.",
        "log_format dgxspark_balancer '$remote_addr [$time_local] \"$request\" $status $body_bytes_sent '",
        "                             'upstream=$dgxspark_upstream_name upstream_status=$upstream_status '",
        "                             'request_time=$request_time';",
        "upstream %s {" % UPSTREAM,
        "    hash $dgxspark_session_key consistent;",
    ]
    for upstream in upstreams:
        lines.append("    server %s:%d max_fails=%d fail_timeout=%s%s;  # replica %d" % (
            upstream["address"], upstream["port"], max_fails, fail_timeout,
            " down" if upstream["name"] in drained else "", upstream["replica"]))
    lines += [
        "    keepalive 32;",
        "}",
        "server {",
        "    listen %d;" % settings["port"],
        "    access_log /var/log/nginx/dgxspark-balancer.access.log dgxspark_balancer;",
        "    # Metrics belong to each replica: scraped through here they would mix",
        "    # the replicas into one phantom series.",
        "    location ^~ /metrics {",
        "        return 404;",
        "    }",
        "    location / {",
        "        proxy_pass http://%s;" % UPSTREAM,
        "        proxy_http_version 1.1;",
        '        proxy_set_header Connection "";',
        "        proxy_set_header Host $host;",
        "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        "        # Tokens reach the client as the engine streams them.",
        "        proxy_buffering off;",
        "        proxy_request_buffering off;",
        "        proxy_connect_timeout %s;" % settings["connect_timeout"],
        "        proxy_read_timeout %s;" % settings["read_timeout"],
        "        proxy_send_timeout %s;" % settings["read_timeout"],
        "        # A replica that refuses the connection or is restarting gets the",
        "        # request's one retry elsewhere; a completion has no side effect.",
        "        proxy_next_upstream error timeout http_502 http_503 non_idempotent;",
        "        proxy_next_upstream_tries 2;",
        "        add_header %s $dgxspark_upstream_name always;" % settings["upstream_header"],
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n"


# The engine's own gauges of the requests it holds: those it runs and those it queues.
IN_FLIGHT_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")
_SAMPLE_RE = re.compile(r"\A([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def engine_requests_in_flight(metrics_text):
    """Requests a replica head runs or queues, from its Prometheus text (``/metrics``).

    Sums every sample of ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``
    (one per engine of the head). Returns None when neither gauge is in the text (not a
    vLLM ``/metrics``, or an engine that does not report them): the caller cannot tell.
    """
    if not isinstance(metrics_text, str):
        raise BalancerError("metrics text %r; expected the text of an engine's /metrics" % (metrics_text,))
    found = False
    total = 0.0
    for line in metrics_text.splitlines():
        match = _SAMPLE_RE.match(line)
        if not match or match.group(1) not in IN_FLIGHT_METRICS:
            continue
        try:
            value = float(match.group(3))
        except ValueError as exc:
            raise BalancerError("%s has the value %r; expected a number" % (match.group(1), match.group(3))) from exc
        found = True
        total += value
    return round(total) if found else None


def balancer_drain_lines(results, timeout):
    """One line per drained replica head from the drain's wait (the ``uri`` results of its
    loop, polled once a second with ``until``): whether it held requests, how long they took
    to finish, or what was still running when O(timeout) seconds ran out."""
    if not isinstance(results, list):
        raise BalancerError("drain results %r; expected the list of the wait's loop results" % (results,))
    lines = []
    for result in results:
        if not isinstance(result, dict) or not isinstance(result.get("item"), dict):
            raise BalancerError("drain result %r; expected a loop result with its item" % (result,))
        head = result["item"].get("name")
        if result.get("skipped"):
            continue
        if result.get("status") != 200:
            lines.append("The replica of %s: its head did not answer on /metrics (%s); nothing to wait for."
                         % (head, result.get("msg") or "HTTP %s" % result.get("status")))
            continue
        left = engine_requests_in_flight(result.get("content", ""))
        waited = max(0, int(result.get("attempts", 1)) - 1)
        if left is None:
            lines.append("The replica of %s: its head reports no vllm:num_requests_running; not waited for." % head)
        elif left > 0:
            lines.append("The replica of %s still held %d request(s) after balancer_drain_timeout (%s s): "
                         "stopping it cuts them." % (head, left, timeout))
        elif waited == 0:
            lines.append("The replica of %s held no request when drained." % head)
        else:
            lines.append("The replica of %s finished its requests in flight %d s after the drain." % (head, waited))
    return lines
