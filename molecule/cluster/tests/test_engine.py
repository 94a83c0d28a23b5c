# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real engine (vLLM's CPU build) serves at TP=4 across the four nodes,
started by site.yml through per-rank systemd units."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from helpers import (
    API_KEY,
    ENGINE_UNIT,
    ROOT,
    completion,
    deployed_record,
    docker_exec,
    engine_container,
    engine_head,
    firing,
    flat,
    group_vars,
    head_pid,
    http_answer,
    inventory_hosts,
    node_state,
    role_settings,
    run_playbook,
    unit_state,
    wait_for,
)

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.dgxspark.cluster.plugins.module_utils._file_set import validation_argv
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_argv import (
    GUARD_PYTHON_DIR,
    SECRETS_TARGET,
    container_wrapper,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_systemd import (
    parse_systemd_exec_line,
    systemd_verify_command,
)

testinfra_hosts = ["local://"]

HOSTS = sorted(inventory_hosts())
WATCHDOG_UNIT = "dgxspark-engine-watchdog.service"
RESTART_LOG = "/var/lib/dgxspark/engine/watchdog-restarts.log"


def exec_start(host):
    unit = node_state(host, "systemctl cat %s" % ENGINE_UNIT)
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return parse_systemd_exec_line(line[len("ExecStart="):])


def test_every_rank_runs_and_the_head_answers_a_completion():
    assert [unit_state(host) for host in HOSTS] == ["active"] * 4
    status, text = completion("The capital of France is", max_tokens=6)
    assert status == 200 and text


@pytest.mark.parametrize("host", HOSTS)
def test_each_rank_runs_the_rendered_multi_node_command_line(host):
    hostvars = inventory_hosts()[host]
    head, _url = engine_head()
    head_address = inventory_hosts()[head]["roce_fabric_address"]
    argv = exec_start(host)
    vllm = argv[argv.index("vllm"):]
    rank = hostvars["engine_service_rank"]
    expected = ["--tensor-parallel-size", "4", "--nnodes", "4", "--node-rank", str(rank),
                "--master-addr", head_address, "--master-port", "29501"]
    joined = " ".join(vllm)
    assert " ".join(expected) in joined
    assert ("--headless" in vllm) == (rank != 0)
    assert ("--port" in vllm) == (rank == 0)
    # The container's init runs exactly these arguments: JSON values arrive intact,
    # behind the wrapper that puts the API guard on PYTHONPATH and exports the API
    # key from its mounted file.
    cmdline = node_state(host, "docker exec dgxspark-engine cat /proc/1/cmdline").split("\0")
    wrapper = container_wrapper(GUARD_PYTHON_DIR, True)
    assert cmdline[cmdline.index("--") + 1:-1] == ["sh", "-c", wrapper, "dgxspark-engine"] + vllm
    assert ("--middleware" in vllm) == (rank == 0)
    assert '{"mode":0}' in vllm


@pytest.mark.parametrize("host", HOSTS)
def test_each_rank_has_its_fabric_environment_and_no_privilege(host):
    hostvars = inventory_hosts()[host]
    env = node_state(host, "docker exec dgxspark-engine env")
    assert "VLLM_HOST_IP=%s\n" % hostvars["roce_fabric_address"] in env
    assert "GLOO_SOCKET_IFNAME=enP2p1s0f1np1\n" in env
    gid = re.search(r"^NCCL_IB_GID_INDEX=(\d+)$", env, re.MULTILINE)
    raw = node_state(host, "cat /run/dgxspark-engine/fabric-gid.env")
    assert gid and raw.strip() == "NCCL_IB_GID_INDEX=%s" % gid.group(1)
    inspect = engine_container(host, "{{.HostConfig.Privileged}} {{.HostConfig.NetworkMode}} {{.HostConfig.IpcMode}} "
                                     "{{.HostConfig.Init}} {{.HostConfig.CapAdd}}")
    assert inspect == "false host host true [IPC_LOCK]"


def management_url():
    """The head's API at its management address, where clients and Prometheus reach it."""
    head, _fabric_url = engine_head()
    return "http://%s:%d" % (inventory_hosts()[head]["ansible_host"], group_vars().get("engine_service_api_port", 8000))


def api_status(path, method="GET", body=None, api_key=""):
    """The HTTP status and text the head's API gives this controller, a host outside the cluster."""
    url = management_url()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_api_asks_the_key_on_every_path_but_health_and_serves_metrics_to_the_monitoring_host_only():
    """vLLM's own check guards /v1 and a few prefixes; the collection's guard, on the head,
    guards the rest. Asked from this controller, outside the cluster: the paths vLLM leaves
    open (a completion through /invocations, the tokenizer, the server's version) refuse a
    request without the key and answer one with it; /health answers anyone; /metrics is
    refused without the key, here and on a node that is not the monitoring host, and served
    to the monitoring host (spark1) and with the key."""
    model = group_vars()["engine_service_served_model_name"]
    open_routes = [
        ("/invocations", "POST", {"model": model, "prompt": "Hello", "max_tokens": 2}),
        ("/tokenize", "POST", {"model": model, "prompt": "Hello"}),
        ("/version", "GET", None),
    ]
    for path, method, body in open_routes:
        assert api_status(path, method, body)[0] == 401, path
        assert api_status(path, method, body, api_key="not-the-key")[0] == 401, path
        assert api_status(path, method, body, api_key=API_KEY)[0] == 200, path
    assert api_status("/health")[0] == 200
    status, text = api_status("/metrics")
    assert status == 403 and "monitoring hosts" in text
    status, text = api_status("/metrics", api_key=API_KEY)
    assert status == 200 and "vllm:num_requests_running" in text
    assert {host: http_answer(management_url() + "/metrics", host) for host in ("spark1", "spark2")} == {
        "spark1": "200", "spark2": "403"}


def test_the_gid_index_is_resolved_per_node_at_start():
    # spark3's extra address moves its fabric GID to index 5.
    indexes = {host: node_state(host, "cat /run/dgxspark-engine/fabric-gid.env").strip() for host in HOSTS}
    assert indexes == {"spark1": "NCCL_IB_GID_INDEX=3", "spark2": "NCCL_IB_GID_INDEX=3",
                       "spark3": "NCCL_IB_GID_INDEX=5", "spark4": "NCCL_IB_GID_INDEX=3"}


@pytest.mark.parametrize("host", HOSTS)
def test_env_and_secrets_files_are_root_only(host):
    record = deployed_record(host)
    listing = node_state(host, "stat -c '%a %U %n' /etc/dgxspark/engine/versions/{0} "
                               "/etc/dgxspark/engine/versions/{0}/engine.env "
                               "/etc/dgxspark/engine/versions/{0}/secrets.env".format(record["version"]))
    assert [line.split()[:2] for line in listing.splitlines()] == [["700", "root"], ["600", "root"], ["600", "root"]]


def test_stopped_watchdogs_and_a_lost_secrets_file_come_back_without_a_restart_and_the_key_is_nowhere(tmp_path):
    """One site.yml run, under -vvv, puts back what was lost beside serving ranks: every
    node's watchdog, stopped by hand, and spark2's secrets file, so the API key really passes
    through a module call. No rank restarts, and the key and the Hub token appear nowhere
    they could be read."""
    # The key is in use: the API refuses a request without it.
    assert completion(api_key="")[0] == 401
    assert completion()[0] == 200
    token = (ROOT / "molecule" / "resources" / "standins" / "hf_hub.token").read_text().strip()
    before = {host: engine_container(host) for host in HOSTS}
    for host in HOSTS:
        node_state(host, "systemctl stop dgxspark-engine-watchdog.service")
    secrets = "/etc/dgxspark/engine/versions/%s/secrets.env" % deployed_record("spark2")["version"]
    node_state("spark2", "rm " + secrets)
    log = tmp_path / "ansible.log"
    result = run_playbook("site.yml", "-vvv", env={"ANSIBLE_LOG_PATH": str(log)})
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    assert log.stat().st_size > 0
    # One change on each node (its watchdog started), one more on spark2 (its secrets file).
    recap = dict(re.findall(r"^(spark\d)\s+:.*?changed=(\d+)", result.stdout, re.MULTILINE))
    assert recap == {"spark1": "1", "spark2": "2", "spark3": "1", "spark4": "1"}, recap
    assert [unit_state(host, "dgxspark-engine-watchdog.service") for host in HOSTS] == ["active"] * 4
    assert {host: engine_container(host) for host in HOSTS} == before
    assert completion()[0] == 200
    assert node_state("spark2", "stat -c '%a %U' " + secrets).split() == ["600", "root"]
    places = {"the -vvv output and log": result.stdout + result.stderr + log.read_text()}
    for host in HOSTS:
        places[host + " docker inspect"] = node_state(host, "docker inspect dgxspark-engine")
        places[host + " process list"] = node_state(host, "ps -eo args")
        places[host + " units"] = node_state(host, "systemctl cat dgxspark-engine.service dgxspark-engine-watchdog.service")
        # Every file other users could read where the collection writes: the node
        # greps them (the secrets go in on stdin, into a root-only file) and names
        # any that holds one.
        holding = subprocess.run(
            ["docker", "exec", "-i", host, "sh", "-c",
             "umask 077; cat > /root/secret-patterns; find /etc/dgxspark /var/lib/dgxspark /run/dgxspark-engine "
             "/etc/systemd/system /srv/models /tmp -type f -perm -o=r -exec grep -lF -f /root/secret-patterns {} + "
             "2>/dev/null; rm -f /root/secret-patterns; true"],
            input=API_KEY + "\n" + token + "\n", capture_output=True, text=True, check=True).stdout
        assert holding == "", "world-readable files on %s hold the API key or the Hub token: %s" % (host, holding)
        # The engine got it only through the mounted root-only file.
        assert SECRETS_TARGET in engine_container(host, "{{range .Mounts}}{{.Destination}}\n{{end}}")
    places["controller files"] = "".join(
        path.read_text(errors="replace") for folder in ("reports", ".cache/facts")
        for path in (ROOT / folder).rglob("*") if path.is_file())
    for place, text in places.items():
        assert API_KEY not in text, "the API key is readable in " + place
        assert token not in text, "the Hub token is readable in " + place


@pytest.mark.parametrize("host", HOSTS)
def test_patches_are_checksummed_read_only_mounts(host):
    patches = group_vars()["engine_service_patches"]
    assert patches, "the simulated inventory carries a patch"
    mounts = engine_container(host, "{{range .Mounts}}{{.Destination}} {{.RW}}\n{{end}}")
    for patch in patches:
        assert "%s false" % patch["dest"] in mounts
        inside = node_state(host, "docker exec dgxspark-engine sha256sum %s" % patch["dest"])
        assert inside.split()[0] == patch["sha256"]


def test_only_the_head_probes_the_api_the_other_ranks_follow_it():
    for host in HOSTS:
        unit = node_state(host, "systemctl cat dgxspark-engine-watchdog.service")
        (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
        argv = parse_systemd_exec_line(line[len("ExecStart="):])
        is_head = inventory_hosts()[host]["engine_service_rank"] == 0
        assert ("--watch" in argv, "--follow" in argv) == (is_head, not is_head), argv
        # A follower sends no completion: it has neither the prompt nor the model.
        assert ("--prompt" in argv) == is_head
        # The head restarts a wedged engine within its budget; a follower rejoins it at its
        # rendezvous port.
        if is_head:
            assert argv[argv.index("--restarts") + 1] == str(role_settings("engine_service")["engine_service_watchdog_restarts"])
            assert argv[argv.index("--restart-log") + 1] == RESTART_LOG
        else:
            master = "%s:%d" % (inventory_hosts()["spark1"]["roce_fabric_address"],
                                role_settings("engine_service")["engine_service_master_port"])
            assert argv[argv.index("--master") + 1] == master, argv
        assert unit_state(host, "dgxspark-engine-watchdog.service") == "active"


def test_the_units_pass_systemd_analyze_and_a_unit_it_refuses_replaces_nothing():
    # The check file_set runs before it writes, run on what it wrote: each rank's units side by
    # side in its version directory (the head's and a follower's watchdog differ), the collector's
    # service and timer, and sshd's drop-in with the unit it extends.
    for host in ("spark1", "spark2"):
        directory = "/etc/dgxspark/engine/versions/%s/" % deployed_record(host)["version"]
        paths = [directory + ENGINE_UNIT, directory + "dgxspark-engine-watchdog.service",
                 "/etc/systemd/system/dgxspark-node-metrics.service", "/etc/systemd/system/dgxspark-node-metrics.timer",
                 "/etc/systemd/system/ssh.service.d/dgxspark-oom.conf"]
        script = "; ".join("%s || echo 'refused: %s'" % (" ".join(shlex.quote(word) for word in
                                                                  validation_argv(systemd_verify_command(path), path)), path)
                           for path in paths)
        said = node_state(host, script + " 2>&1")
        assert "refused: " not in said, (host, said)
    # A unit systemd refuses, in a set with a new file: the task fails naming the file, the command
    # and systemd-analyze's message, and neither the unit it would replace nor the new file changes.
    directory = "/run/dgxspark-validate-check"
    good = "[Unit]\nDescription=check\n\n[Service]\nType=oneshot\nExecStart=\"/bin/true\"\n"
    node_state("spark1", "mkdir -p %s && printf '%%s' '%s' > %s/check.service" % (directory, good, directory))
    unit = directory + "/check.service"
    args = {"files": [{"path": unit, "mode": "0644", "content": good.replace("/bin/true", "/no/such/program"),
                       "validate": systemd_verify_command(unit)},
                      {"path": directory + "/new.conf", "mode": "0644", "content": "new\n"}]}
    try:
        done = subprocess.run(["ansible", "spark1", "-i", str(ROOT / "inventory" / "simulated" / "hosts.yml"),
                               "-m", "dgxspark.cluster.file_set", "-a", json.dumps(args)],
                              cwd=ROOT, env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
                              capture_output=True, text=True, timeout=120, check=False)
        out = flat(done.stdout)
        assert done.returncode != 0 and "FAILED!" in out, out[-3000:]
        assert "refusing the file set, nothing was written: file %s: validate" % unit in out, out[-3000:]
        assert "/no/such/program is not executable" in out, out[-3000:]
        assert node_state("spark1", "cat %s; ls %s" % (unit, directory)) == good + "check.service\n"
    finally:
        node_state("spark1", "rm -rf " + directory)


def journal(host, unit, since):
    """The unit's journal on the node since the epoch O(since) (the nodes share this machine's clock)."""
    return node_state(host, "journalctl -u %s --since @%d --no-pager -o cat" % (unit, since))


def test_a_wedged_engine_is_restarted_by_the_heads_watchdog_and_the_other_ranks_rejoin_it():
    """The head's engine core is frozen (SIGSTOP) while the cluster serves. The head's watchdog
    command, exactly as its unit runs it but looking every 2 s with a 5 s completion timeout
    (the simulated inventory's unit looks once a minute, to keep the idle cluster quiet),
    restarts the head's unit and records the restart against its budget; the other ranks' own
    watchdogs stop their ranks as the head's API port closes, and each rank's rejoin unit starts
    it again once the head's rendezvous port is back. The cluster serves again, every rank in a
    new container with its watchdog."""
    head, _url = engine_head()
    before = {host: engine_container(host) for host in HOSTS}
    unit = node_state(head, "systemctl cat " + WATCHDOG_UNIT)
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = parse_systemd_exec_line(line[len("ExecStart="):])
    argv[argv.index("--interval") + 1] = "2"
    argv += ["--timeout", "5"]
    probe_unit = "dgxspark-test-watchdog"
    since = int(time.time())
    docker_exec(head, "rm -f " + RESTART_LOG)
    docker_exec(head, "systemd-run --unit %s --collect --quiet -- %s" % (probe_unit, " ".join(shlex.quote(a) for a in argv)))
    pid = None
    try:
        assert wait_for(lambda: "the engine serves" in journal(head, probe_unit, since), 30), journal(head, probe_unit, since)
        pid = head_pid(head, "VLLM::EngineCor")
        frozen = time.monotonic()
        docker_exec(head, "kill -STOP %s" % pid)
        restarting = "restarting rank unit %s, automatic restart 1 of %d within 3600 s" % (
            ENGINE_UNIT, role_settings("engine_service")["engine_service_watchdog_restarts"])
        assert wait_for(lambda: restarting in journal(head, probe_unit, since), 60, step=0.5), journal(head, probe_unit, since)
        restarted = time.monotonic() - frozen
        assert wait_for(lambda: completion()[0] == 200, 240, step=2), [unit_state(host) for host in HOSTS]
        served = time.monotonic() - frozen
    finally:
        if pid is not None:
            subprocess.run(["docker", "exec", head, "kill", "-CONT", pid], capture_output=True, check=False)
        subprocess.run(["docker", "exec", head, "systemctl", "stop", probe_unit], capture_output=True, check=False)
    print("wedged engine: restarted %.1f s after the freeze, serving again after %.1f s" % (restarted, served))
    # The budget counts it, on the head.
    assert len(node_state(head, "cat " + RESTART_LOG).split()) == 1
    # Every rank runs in a new container: the head restarted, each other rank stopped and rejoined.
    after = {host: engine_container(host) for host in HOSTS}
    assert all(after[host] and after[host].split()[0] != before[host].split()[0] for host in HOSTS), (before, after)
    for host in HOSTS:
        if host != head:
            said = journal(host, "dgxspark-engine-rejoin", since)
            assert "accepts again: starting rank unit %s to rejoin the head's start" % ENGINE_UNIT in said, (host, said)
    assert wait_for(lambda: [unit_state(host, WATCHDOG_UNIT) for host in HOSTS] == ["active"] * 4, 30), \
        [unit_state(host, WATCHDOG_UNIT) for host in HOSTS]
    # The restart's own alerts clear before the tests after this one.
    assert wait_for(lambda: not firing("DgxsparkEngineRankDown") and not firing("DgxsparkEngineReplicaDown"), 60), \
        (firing("DgxsparkEngineRankDown"), firing("DgxsparkEngineReplicaDown"))
    docker_exec(head, "rm -f " + RESTART_LOG)
