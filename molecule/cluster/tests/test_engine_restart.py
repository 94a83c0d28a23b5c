# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""restart.yml and layout changes on the serving cluster, in order, each
test on the state the one before it left.

The TP=4 lane: a restart of an unchanged version restarts nothing; an
upgrade to a new image serves until the switch and after it, its first
attempt's controller killed mid-switch; the balancer in front of it has one
upstream and refuses /metrics.

Then a Docker daemon option that dockerd refuses: the previous daemon.json
is put back and Docker runs on it, but the ranks did not survive the failed
restart, and the corrected inventory's runtime part changes nothing.

Then the 2xTP=2 fleet, switched to with site.yml (one coordinated restart from
the stopped lane, which also brings back the inventory's image), with a client sending
completions through the balancer all along: sticky sessions; a rolling
upgrade whose first replica is drained under a stream in flight and upgraded,
and whose second, a worker of which cannot start, is rolled back while the
roll stops and the first serves; a replica's node rebooted, which the
balancer routes around, status.yml and the monitoring name, and site.yml
(its controller killed once during the start) brings back, the other
replica untouched. The module fixture switches to the fleet once and, at
the end whatever happened, back to the inventory's TP=4 lane when other tests
follow; the module runs last (conftest.py), so in the whole suite the way back
is judged in check mode instead of paying another coordinated start. The fault tests
record requests sent and failed in reports/faults/faults.json."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from helpers import (
    API_KEY,
    PROBE_MAX_TOKENS,
    ROOT,
    ServingMonitor,
    completion,
    deployed_record,
    docker_exec,
    engine_container,
    firing,
    flat,
    group_vars,
    head_pid,
    host_override_args,
    inventory_hosts,
    node_file_digests,
    node_state,
    one_version_everywhere,
    query,
    record_alert_time,
    record_fault,
    role_settings,
    run_playbook,
    run_summary,
    run_until_killed,
    run_watched,
    sim_node_boot,
    unit_state,
    wait_for,
    wait_for_alert,
)

testinfra_hosts = ["local://"]

HOSTS = sorted(inventory_hosts())
V2 = {"engine_image_ref": "{{ sim_engine_image_refs.v2 }}"}
FLEET = {"engine_service_replicas": 2, "engine_service_tensor_parallel_size": 2}
REPLICAS = {"spark1": ("spark1", "spark2"), "spark3": ("spark3", "spark4")}
BALANCER = "http://%s:8080" % inventory_hosts()["spark1"]["roce_fabric_address"]
CONFIG = "/etc/nginx/conf.d/dgxspark-balancer.conf"
TIMINGS = {}


