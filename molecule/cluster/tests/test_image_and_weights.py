# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine image and the weights on the simulated cluster: one pull from the
upstream stand-in and the same image ID on every node; a node whose image is
missing or another one is named by the rolling validation and repaired by the
role; an interrupted weight sync resumes from what it left; a damaged weight
file is named and repaired; the Hub token appears neither in the Ansible log
nor in any process's arguments while the weights are fetched."""

from __future__ import annotations

import re
import subprocess
import threading

from helpers import ROOT, flat, group_vars, inventory_hosts, node_state, run_playbook

testinfra_hosts = ["local://"]

HOSTS = sorted(inventory_hosts())
SOURCE = HOSTS[0]
HARNESS = "../molecule/resources/image_and_weights.yml"
WEIGHTS = group_vars()["model_weights_dir"]
TOKEN = (ROOT / "molecule" / "resources" / "standins" / "hf_hub.token").read_text().strip()


def upstream_image_id(version="v1"):
    return subprocess.run(["docker", "exec", "sim-upstream", "docker", "image", "inspect", "--format", "{{.Id}}",
                           "dgxspark/vllm-sim:%s" % version], capture_output=True, text=True, check=True).stdout.strip()


def local_ref(version="v1"):
    digest = upstream_image_digest(version)
    return "dgxspark/engine:" + digest.split("@sha256:")[1][:12]


def upstream_image_digest(version):
    return subprocess.run(["docker", "exec", "sim-upstream", "docker", "image", "inspect", "--format",
                           "{{index .RepoDigests 0}}", "dgxspark/vllm-sim:%s" % version],
                          capture_output=True, text=True, check=True).stdout.strip()


def image_id(host, ref):
    return node_state(host, "docker image inspect --format '{{.Id}}' %s 2>/dev/null || true" % ref).strip()


def test_every_node_holds_the_upstream_image_under_one_id():
    ref = local_ref()
    ids = {host: image_id(host, ref) for host in HOSTS}
    assert set(ids.values()) == {upstream_image_id()}, ids


def test_the_image_reached_the_cluster_through_one_pull():
    # The registry stand-in logs every request; with the spread strategy only
    # the source node asks it for a manifest.
    log = node_state("sim-upstream", "journalctl -u docker-registry --no-pager -o cat")
    pullers = {match.group(1) for match in re.finditer(r'^(\S+) - - \[[^]]*\] "GET /v2/[^ ]*/manifests/', log, re.MULTILINE)}
    assert pullers == {"192.168.99.11"}, pullers


def test_a_missing_or_foreign_image_is_named_and_repaired():
    # On v2, which the engine does not run, so the damage cannot touch a running rank.
    v2 = {"engine_image_ref": "{{ sim_engine_image_refs.v2 }}"}
    assert run_playbook(HARNESS, extra_vars=v2).returncode == 0
    ref, wanted = local_ref("v2"), upstream_image_id("v2")
    # spark3 loses the image; on spark4 the tag points at another image.
    node_state("spark3", "docker image rm --force %s >/dev/null" % wanted)
    node_state("spark4", "docker image rm --force %s >/dev/null && "
                         "tar -cf - --files-from /dev/null | docker import - %s >/dev/null" % (wanted, ref))
    checked = run_playbook(HARNESS, extra_vars=dict(v2, sim_only="verify", sim_expected_image_id=wanted))
    out = flat(checked.stdout)
    assert checked.returncode != 0
    assert "spark3: %s is missing, expected %s" % (ref, wanted) in out, out[-3000:]
    assert "spark4: %s holds sha256:" % ref in out and "expected %s" % wanted in out, out[-3000:]

    repaired = run_playbook(HARNESS, extra_vars=v2)
    out = flat(repaired.stdout)
    assert repaired.returncode == 0, out[-3000:]
    assert "%s streamed " % SOURCE in out and "bytes to 2 node(s)" in out, out[-3000:]
    # Each receiving node said how much it loaded, and how fast, from whom.
    for host in ("spark3", "spark4"):
        assert re.search(r"%s \| image from \S+: [\d.]+ [kMGT]?B in \d+[smh]" % host, out), out[-3000:]
    assert {host: image_id(host, ref) for host in HOSTS} == dict.fromkeys(HOSTS, wanted)
    node_state("spark4", "docker image prune --force >/dev/null")


