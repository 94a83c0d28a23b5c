# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection as users install it: the built tarball, installed with
ansible-galaxy into a fresh path together with the collections it declares
(none, or those of the `ansible` bundle, offline), drives the converged
cluster by FQCN (dgxspark.cluster.site) with no ansible.cfg of the checkout
and no collection but those. That run is also the suite's re-run of site.yml
on the serving cluster: it changes nothing, restarts no rank, measures no
fabric again, and its summary says where the API is and what each part took."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile

import collection_install
from helpers import (
    API_KEY,
    ROOT,
    completion,
    deployed_record,
    engine_container,
    flat,
    group_vars,
    inventory_hosts,
    run_summary,
    run_summary_curl,
)

testinfra_hosts = ["local://"]

# What the checkout's ansible.cfg sets that the playbooks rely on, as an
# installed user sets it (README, "Controller settings and execution environments"): the vault
# identity of the inventory; the rest makes a run fast and its summary readable.
INSTALLED_USER_ENV = {
    "ANSIBLE_VAULT_IDENTITY_LIST": f"simulation@{ROOT}/inventory/simulated/vault-password",
    "ANSIBLE_CALLBACKS_ENABLED": "dgxspark.cluster.preload",
    "ANSIBLE_INJECT_FACT_VARS": "false",
    "ANSIBLE_CALLBACK_RESULT_FORMAT": "yaml",
    "ANSIBLE_PIPELINING": "true",
    "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=300s",
}
# Never in the tarball: caches, virtualenvs, reports, the test harness, and the
# simulated inventory with its vault password.
NOT_SHIPPED = (".cache/", ".venv/", "reports/", "molecule/", "tools/", "inventory/simulated/", ".pytest_cache/")
HOSTS = sorted(inventory_hosts())


def test_installed_collection_reruns_site_yml_with_no_change_no_restart_and_no_fabric_measured(tmp_path):
    collections = tmp_path / "collections"
    env = collection_install.isolated_env(collections)

    def run(*cmd):
        # A fresh directory as the working directory: no ansible.cfg is found there.
        result = subprocess.run(cmd, cwd=tmp_path / "run", env=env, capture_output=True, text=True, timeout=600,
                                check=False)
        assert result.returncode == 0, flat(result.stdout + result.stderr)[-3000:]
        return result.stdout

    (tmp_path / "run").mkdir()
    tarball = collection_install.build(ROOT, tmp_path, run)
    with tarfile.open(tarball) as archive:
        shipped = [member.name + "/" if member.isdir() else member.name for member in archive.getmembers()]
    assert not [name for name in shipped if name.startswith(NOT_SHIPPED)]
    assert "playbooks/site.yml" in shipped and "LICENSE" in shipped

    dependencies = collection_install.install_offline(tarball, collections, run)
    assert "config file = None" in run("ansible-playbook", "--version")
    # The only collections Ansible sees are the installed ones: the checkout and the bundle are out of reach,
    # so site.yml below proves that the declared dependencies are all it needs.
    visible = collection_install.visible_collections(run)
    assert visible == {str(collections / "ansible_collections"): sorted(["dgxspark.cluster", *dependencies])}, visible

    env.update(INSTALLED_USER_ENV)
    # The simulated inventory keeps the fabric report in the checkout's reports/fabric.
    report = ROOT / "reports" / "fabric" / "fabric-report.json"
    report_before = report.stat().st_mtime
    containers = {host: engine_container(host) for host in HOSTS}
    output = run("ansible-playbook", "dgxspark.cluster.site", "-i", str(ROOT / "inventory" / "simulated"))
    recap = {host: (changed, failed) for host, changed, failed in
             re.findall(r"^(spark\d)\s+:.*?changed=(\d+)\s.*?failed=(\d+)", output, re.MULTILINE)}
    assert recap == dict.fromkeys(HOSTS, ("0", "0")), recap
    assert {host: engine_container(host) for host in HOSTS} == containers
    assert completion()[0] == 200
    # The fabric report is a measurement: an unchanged fabric is not measured again.
    assert "Fabric report not measured again" in flat(output)
    assert report.stat().st_mtime == report_before
    # The last play's summary: the balancer's address (the TP=4 lane has one upstream
    # behind it), the model, the layout, the version every rank runs, each part's time,
    # and a curl that answers with the key read from the vault.
    summary = run_summary(output)
    head = inventory_hosts()["spark1"]["ansible_host"]
    assert "API: http://%s:8080/v1 (the balancer on spark1, in front of spark1)" % head in summary, summary
    assert "Model: %s" % group_vars()["engine_service_served_model_name"] in summary, summary
    assert "Layout: one TP=4 lane (spark1, spark2, spark3, spark4; head spark1)" in summary, summary
    # Each rank's version covers its own command line, so the ranks' versions differ: listed per
    # rank, as one deployment of what the inventory renders.
    versions = ", ".join("%s %s" % (host, deployed_record(host)["version"]) for host in HOSTS)
    assert ("Engine: every rank deployed as this inventory renders it (per-rank versions: %s); nothing restarted."
            % versions in summary), summary
    total = next(line for line in summary if line.startswith("Total: "))
    parts = summary[summary.index("Parts (wall time):") + 1:summary.index(total)]
    assert [part.split()[0] for part in parts] == ["preflight", "driver", "runtime", "hardening", "fabric", "fabric_report",
                                                   "image", "weights", "engine", "monitoring", "balancer"], parts
    assert all(re.fullmatch(r"\S+\s+\d+\.\d s", part) for part in parts), parts
    assert API_KEY not in output
    assert run_summary_curl(summary) == "200"

    # The layout comparison, shipped: it reads the runs from and writes beside them in
    # reports/bench of the working directory, never inside the installed collection.
    reports = tmp_path / "run" / "reports" / "bench"
    reports.mkdir(parents=True)
    for fixture in sorted((ROOT / "tests" / "unit" / "fixtures" / "bench" / "reports").glob("*.json")):
        shutil.copy(fixture, reports)
    output = run("ansible-playbook", "dgxspark.cluster.bench_compare", "-i", "localhost,")
    assert re.search(r"^localhost\s+: ok=2\s+changed=1\s", output, re.MULTILINE), output[-2000:]
    assert sorted(path.suffix for path in reports.glob("compare-*")) == [".json", ".md", ".png"]
    # The collection ships report fixtures of its unit tests; what this run wrote must not be beside them.
    assert not list((tmp_path / "collections").rglob("compare-*")), "a report landed in the installed collection"
    assert not (tmp_path / "collections" / "ansible_collections" / "dgxspark" / "cluster" / "reports").exists()