def through_balancer(session=None, path="/v1/completions", timeout=30, api_key=API_KEY, max_tokens=2):
    """(status or error text, X-Upstream, completion text) of one request through the balancer."""
    body = json.dumps({"model": group_vars()["engine_service_served_model_name"], "prompt": "Hello",
                       "max_tokens": max_tokens, "temperature": 0}).encode() if path.startswith("/v1/") else None
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + api_key}
    if session is not None:
        headers["X-Session-ID"] = session
    request = urllib.request.Request(BALANCER + path, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers.get("X-Upstream"), json.loads(response.read())["choices"][0]["text"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("X-Upstream"), None
    except (urllib.error.URLError, OSError) as exc:
        return str(exc), None, None


def balancer_probe(number, started):
    """One completion through the balancer with a new session key (so both replicas get
    traffic): (started, answered 200, seconds, status, upstream), as few tokens as
    ServingMonitor's own probe asks for."""
    status, upstream, _text = through_balancer(session="fleet-%d" % number, timeout=60, max_tokens=PROBE_MAX_TOKENS)
    return (started, status == 200, time.monotonic() - started, status, upstream)


def streamed_through_balancer(session, on_first_token=None, max_tokens=200, timeout=120):
    """(finished, X-Upstream, error) of one streamed completion through the balancer that
    generates max_tokens tokens (ignore_eos), calling O(on_first_token) when its first data
    line came: finished when the stream ended with its finish reason and [DONE], not cut."""
    body = json.dumps({"model": group_vars()["engine_service_served_model_name"], "prompt": "Hello",
                       "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY, "X-Session-ID": session}
    request = urllib.request.Request(BALANCER + "/v1/completions", data=body, headers=headers)
    upstream, reason = None, None
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            upstream = response.headers.get("X-Upstream")
            for raw in response:
                line = raw.strip()
                if line == b"data: [DONE]":
                    return reason == "length", upstream, None if reason == "length" else "finish reason %r" % reason
                if line.startswith(b"data: "):
                    if on_first_token is not None:
                        on_first_token()
                        on_first_token = None
                    choices = json.loads(line[len(b"data: "):]).get("choices") or [{}]
                    reason = choices[0].get("finish_reason") or reason
        return False, upstream, "the stream ended without [DONE]"
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        return False, upstream, "%s: %s" % (type(exc).__name__, exc)


def session_key_of(head):
    """A session key the balancer sends to this replica head."""
    for number in range(64):
        key = "stream-%d" % number
        if through_balancer(session=key)[1] == head:
            return key
    raise AssertionError("no session key of 64 reached the replica of %s" % head)


class StreamHeldInFlight:
    """A stream pinned to O(head)'s replica that stays in flight until the drain has polled it:
    once its first token came, the head's EngineCore is frozen (SIGSTOP), so the head keeps
    reporting one request running; it is thawed 3 s after the drain's wait first retried
    (O(polled), set by the caller), or after 30 s when the wait never does. The stream's
    (finished, X-Upstream, error) lands in O(result)."""

    def __init__(self, head):
        self.head = head
        self.session = session_key_of(head)
        self.pid = head_pid(head, "VLLM::EngineCor")
        self.polled = threading.Event()
        self.frozen_seconds = None
        self.result = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()

    def _hold(self):
        docker_exec(self.head, "kill -STOP %s" % self.pid)
        frozen = time.monotonic()
        try:
            if self.polled.wait(30):
                time.sleep(3)
        finally:
            # Gone when the roll stopped the replica under the stream (no wait).
            subprocess.run(["docker", "exec", self.head, "kill", "-CONT", self.pid], capture_output=True, check=False)
            self.frozen_seconds = time.monotonic() - frozen

    def _run(self):
        self.result = streamed_through_balancer(self.session, on_first_token=self._hold)

    def join(self):
        self._thread.join(120)
        return self.result


def engine_marker(host):
    """The ENGINE_FLEET_MARK environment value the host's rank runs with ('' when unset)."""
    return node_state(host, "docker exec dgxspark-engine printenv ENGINE_FLEET_MARK || true").strip()


def marked(mark):
    """The fleet's extra vars with ENGINE_FLEET_MARK set: a new engine version on every rank."""
    return dict(FLEET, engine_service_env=dict(group_vars()["engine_service_env"], ENGINE_FLEET_MARK=mark))


def timed(name, playbook, *args, extra_vars=None):
    started = time.monotonic()
    result = run_playbook(playbook, *args, extra_vars=extra_vars)
    TIMINGS[name] = round(time.monotonic() - started, 1)
    return result


def upstream_lines():
    """The upstream servers of the balancer's configuration, one line each."""
    return re.findall(r"^\s*(server \d\S* .*)$", node_state("spark1", "cat " + CONFIG), re.MULTILINE)


def image_ids():
    return {host: engine_container(host, "{{.Image}}") for host in HOSTS}


def test_restart_of_an_unchanged_version_restarts_nothing_and_says_how_to_force_it():
    containers = {host: engine_container(host) for host in HOSTS}
    result = run_playbook("restart.yml")
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    assert {host: engine_container(host) for host in HOSTS} == containers
    assert len(re.findall(r"^spark\d\s+:.*changed=0 ", result.stdout, re.MULTILINE)) == len(HOSTS), flat(result.stdout)[-2000:]
    assert "nothing changed, so no rank restarts" in flat(result.stdout)
    assert "-e engine_service_restart=true" in flat(result.stdout)


def test_upgrade_to_a_new_image_serves_until_the_switch_and_after_it_even_when_the_controller_dies_mid_switch():
    """An upgrade whose controller is killed (SIGKILL of ansible-playbook and its workers) as the
    first rank's units switch: the old version keeps serving everywhere, and a re-run of the same
    restart.yml restarts every rank, including those whose units had switched, onto the new
    version together; no rank is left on a mixed version."""
    began = time.monotonic()
    old = {host: deployed_record(host) for host in HOSTS}
    with ServingMonitor() as monitor:
        run_until_killed("restart.yml", r"Switch the units to version \w+\] \*+\s+changed: \[spark\d\]", V2)
        switched = [host for host in HOSTS if deployed_record(host)["version"] != old[host]["version"]]
        assert switched, "the controller was killed before any rank switched"
        # The kill left the old version running on every rank.
        assert image_ids() == {host: old[host]["image_id"] for host in HOSTS}
        killed_at = time.monotonic()
        result = run_playbook("restart.yml", extra_vars=V2)
        time.sleep(2)
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    assert sum(1 for started, ok in monitor.samples if started < killed_at and not ok) == 0
    one_version_everywhere()
    record_fault("controller killed during the unit switch of restart.yml", monitor, began)
    new = {host: deployed_record(host) for host in HOSTS}
    assert len({record["image_id"] for record in new.values()}) == 1
    assert all(new[h]["image_id"] != old[h]["image_id"] and new[h]["version"] != old[h]["version"] for h in HOSTS)
    assert set(image_ids().values()) == {new["spark1"]["image_id"]}
    # The new image's marker is what the head runs now.
    assert node_state("spark1", "docker exec dgxspark-engine cat /etc/dgxspark-sim-engine-version").strip() == "v2"
    gap = monitor.longest_gap()
    assert gap is not None, "the cluster did not serve again after the upgrade"
    # Phase 1 ran while serving: the outage is the coordinated stop and start, well under the run itself.
    served_during_phase_1 = sum(1 for _started, ok in monitor.samples if ok)
    assert served_during_phase_1 > 10
    print("serving gap of the upgrade: %.1f s" % gap)
    # The run says where the gap went, read from the head's journal.
    # (YAML output doubles the quote: gap''s.)
    parts = re.search(r"The gap'{1,2}s parts: stop ([\d.]+) s, startup ([\d.]+) s, rendezvous ([\d.]+) s, "
                      r"model load ([\d.]+) s, engine init ([\d.]+) s, first completion ([\d.]+) s", flat(result.stdout))
    assert parts, flat(result.stdout)[-3000:]
    # The ranks are killed after engine_service_stop_timeout (1 s here, then docker and
    # systemd wind down: a few seconds on a loaded 2-core machine), not systemd's 90 s.
    assert float(parts.group(1)) < 1 + 10
    assert sum(float(value) for value in parts.groups()) <= gap + 5
    for host in HOSTS:
        previous = node_state(host, "readlink /etc/dgxspark/engine/previous").strip()
        assert previous.endswith("/" + old[host]["version"])


def test_the_tp4_lane_serves_through_one_upstream_and_metrics_are_refused():
    assert [line.split()[1] for line in upstream_lines()] == ["192.168.100.11:8000"], upstream_lines()
    status, upstream, _text = through_balancer(session="a")
    assert (status, upstream) == (200, "spark1")
    assert through_balancer(path="/metrics")[0] == 404
    assert through_balancer(path="/metrics/")[0] == 404
    assert "Bearer" not in node_state("spark1", "cat /var/log/nginx/dgxspark-balancer.access.log")


DAEMON_JSON = "/etc/docker/daemon.json"


def test_a_daemon_option_dockerd_refuses_is_rolled_back_and_a_corrected_run_changes_nothing():
    """Every node gets an option only dockerd can judge (-e; the preflight's engine checks need
    the whole cluster): Docker does not come back with it, the previous daemon.json is put
    back and Docker runs on it. The ranks did not survive the failed restart (their units run
    the docker client, which the daemon's exit ends; bookworm's dockerd 20.10 has no
    --validate to refuse the file before the restart). The corrected run is the fleet switch
    below, a full site.yml with the inventory's options: its runtime play has nothing left to
    change (test_the_fleet_serves_both_heads...), and it starts the ranks again."""
    before = node_file_digests(HOSTS, [DAEMON_JSON])
    options = dict(group_vars()["container_runtime_daemon_options"], **{"dgxspark-no-such-option": True})
    result = run_playbook("site.yml", "--tags", "runtime", extra_vars={"container_runtime_daemon_options": options})
    assert result.returncode != 0, result.stdout
    output = flat(result.stdout)
    assert re.search(r"spark\d: (Docker did not start with the new|dockerd --validate refused the new) "
                     r"/etc/docker/daemon\.json", output), output[-3000:]
    assert "dgxspark-no-such-option" in output
    assert node_file_digests(HOSTS, [DAEMON_JSON]) == before
    for host in HOSTS:
        assert node_state(host, "systemctl is-active docker").strip() == "active", host


def later_tests(request):
    """Whether this session runs tests of other modules after this one's (conftest.py puts
    this module last, so in the whole suite none do)."""
    items = request.session.items
    last = max(index for index, item in enumerate(items) if item.module is request.module)
    return any(item.module is not request.module for item in items[last + 1:])


@pytest.fixture(scope="module")
def fleet(request):
    """Switch to 2xTP=2 with site.yml: one coordinated start of every rank (the daemon test
    above left them stopped), which also brings back the inventory's image after the upgrade
    above. At the end, back to the inventory's TP=4 lane when tests of other modules follow
    (a coordinated start of every rank); when none do, as in the whole suite, which destroys
    the cluster next, the way back is judged in check mode: site.yml would start every rank
    as the lane, behind one upstream."""
    try:
        result = timed("switch to 2xTP=2", "site.yml", extra_vars=FLEET)
        assert result.returncode == 0, flat(result.stdout)[-3000:]
        yield result
    finally:
        switch_back = later_tests(request)
        # Only the check-mode way back is judged against the ranks it must leave running.
        fleet_containers = None if switch_back else {host: engine_container(host) for host in HOSTS}
        back = timed("switch back to TP=4" if switch_back else "switch back to TP=4, check mode", "site.yml",
                     *([] if switch_back else ["--check", "--diff"]))
        print("fleet timings (s): %r" % TIMINGS)
    assert back.returncode == 0, flat(back.stdout)[-3000:]
    if switch_back:
        assert completion()[0] == 200
        assert through_balancer(session="a")[:2] == (200, "spark1")
        assert len(upstream_lines()) == 1
        assert engine_marker("spark1") == ""
    else:
        summary = run_summary(back.stdout)
        assert "Layout: one TP=4 lane (spark1, spark2, spark3, spark4; head spark1)" in summary, summary
        (engine,) = [line for line in summary if line.startswith("Engine: ")]
        assert "a real run would start this inventory's versions" in engine, engine
        assert all(len(re.findall(r"%s runs \w+, wants \w+" % host, engine)) == 1 for host in HOSTS), engine
        # The balancer's file would lose the second replica's upstream and keep the first's.
        diff = flat(back.stdout)
        assert re.search(r"^-\s*server 192\.168\.100\.13:8000", back.stdout, re.MULTILINE), diff[-3000:]
        assert not re.search(r"^[-+]\s*server 192\.168\.100\.11:8000", back.stdout, re.MULTILINE), diff[-3000:]
        assert {host: engine_container(host) for host in HOSTS} == fleet_containers, "check mode restarted a rank"
    # The whole file activates five versions or more on every node (upgrade, its way back,
    # the fleet, its roll, the rollback, the lane again): of the versions activated, only
    # engine_service_keep_versions stay, the current and the previous one among them, each
    # old one's secrets gone with it. A version rendered by a run refused before its switch
    # (the reboot test's restart.yml, on every node) stays only until the node's next
    # activation: on spark3 and spark4, which the reboot test's site.yml activated after it,
    # every version kept was activated. (A -k subset activates fewer; the bounds hold all the same.)
    keep = role_settings("engine_service")["engine_service_keep_versions"]
    for host in HOSTS:
        kept = node_state(host, "ls -1 /etc/dgxspark/engine/versions").split()
        linked = node_state(host, "readlink /etc/dgxspark/engine/current /etc/dgxspark/engine/previous").split()
        activated = set(re.findall(r" activated (\w+) ", node_state(host, "cat /var/lib/dgxspark/engine/history.log")))
        kept_activated = [version for version in kept if version in activated]
        assert activated and len(kept_activated) <= keep and {path.rsplit("/", 1)[1] for path in linked} <= set(kept), \
            (host, sorted(activated), kept, linked)
        if host in REPLICAS["spark3"]:
            assert set(kept) <= activated, (host, sorted(activated), kept)


def test_the_fleet_serves_both_heads_sticky_and_a_second_run_changes_nothing(fleet):
    # While the ranks started, every wait round showed the part of the start each was in.
    out = flat(fleet.stdout)
    # The run after the daemon test's refused option: Docker's daemon.json and unit were left
    # as the inventory wants them, so the runtime play changed nothing.
    runtime_play = fleet.stdout.split("PLAY [Node software | Docker and the NVIDIA Container Toolkit]")[1].split("PLAY [")[0]
    assert "ok: [spark4]" in runtime_play and not re.search(r"^changed: ", runtime_play, re.MULTILINE), runtime_play
    for host in HOSTS:
        assert re.search(r"%s \| engine start: (startup|rendezvous|model load|engine init|first completion), "
                         r"\d+[smh]\S* since the unit started" % host, out), out[-3000:]
    config = node_state("spark1", "cat " + CONFIG)
    assert "server 192.168.100.11:8000" in config and "server 192.168.100.13:8000" in config
    for head, ranks in REPLICAS.items():
        for host in ranks:
            record = deployed_record(host)
            assert record["head"] == head and "--tensor-parallel-size" in record["vllm_argv"]
            assert record["vllm_argv"][record["vllm_argv"].index("--tensor-parallel-size") + 1] == "2"
    # Sticky: one key, one replica; many keys reach both.
    for key in ("alice", "bob", "carol"):
        answers = {through_balancer(session=key)[:2] for _attempt in range(4)}
        assert len(answers) == 1 and next(iter(answers))[0] == 200, answers
    spread = {through_balancer(session="key-%d" % n)[1] for n in range(16)}
    assert spread == {"spark1", "spark3"}, spread
    assert through_balancer(path="/metrics")[0] == 404
    # Prometheus scrapes each head itself, never the balancer.
    heads = wait_for(lambda: {r["metric"]["host"] for r in query('up{job="vllm"}')} == set(REPLICAS), 30)
    assert heads, query('up{job="vllm"}')
    again = run_playbook("site.yml", extra_vars=FLEET)
    assert again.returncode == 0 and all("changed=0" in line for line in again.stdout.splitlines()
                                         if line.startswith("spark")), flat(again.stdout)[-2000:]


def test_a_rolling_upgrade_drains_each_replica_cuts_no_stream_and_rolls_back_the_one_that_cannot_start(fleet, tmp_path):
    """restart.yml rolls the replicas while short completions with new session keys go through
    the balancer. As the roll begins, a stream pinned to the replica rolled first (spark1's)
    stays in flight until the drain has polled it (its engine frozen): the drain waits for it,
    that replica is stopped only once the stream finished, the run says how long the drain
    waited, and the replica serves the new version. spark4 (the worker of the replica rolled
    second) cannot start the new version: that replica is rolled back on its own bound, both
    of its ranks stopped and journals collected, and put back; the run fails saying the roll
    stopped, and spark1's upgraded replica is not touched by the rollback. No request fails,
    no stream is cut. (One roll for both outcomes: each replica costs a coordinated start.)"""
    before = {host: deployed_record(host)["version"] for host in HOSTS}
    override = host_override_args(tmp_path, "spark4:\n      engine_service_extra_mounts:\n"
                                  "        - {src: /opt/dgxspark-sim/no-such-runtime, dest: /opt/vllm-runtime}\n")
    since = node_state("spark3", "date -u '+%F %T'").strip()
    stream = StreamHeldInFlight("spark1")
    upgraded = {}

    def second_replica_drained():
        upgraded.update({host: engine_container(host) for host in REPLICAS["spark1"]})

    with ServingMonitor(probe=balancer_probe) as client:
        started = time.monotonic()
        returncode, out, _killed = run_watched("restart.yml", {
            r"PLAY \[Restart \| Roll the replicas one at a time": stream.start,
            r"RETRYING: .*Wait for the drained replicas to finish": stream.polled.set,
            r"Draining the replica of spark3": second_replica_drained,
        }, extra_vars=marked("v2"), args=override)
        TIMINGS["rolling upgrade, second replica rolled back"] = round(time.monotonic() - started, 1)
        streamed = stream.join()
        time.sleep(3)
    out = flat(out)
    failed_requests = [sample for sample in client.samples if not sample[1]]
    longest = max(sample[2] for sample in client.samples)
    print("rolling upgrade: %d requests, %d failed, longest %.2f s; the stream %r, frozen %.1f s; %.1f s"
          % (len(client.samples), len(failed_requests), longest, streamed, stream.frozen_seconds or 0,
             TIMINGS["rolling upgrade, second replica rolled back"]))
    assert returncode != 0, out[-3000:]
    # The first replica: drained while the stream was in flight on it, which was not cut
    # (the drain waited for it, polling its head, before the roll stopped that replica).
    assert "Draining the replica of spark1" in out and "Draining the replica of spark3" in out, out[-3000:]
    assert streamed == (True, "spark1", None), streamed
    assert stream.polled.is_set(), "the drain never waited for the stream in flight"
    waited = re.search(r"The replica of spark1 finished its requests in flight (\d+) s after the drain", out)
    assert waited and int(waited.group(1)) >= 3, re.findall(r"The replica of spark[13][^\]',]*", out)
    assert "stopping it cuts them" not in out
    assert {host: engine_marker(host) for host in REPLICAS["spark1"]} == dict.fromkeys(REPLICAS["spark1"], "v2")
    assert all(deployed_record(host)["version"] != before[host] for host in REPLICAS["spark1"])
    # The second replica: spark4 could not start, so it was rolled back, waiting on its own
    # bound rather than the new version's start timeout, and the roll stopped there.
    assert "spark4: unit dgxspark-engine.service is failed" in out and "Rolled back from" in out, out[-3000:]
    rollback_timeout = group_vars()["engine_service_rollback_timeout"]
    assert rollback_timeout != group_vars()["engine_service_start_timeout"]
    assert "must serve again within engine_service_rollback_timeout=%d s" % rollback_timeout in out, out[-3000:]
    assert "The replica of spark3 did not serve" in out and "The roll stops here" in out, out[-3000:]
    # Its head started the failed version and was stopped with it (spark4's rank never ran)...
    failed = re.search(r"spark3: version (\w+) did not come up healthy", out).group(1)
    journal = node_state("spark3", "journalctl -u dgxspark-engine.service --since '%s' --no-pager -o cat" % since)
    events = [line for line in journal.splitlines() if line.startswith(("Started dgxspark-engine", "Stopped dgxspark-engine"))]
    began = [i for i, line in enumerate(events) if line.startswith("Started") and "version %s)" % failed in line]
    assert began and events[began[0] + 1].startswith("Stopped"), events
    # ...each rank's journal of the failed start reached the controller...
    logs = {host: sorted((ROOT / "reports" / "engine").glob("%s-*.log" % host), key=lambda path: path.stat().st_mtime)
            for host in REPLICAS["spark3"]}
    assert "no-such-runtime" in logs["spark4"][-1].read_text() and failed in logs["spark3"][-1].name
    # ...and it serves its previous version again, back in the balancer.
    assert {host: deployed_record(host)["version"] for host in REPLICAS["spark3"]} == \
        {host: before[host] for host in REPLICAS["spark3"]}
    assert {host: engine_marker(host) for host in REPLICAS["spark3"]} == dict.fromkeys(REPLICAS["spark3"], "")
    assert "rollback:" in node_state("spark4", "tail -n 1 /var/lib/dgxspark/engine/history.log")
    assert [unit_state(host) for host in HOSTS] == ["active"] * 4
    assert not any(" down;" in line for line in upstream_lines()), upstream_lines()
    # The rollback of one replica touched no rank of the other.
    assert upgraded and {host: engine_container(host) for host in REPLICAS["spark1"]} == upgraded
    # Both replicas answered during the roll (one served while the other was drained), and
    # no request failed.
    assert len(client.samples) > 20 and failed_requests == [], failed_requests[:5]
    assert {sample[4] for sample in client.samples} == {"spark1", "spark3"}
    assert {through_balancer(session="key-%d" % n)[1] for n in range(16)} == {"spark1", "spark3"}


def test_a_rebooted_replica_node_is_routed_around_named_and_brought_back(fleet):
    """spark3 (the second replica's head) reboots while a client sends completions through the
    balancer: after balancer_fail_timeout every request is answered by the other replica; the
    rebooted rank does not start at boot, its worker's watchdog stops it (nothing half-alive),
    the rank-down alert fires, status.yml fails naming spark3 while spark1's replica serves,
    and an upgrade with restart.yml is refused before any rank stops (it would leave no
    replica serving). site.yml, its controller killed once as the head is about to start, brings the replica back
    on a re-run, the other replica untouched."""
    fail_timeout = float(str(role_settings("balancer")["balancer_fail_timeout"]).rstrip("s"))
    untouched = {host: engine_container(host) for host in REPLICAS["spark1"]}
    began = time.monotonic()
    with ServingMonitor(probe=balancer_probe) as client:
        rebooted = time.monotonic()
        subprocess.run(["docker", "restart", "spark3"], check=True, capture_output=True)
        sim_node_boot("spark3")
        record_alert_time("DgxsparkEngineRankDown", wait_for_alert("DgxsparkEngineRankDown", {"host": "spark3"},
                                                                   180, since=rebooted))
        # The rebooted rank's unit is not started at boot; its worker, left without a head, stops.
        assert wait_for(lambda: all(unit_state(host) != "active" for host in REPLICAS["spark3"]), timeout=240), \
            {host: unit_state(host) for host in HOSTS}
        assert "half-alive" in node_state("spark4", "journalctl -u dgxspark-engine-watchdog.service --no-pager -o cat | tail -n 5")
        status = run_playbook("status.yml")
        out = flat(status.stdout)
        assert status.returncode != 0
        assert re.search(r"spark3: unit dgxspark-engine\.service is (failed|inactive)", out), out[-3000:]
        assert re.search(r"spark1 \(rank 0, version \w+\): serving", out), out[-3000:]
        # An upgrade now would drain spark1's replica with none left serving, or stop it with
        # every rank: restart.yml refuses before any rank stops (spark1's stay untouched, below).
        refused = run_playbook("restart.yml", extra_vars=marked("v3"))
        out = flat(refused.stdout)
        assert refused.returncode != 0 and "The replica of spark3 (spark3, spark4) is not running." in out, out[-3000:]
        assert "would drain the replica of spark1 while no other serves" in out and "no rank was stopped" in out
        down_samples = list(client.samples)
        # site.yml sees spark3's replica down and starts it. Its controller is killed once as
        # the head is about to start: a re-run converges that replica to one version.
        run_until_killed("site.yml", r"TASK \[[^\]]*Engine \| Start the head rank\]", marked("v2"))
        result = timed("replica brought back", "site.yml", extra_vars=marked("v2"))
        assert result.returncode == 0, flat(result.stdout)[-3000:]
        time.sleep(2)
    one_version_everywhere(REPLICAS["spark3"])
    assert {host: engine_container(host) for host in REPLICAS["spark1"]} == untouched
    # The monitoring stack came back with the node: that run's monitoring play changed nothing.
    monitoring_play = result.stdout.split("PLAY [Monitoring")[1].split("PLAY [")[0]
    assert not re.search(r"^changed: ", monitoring_play, re.MULTILINE), monitoring_play
    # The balancer routed around the rebooted replica: after fail_timeout, every request was
    # answered, by spark1's replica until spark3's served again.
    late = [sample for sample in down_samples if sample[0] > rebooted + fail_timeout]
    assert late and all(sample[1] and sample[4] == "spark1" for sample in late), \
        [sample for sample in late if not sample[1] or sample[4] != "spark1"][:5]
    # Passive health: nginx tries the replica again once fail_timeout has passed since its
    # last failed attempt, which may have been moments before site.yml brought it back;
    # the replica's first answers after its start can take seconds more on a loaded machine.
    answered_by = []

    def both_replicas_answer():
        answered_by[:] = [{through_balancer(session="key-%d" % n)[1] for n in range(16)}]
        return answered_by[0] == {"spark1", "spark3"}
    assert wait_for(both_replicas_answer, timeout=fail_timeout + 30), answered_by
    assert run_playbook("status.yml").returncode == 0
    assert wait_for(lambda: not firing("DgxsparkEngineRankDown") and all(r["value"][1] == "1" for r in query("up")), 60), \
        (firing("DgxsparkEngineRankDown"), query("up"))
    entry = record_fault("a replica's node rebooted while serving through the balancer, site.yml killed during "
                         "its start", client, began)
    print("requests failed within %.0f s of the reboot: %d" % (fail_timeout, entry["failed"]))