def test_partial_damaged_and_missing_weights_are_named_and_repaired_and_the_hub_token_stays_hidden(tmp_path):
    """Three losses, repaired by one run: spark2's copy was cut off halfway (what rsync
    --partial leaves), spark3's has the right size and mtime but other bytes (only the
    content check sees it), and the source lost a file it fetches from the Hub again, so
    the token is really used. A check-only run names the damage; the repairing run, under
    -vvv and logged, resumes spark2 from its half, restores spark3 and fetches the file,
    while neither its log nor any process list of the controller or the nodes shows the token."""
    weights = WEIGHTS + "/model.safetensors"
    size = int(node_state("spark2", "stat -c %%s %s" % weights))
    good = node_state(SOURCE, "sha256sum %s" % weights).split()[0]
    node_state("spark2", "truncate -s %d %s" % (size // 2, weights))
    node_state("spark3", f"cp -p {weights} /root/stamp && printf 'XXXX' | dd of={weights} bs=1 seek=4096 conv=notrunc 2>/dev/null "
                         f"&& touch -r /root/stamp {weights}")
    node_state(SOURCE, "rm -f %s/config.json" % WEIGHTS)
    checked = run_playbook(HARNESS, extra_vars={"sim_only": "verify", "model_weights_verify_checksums": "full",
                                                "sim_expected_image_id": upstream_image_id()})
    out = flat(checked.stdout)
    assert checked.returncode != 0
    assert "Damaged: spark3:%s" % weights in out, out[-3000:]

    seen, stop = [], threading.Event()

    def sample_processes():
        while not stop.is_set():
            for host in HOSTS:
                seen.append(subprocess.run(["docker", "exec", host, "ps", "-eo", "args"], capture_output=True,
                                           text=True, check=False).stdout)
            seen.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False).stdout)
            stop.wait(0.2)

    log = tmp_path / "ansible.log"
    sampler = threading.Thread(target=sample_processes, daemon=True)
    sampler.start()
    try:
        result = run_playbook(HARNESS, "-vvv", extra_vars={"model_weights_verify_checksums": "full"},
                              env={"ANSIBLE_LOG_PATH": str(log)})
    finally:
        stop.set()
        sampler.join()
    out = flat(result.stdout)
    assert result.returncode == 0, out[-3000:]
    # spark2 resumed: rsync reused the half it had (matched data is not zero), and said what it moved.
    assert int(node_state("spark2", "stat -c %%s %s" % weights)) == size
    assert re.search(r"spark2 \| weights sync: [\d.]+ [kMGT]?B in \d+[smh]", out), out[-3000:]
    report = [line for line in result.stdout.splitlines() if "Matched data:" in line]
    assert report and any("Matched data: 0 bytes" not in line for line in report), report
    # spark3 holds the source's bytes again.
    assert {host: node_state(host, "sha256sum %s" % weights).split()[0] for host in ("spark2", "spark3")} == \
        {"spark2": good, "spark3": good}
    # The source fetched its file again and said what it fetched.
    assert "config.json" in node_state(SOURCE, "ls %s" % WEIGHTS)
    assert re.search(r"%s \| weights download: [\d.]+ [kMGT]?B in \d+[smh]" % SOURCE, out), out[-3000:]
    assert log.stat().st_size > 0 and len(seen) > 10
    assert TOKEN not in log.read_text()
    assert TOKEN not in result.stdout + result.stderr
    assert not [sample for sample in seen if TOKEN in sample]
    # The Hub stand-in did get it: requests without it are refused.
    hub_log = node_state("sim-upstream", "tail -n 50 /var/log/dgxspark-sim-hf-hub.log")
    assert "config.json" in hub_log and " 200 " in hub_log, hub_log
