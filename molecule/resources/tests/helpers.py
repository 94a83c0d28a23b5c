# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side helpers for the Molecule verify tests: run the real
playbooks against the simulated nodes and read the inventory they use."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventory" / "simulated" / "hosts.yml"
GROUP = "dgxspark_cluster"


def inventory_hosts():
    data = yaml.safe_load(INVENTORY.read_text())
    return data[GROUP]["hosts"]


class _InventoryLoader(yaml.SafeLoader):
    """Reads the inventory's YAML; a vaulted value stays its ciphertext."""


_InventoryLoader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))


def group_vars():
    merged = {}
    for path in sorted((ROOT / "inventory" / "simulated" / "group_vars" / GROUP).glob("*.yml")):
        merged.update(yaml.load(path.read_text(), Loader=_InventoryLoader) or {})
    return merged


def run_playbook(playbook, *args, extra_vars=None, check=False, timeout=900, env=None, inventory=INVENTORY):
    """Run a playbook of the collection on the simulated cluster (O(env) added to the
    environment; O(inventory), a copy of the simulated one with a host's override); return
    the CompletedProcess."""
    cmd = ["ansible-playbook", "-i", str(inventory), str(ROOT / "playbooks" / playbook)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if check:
        cmd.append("--check")
    cmd += list(args)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               **(env or {}))
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def run_side_by_side(runs, workers=4):
    """Run independent playbook runs side by side: O(runs) is {name: (playbook, args, extra_vars)},
    the result {name: CompletedProcess}, each the run_playbook a test would make alone. Only for
    runs refused before they change anything (a refusal test's): they share the nodes, so runs
    that change them would race. Most of a refused run is the controller's work, so four at a
    time keep both cores busy where one leaves the second idle."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers) as pool:
        started = {name: pool.submit(run_playbook, playbook, *args, extra_vars=extra_vars)
                   for name, (playbook, args, extra_vars) in runs.items()}
        return {name: future.result() for name, future in started.items()}


def batched_refusals(changes, batches, directory_factory, playbook="site.yml"):
    """Run refusal cases side by side, several cases to a run: O(changes) is {case: change},
    a change being extra vars (a dict) or host entries of an override inventory (YAML text,
    as host_override_args takes); O(batches) is a sequence of case tuples that one run
    carries together, a case in none running alone. Only for cases whose checks report
    every problem they find in one refusal (and before any change): a case's test still
    looks for its own message in its batch's output. Two cases of a batch may set the same
    variable only to the same value or to lists, which are joined; two host overrides in a
    batch must name different hosts, and a variable a host override sets must not be an extra
    var of the batch too (the extra var would hide it). Returns {case: CompletedProcess}."""
    batch_of = {case: batch for batch in batches for case in batch}
    runs, members = {}, {}
    for case in changes:
        members.setdefault(batch_of.get(case, (case,)), []).append(case)
    for batch, cases in members.items():
        extra_vars, overrides, overridden = {}, [], {}
        for case in cases:
            change = changes[case]
            if isinstance(change, str):
                # The host entries as host_override_args places them: every host indented alike.
                for host, host_vars in yaml.safe_load("    " + change).items():
                    assert host not in overridden, "batch %r overrides %s twice; give those cases separate runs" % (batch, host)
                    overridden[host] = set(host_vars)
                overrides.append(change)
                continue
            for name, value in change.items():
                if name in extra_vars and extra_vars[name] != value:
                    assert isinstance(value, list) and isinstance(extra_vars[name], list), \
                        "batch %r sets %s to different values; give those cases separate runs" % (batch, name)
                    value = extra_vars[name] + value
                extra_vars[name] = value
        hidden = set().union(*overridden.values()) & set(extra_vars)
        assert not hidden, "batch %r sets %s as extra vars and in a host override; give those cases separate runs" \
            % (batch, ", ".join(sorted(hidden)))
        args = host_override_args(directory_factory.mktemp("override"), "    ".join(overrides)) if overrides else []
        runs[batch] = (playbook, args, extra_vars or None)
    results = run_side_by_side(runs)
    return {case: results[batch] for batch, cases in members.items() for case in cases}


def selected_cases(request, *functions, param="case"):
    """The O(param) values of the module's tests named O(functions) that this session runs
    (all of them, or those -k or a node id chose): what a module fixture batching the
    cases must run."""
    return [item.callspec.params[param] for item in request.session.items
            if item.module is request.module and getattr(item, "originalname", None) in functions
            and hasattr(item, "callspec") and param in item.callspec.params]


def host_override_args(directory, hosts_yaml):
    """The -i arguments of an inventory file, written under O(directory), that adds
    O(hosts_yaml) (host entries, YAML indented under C(hosts:)) to the simulated one."""
    override = directory / "override.yml"
    override.write_text("%s:\n  hosts:\n    %s" % (GROUP, hosts_yaml))
    return ["-i", str(override)]


def run_summary(output, playbook="site.yml"):
    """The summary the last play of site.yml or restart.yml printed: its lines, stripped,
    from its title to the PLAY RECAP (the debug shows it as one literal block)."""
    lines = output.splitlines()
    starts = [index for index, line in enumerate(lines) if line.strip().startswith(playbook + " summary")]
    assert starts, "no %s summary in the output:\n%s" % (playbook, output[-3000:])
    summary = []
    for line in lines[starts[-1]:]:
        if line.startswith("PLAY RECAP"):
            break
        if line.strip():
            summary.append(line.strip())
    return summary


def run_summary_curl(summary):
    """HTTP status of the summary's "Try it" curl, run as a person would: in the checkout,
    with its ansible.cfg (which names the simulated inventory's vault identity)."""
    (line,) = [line[len("Try it: "):] for line in summary if line.startswith("Try it: curl ")]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(["bash", "-c", line + " -o /dev/null -w '%{http_code}'"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    return done.stdout.strip() or done.stderr.strip()


def assert_nothing_changed(result):
    """The PLAY RECAP of a refused run: every node of the inventory listed with changed=0."""
    recap = dict(re.findall(r"^(spark\d)\s+:.*?changed=(\d+)", result.stdout, re.MULTILINE))
    assert recap == dict.fromkeys(sorted(inventory_hosts()), "0"), "PLAY RECAP: %r" % recap


def node_state(host, command):
    """Output of a read-only command on a node, for before/after comparisons."""
    return subprocess.run(
        ["docker", "exec", host, "sh", "-c", command], capture_output=True, text=True, check=True
    ).stdout


def node_file_digests(hosts, paths):
    """sha256 of each path on each node ('missing' when absent): the 'nothing
    changed' evidence of a refused run."""
    digests = {}
    for host in hosts:
        for path in paths:
            result = subprocess.run(
                ["docker", "exec", host, "sh", "-c", f"sha256sum {path} 2>/dev/null || echo missing"],
                capture_output=True, text=True, check=True,
            )
            digests[(host, path)] = result.stdout.split()[0]
    return digests


# The files the fabric role writes for the fabric port (systemd-networkd's or netplan's,
# roce_fabric_netplan_file): what a refused fabric run must leave as they were.
NETWORK_FILES = [f"/etc/systemd/network/60-dgxspark-{group_vars()['roce_fabric_netdev']}.network",
                 "/etc/netplan/60-dgxspark-fabric.yaml"]


def host_side_veth(host, netdev):
    """Name of the host end of a node's veth: the switch port of the simulation."""
    peer_index = node_state(host, f"cat /sys/class/net/{netdev}/iflink").strip()
    for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout.splitlines():
        index, name = line.split(":")[:2]
        if index.strip() == peer_index:
            return name.strip().split("@")[0]
    raise LookupError(f"no host interface with index {peer_index} for {host}:{netdev}")


def flat(output):
    """Playbook output with line wrapping undone, for matching messages."""
    return " ".join(output.split())


ENGINE_UNIT = "dgxspark-engine.service"
ENGINE_CONTAINER = "dgxspark-engine"


def engine_head():
    """(host, API base URL) of rank 0; the controller reaches the head's
    fabric address over the simulation's fabric bridge."""
    for host, hostvars in inventory_hosts().items():
        if hostvars.get("engine_service_rank") == 0:
            return host, "http://%s:%d" % (hostvars["roce_fabric_address"], group_vars().get("engine_service_api_port", 8000))
    raise LookupError("no host has engine_service_rank 0")


def completion(prompt="Hello", max_tokens=4, timeout=30, api_key=None):
    """(HTTP status or error text, completion text) from the head's API, sent with the
    simulated inventory's API key (API_KEY) unless another is given ('' sends none)."""
    if api_key is None:
        api_key = API_KEY
    import urllib.error
    import urllib.request

    _head, url = engine_head()
    body = json.dumps({"model": group_vars()["engine_service_served_model_name"], "prompt": prompt,
                       "max_tokens": max_tokens, "temperature": 0}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    request = urllib.request.Request(url + "/v1/completions", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())["choices"][0]["text"]
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (urllib.error.URLError, OSError) as exc:
        return str(exc), None


# The plaintext of the simulated inventory's vaulted engine_service_api_key.
API_KEY = (ROOT / "molecule" / "resources" / "standins" / "engine_api.key").read_text().strip()


def unit_state(host, unit=ENGINE_UNIT):
    return subprocess.run(["docker", "exec", host, "systemctl", "is-active", unit],
                          capture_output=True, text=True, check=False).stdout.strip()


def engine_container(host, template="{{.Id}} {{.State.StartedAt}} {{.Image}}"):
    """docker inspect of the rank's container on a node, '' when it does not run."""
    return subprocess.run(["docker", "exec", host, "docker", "inspect", "--format", template, ENGINE_CONTAINER],
                          capture_output=True, text=True, check=False).stdout.strip()


def deployed_record(host):
    """version.json of the version a node runs."""
    return json.loads(node_state(host, "cat /etc/dgxspark/engine/current/version.json"))


# Tokens a serving probe asks for (ServingMonitor's own probe, the fleet's through the balancer):
# see ServingMonitor for why one.
PROBE_MAX_TOKENS = 1


class ServingMonitor:
    """Sends a request every `interval` seconds in a thread and records each
    one, to measure the serving gap of a restart. By default the request is
    a completion to the head and a sample is (started, answered 200); a
    `probe(number, started)` returning its own sample replaces it.

    A probe asks for one token: the simulated ranks share the controller's two
    cores, and a probe of four tokens every 0.5 s made a no-op site.yml take
    69 s instead of 34 s (one token: 43 s). On real nodes, serving does not
    slow the controller; here it would slow every run a fault test watches."""

    def __init__(self, interval=0.5, probe=None):
        import threading

        self.interval = interval
        self.samples = []
        self._probe = probe or (lambda _number, started: (started, completion(max_tokens=PROBE_MAX_TOKENS, timeout=10)[0] == 200))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        number = 0
        while not self._stop.is_set():
            number += 1
            started = time.monotonic()
            self.samples.append(self._probe(number, started))
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def longest_gap(self):
        """Seconds between the last success before the longest outage and the
        first success after it; None when it never served again."""
        if not self.samples or not self.samples[-1][1]:
            return None
        successes = [t for t, ok in self.samples if ok]
        return max((b - a for a, b in itertools.pairwise(successes)), default=0.0)


FAULT_REPORT = ROOT / "reports" / "faults" / "faults.json"


def record_fault(fault, monitor, began):
    """Requests sent and failed while a fault test ran (a ServingMonitor's samples) and
    the test's duration, kept in reports/faults/faults.json for the README's fault table."""
    sent = len(monitor.samples)
    # A sample is (started, answered, ...): a probe may record more after those two.
    failed = sum(1 for sample in monitor.samples if not sample[1])
    entry = {"sent": sent, "failed": failed, "seconds": round(time.monotonic() - began, 1)}
    keep_figure(FAULT_REPORT, fault, entry)
    print("fault %s: %r" % (fault, entry))
    return entry


def keep_figure(path, name, value):
    """Set O(name) to O(value) in the JSON object file O(path), keeping the other figures
    (a run of a single test updates its own)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[name] = value
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def sim_node_boot(host, timeout=60):
    """What a rebooted stand-in node needs to look like a rebooted Spark: Docker gives a
    restarted container its interfaces back under Docker's names, where a Spark keeps its
    port names across boots (prepare.yml renames the port once). Renames the interface
    holding the node's fabric address to the port2 netdev, restarts the RDMA sysfs stand-in
    and networkd (which applies the fabric file the role wrote), and waits for SSH."""
    netdev = group_vars()["roce_fabric_netdev"]
    address = yaml.safe_load(INVENTORY.read_text())["dgxspark_cluster"]["hosts"][host]["ansible_host"]
    deadline = time.monotonic() + timeout
    # Retried until the container's systemd answers (right after the restart it may not yet);
    # a retry finds the port already renamed and only restarts the two units again.
    rename = ["docker", "exec", host, "sh", "-c",
              "for n in $(ls /sys/class/net); do if ip -4 -o addr show dev $n | grep -q ' 192\\.168\\.100\\.'; then "
              f"ip link set $n down; ip addr flush dev $n; ip link set $n name {netdev}; ip link set {netdev} mtu 1500 up; "
              "fi; done; systemctl restart dgxspark-sim-rdma.service systemd-networkd"]
    while subprocess.run(rename, capture_output=True, check=False).returncode != 0:
        assert time.monotonic() < deadline, "%s: the port could not be renamed in %d s" % (host, timeout)
        time.sleep(1)
    while subprocess.run(["ssh-keyscan", "-T", "2", address], capture_output=True, check=False).returncode != 0:
        assert time.monotonic() < deadline, "%s: no SSH %d s after its boot" % (host, timeout)
        time.sleep(1)


def one_version_everywhere(hosts=None):
    """Every rank runs the image its deployed version names, and all ranks the same: no mixed cluster."""
    hosts = sorted(hosts or inventory_hosts())
    records = {host: deployed_record(host) for host in hosts}
    running = {host: engine_container(host, "{{.Image}}") for host in hosts}
    assert len({r["version"] for r in records.values()}) >= 1
    assert len({r["image_id"] for r in records.values()}) == 1, records
    assert running == {host: records[host]["image_id"] for host in hosts}, (running, records)
    assert [unit_state(host) for host in hosts] == ["active"] * len(hosts)
    return records


def run_watched(playbook, watches, extra_vars=None, timeout=900, args=()):
    """Run a playbook (with O(args) added, e.g. host_override_args) and call each callback
    of O(watches) ({pattern: callback}) once, the first time a line of its output matches
    the pattern; a callback that returns True has the controller SIGKILLed (its whole
    process group: the main process and the workers it forked). A callback runs in the
    thread reading the output, so a long one starts its own thread. Returns (returncode,
    output, killed)."""
    cmd = ["ansible-playbook", "-i", str(INVENTORY), *args, str(ROOT / "playbooks" / playbook)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    pending = dict(watches)
    lines = []
    deadline = time.monotonic() + timeout
    killed = False
    try:
        for line in proc.stdout:
            lines.append(line)
            recent = "".join(lines[-40:])
            for pattern in [pattern for pattern in pending if re.search(pattern, recent)]:
                killed = bool(pending.pop(pattern)()) or killed
            if killed or time.monotonic() > deadline:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.returncode, "".join(lines), killed


def run_until_killed(playbook, pattern, extra_vars=None, timeout=600):
    """Start a playbook and SIGKILL the controller as soon as a line of its output matches
    O(pattern). Returns the output up to the kill."""
    _returncode, output, killed = run_watched(playbook, {pattern: lambda: True}, extra_vars, timeout)
    assert killed, "the playbook never reached %r:\n%s" % (pattern, output[-3000:])
    return output


def http_answer(url, host=None, timeout=10):
    """What a GET of url answers, asked from this controller (host None: a host outside the
    cluster) or from the node host: the HTTP status, an error status too, or the class name of
    the error that kept it from answering (ConnectionRefusedError for a connection refused or
    reset at its first packet)."""
    script = ("import urllib.request, urllib.error\n"
              "try:\n print(urllib.request.urlopen(%r, timeout=%d).status)\n"
              "except urllib.error.HTTPError as exc:\n print(exc.code)\n"
              "except Exception as exc:\n print(type(getattr(exc, 'reason', exc)).__name__)" % (url, timeout))
    if host is None:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    return docker_exec(host, "python3 -c " + shlex.quote(script)).stdout.strip()


def docker_exec(host, command):
    """Run O(command) with sh in the node container O(host) (the node's own namespaces)."""
    return subprocess.run(["docker", "exec", host, "sh", "-c", command], capture_output=True, text=True, check=True)


def head_pid(host, comm):
    """PID (in the node's namespace) of the engine process named O(comm)."""
    out = docker_exec(host, "ps -eo pid=,comm=").stdout
    pids = [line.split()[0] for line in out.splitlines() if line.split()[1:] == [comm]]
    assert len(pids) == 1, "processes named %s on %s: %r" % (comm, host, pids)
    return pids[0]


def prometheus_url():
    """The simulated inventory's monitoring host is its first node (it has no monitoring group)."""
    return "http://%s:9090" % next(iter(inventory_hosts().values()))["ansible_host"]


def query(expr):
    """The result of an instant PromQL query against the monitoring host's Prometheus."""
    import urllib.parse
    import urllib.request

    url = prometheus_url() + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def firing(alertname):
    """The labels of each firing alert named O(alertname)."""
    import urllib.request

    with urllib.request.urlopen(prometheus_url() + "/api/v1/alerts", timeout=5) as response:
        alerts = json.loads(response.read())["data"]["alerts"]
    return [a["labels"] for a in alerts if a["labels"]["alertname"] == alertname and a["state"] == "firing"]


def wait_for_alert(alertname, match, timeout, since=None):
    """Seconds from O(since) (a time.monotonic(); default now) until O(alertname) fires with
    labels including O(match); fails the test after O(timeout) seconds."""
    import pytest

    started = time.monotonic() if since is None else since
    while time.monotonic() - started < timeout:
        if any(all(labels.get(k) == v for k, v in match.items()) for labels in firing(alertname)):
            return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    pytest.fail("%s %r did not fire within %d s; firing: %r" % (alertname, match, timeout, firing(alertname)))


ALERT_TIMES = ROOT / "reports" / "monitoring" / "alert-times.json"


def record_alert_time(name, seconds):
    """Keep an alert's time to fire in reports/monitoring/alert-times.json."""
    print("%s fired after %.1f s" % (name, seconds))
    keep_figure(ALERT_TIMES, name, seconds)


def wait_for(predicate, timeout, step=1):
    """Whether O(predicate) held within O(timeout) seconds, asked every O(step) seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def role_settings(*roles):
    """The named roles' defaults overlaid with the simulated inventory's group_vars."""
    merged = {}
    for role in roles:
        merged.update(yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()))
    merged.update(group_vars())
    return merged
