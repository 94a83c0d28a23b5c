# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import itertools
import os
import subprocess

import pytest
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.taggable import Taggable

from ansible_collections.dgxspark.cluster.plugins.filter.run_summary import FilterModule
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._run_summary import (
    PART_NAMES,
    PLAYBOOK_PARTS,
    WHOLE_CLUSTER_PARTS,
    RunSummaryError,
    part_limit_problems,
    part_runs,
    part_selection_problems,
    run_summary,
)

SECRET = "sk-do-not-print-0123456789"
INVENTORY = "/srv/ops/inventory/my cluster/hosts.yml"


def api(replica, url, tensor_parallel=4, replicas=1, key=True):
    return {"url": url, "model": "deepseek-v4-flash", "replica": replica, "replicas": replicas,
            "tensor_parallel_size": tensor_parallel, "api_key_required": key}


def engine_hosts(tensor_parallel=4, replicas=1, key=True, deployed="v1", wanted="v1", reasons=()):
    """Engine hosts' variables as hostvars hold them, the API key among them. Each rank's version is
    its own, as the role's digest of the rank's unit spec makes it (V(v1) becomes V(v1-r0), V(v1-r1)...)."""
    hosts = {}
    for rank in range(tensor_parallel * replicas):
        head_rank = rank // tensor_parallel * tensor_parallel
        hosts["spark%d" % (rank + 1)] = {
            "engine_service_rank": rank,
            "engine_service_is_head": rank == head_rank,
            "engine_service_api": api(rank // tensor_parallel, "http://10.0.0.%d:8000" % (head_rank + 11),
                                      tensor_parallel, replicas, key),
            "engine_service_version": "%s-r%d" % (wanted, rank),
            "engine_service_deployed_version": "%s-r%d" % (deployed, rank) if deployed else "",
            # Every rank of the replica carries the replica's reasons, as decide.yml sets them.
            "engine_service_start_reasons": list(reasons),
            "engine_service_api_key": SECRET,
            "model_weights_hf_token": SECRET + "-hub",
        }
    return hosts


def run(**changes):
    marks = [[part, 1000.0 + 2 * index] for index, part in enumerate(PART_NAMES)]
    base = {"playbook": "site.yml", "run_tags": ["all"], "skip_tags": [], "marks": marks,
            "finished": 1000.0 + 2 * len(marks) + 0.5, "check_mode": False, "inventory_sources": [INVENTORY],
            "balancer": {"host": "spark1", "url": "http://10.0.0.11:8080", "serving": True}}
    base.update(changes)
    return base


def line(lines, prefix):
    (found,) = [text for text in lines if text.startswith(prefix)]
    return found


def part_line(lines, part):
    (found,) = [text for text in lines if text.split()[:1] == [part] and text.startswith("  ")]
    return found.split(None, 1)[1]


class TaggedTask(Taggable):
    """A task of its tags alone, judged by ansible-core's own Taggable.evaluate_tags."""

    _loader = DataLoader()

    def __init__(self, tags):
        super().__init__()
        self.tags = tags

    def _get_all_taggable_objects(self):
        return [self]


# Every selection of a few tags, compared with ansible-core's own decision for
# a task tagged with the part alone.
SELECTIONS = [
    (run_tags, skip_tags)
    for run_tags in (["all"], [], ["engine"], ["image", "engine"], ["tagged"], ["always"], ["monitoring"])
    for skip_tags in ([], ["monitoring"], ["engine"], ["all"], ["tagged"])
]


@pytest.mark.parametrize(("run_tags", "skip_tags"), SELECTIONS)
def test_a_part_runs_exactly_when_ansible_core_runs_a_task_tagged_with_it(run_tags, skip_tags):
    for part in PART_NAMES:
        if part == "preflight":
            continue
        expected = TaggedTask([part]).evaluate_tags(set(run_tags), set(skip_tags), {})
        assert part_runs(part, run_tags, skip_tags) == expected, (part, run_tags, skip_tags)


def test_the_preflight_part_always_runs():
    assert part_runs("preflight", ["engine"], ["monitoring"])
    assert part_runs("preflight", ["always"], [])


def test_a_selection_of_parts_passes():
    assert part_selection_problems(["engine", "image"], ["monitoring"], "site.yml") == []
    assert part_selection_problems(["all"], [], "site.yml") == []
    assert part_selection_problems(["always"], ["image"], "restart.yml") == []


def test_a_tag_that_is_no_part_is_refused_naming_the_parts():
    problems = part_selection_problems(["engin"], ["monitorng"], "site.yml")
    assert problems[0] == ("--tags engin: site.yml has no part engin (did you mean engine?); its parts are: "
                           + ", ".join(PART_NAMES) + ".")
    assert problems[1].startswith("--skip-tags monitorng: site.yml has no part monitorng (did you mean monitoring?)")
    assert part_selection_problems(["bogus"], [], "site.yml")[0].startswith("--tags bogus: site.yml has no part bogus;")
    assert part_selection_problems(["monitoring"], [], "restart.yml") == [
        "--tags monitoring: restart.yml has no part monitoring; its parts are: preflight, image, weights, engine."]


def test_skipping_a_tag_no_part_resembles_skips_nothing_and_is_let_through():
    # Molecule's converge runs with --skip-tags molecule-notest,notest.
    assert part_selection_problems(["all"], ["molecule-notest", "notest"], "site.yml") == []


@pytest.mark.parametrize("tag", ["preflight", "always"])
def test_skipping_the_checks_is_refused(tag):
    (problem,) = part_selection_problems([], [tag], "restart.yml")
    assert problem.startswith("--skip-tags %s: the preflight checks" % tag)
    assert "skip some of image, weights, engine" in problem


def test_an_unknown_playbook_is_an_error():
    with pytest.raises(RunSummaryError, match="'bench.yml' is no entry playbook"):
        part_selection_problems([], [], "bench.yml")


CLUSTER = ["spark1", "spark2", "spark3", "spark4"]


@pytest.mark.parametrize("playbook", sorted(PLAYBOOK_PARTS))
def test_a_run_on_every_node_has_no_limit_problem(playbook):
    assert part_limit_problems(list(reversed(CLUSTER)), CLUSTER, [], [], playbook) == []


def test_a_limit_to_one_node_of_site_yml_is_refused_naming_the_nodes_left_out_and_the_fix():
    (problem,) = part_limit_problems(["spark2"], CLUSTER, [], [])
    assert problem.startswith("--limit leaves out spark1, spark3, spark4 of the cluster (spark1, spark2, spark3, spark4)")
    assert "site.yml runs fabric_report, image, weights, engine, balancer" in problem
    assert "every rank of a tensor-parallel group together" in problem
    assert problem.endswith("--limit spark2 --tags driver,runtime,hardening,fabric,monitoring.")


def test_the_parts_that_act_on_each_node_alone_run_under_a_limit():
    assert part_limit_problems(["spark2"], CLUSTER, ["runtime", "hardening"], []) == []
    assert part_limit_problems(["spark2"], CLUSTER, [], list(WHOLE_CLUSTER_PARTS)) == []


def test_one_whole_cluster_part_left_in_the_tags_is_named_alone():
    (problem,) = part_limit_problems(["spark1", "spark2"], CLUSTER, ["runtime", "engine"], [])
    assert "site.yml runs engine: the engine validates" in problem and "image" not in problem


@pytest.mark.parametrize("playbook", ["restart.yml", "engine.yml", "validate.yml", "balancer.yml"])
def test_a_playbook_with_no_node_local_part_offers_only_the_whole_cluster(playbook):
    (problem,) = part_limit_problems(["spark3", "spark4"], CLUSTER, [], [], playbook)
    assert problem.startswith("--limit leaves out spark1, spark2 of the cluster")
    assert problem.endswith("add them to --limit, or run without --limit.") and "--tags" not in problem


@pytest.mark.parametrize("hosts", ["spark1", None, ["spark1", 2]])
def test_host_lists_of_another_shape_are_an_error(hosts):
    with pytest.raises(RunSummaryError, match="run_hosts must be a list of host names"):
        part_limit_problems(hosts, CLUSTER, [], [])


def test_the_limit_filter_wraps_the_function_and_raises_filter_errors():
    problems = FilterModule().filters()["run_limit_problems"](["spark1"], CLUSTER, [], [], "restart.yml")
    assert len(problems) == 1 and "spark2, spark3, spark4" in problems[0]
    with pytest.raises(AnsibleFilterError, match="cluster_hosts must be a list"):
        FilterModule().filters()["run_limit_problems"](["spark1"], "spark1", [], [])


def test_a_run_limited_to_some_nodes_says_what_it_left_out():
    node_parts = ["driver", "runtime", "hardening", "fabric", "monitoring"]
    marks = [[part, 1000.0 + index] for index, part in enumerate(["preflight"] + node_parts)]
    limited = run(run_hosts=["spark2"], run_tags=node_parts, marks=marks, finished=1006.0)
    # The limited hosts have no engine facts: the summary must not need them.
    lines = run_summary(limited, {host: {} for host in CLUSTER})
    assert lines[:2] == [
        "site.yml summary",
        "Ran on spark2 only (--limit, leaving out spark1, spark3, spark4): the parts that act on every node"
        " together (fabric_report, image, weights, engine, balancer) were left out; run site.yml without --limit"
        " to bring the engine to serving on every node.",
    ]
    assert part_line(lines, "driver") == "1.0 s"
    assert part_line(lines, "engine").startswith("not run (")
    assert line(lines, "Total: ") == "Total: 6.0 s"
    # Every node in the run: the ordinary summary.
    assert line(run_summary(run(run_hosts=CLUSTER), engine_hosts()), "Model: ") == "Model: deepseek-v4-flash"
    with pytest.raises(RunSummaryError, match="run_hosts must be a list of host names"):
        run_summary(run(run_hosts="spark2"), engine_hosts())


def test_the_tp4_lane_behind_the_balancer():
    lines = run_summary(run(), engine_hosts())
    assert lines[0] == "site.yml summary"
    assert line(lines, "API: ") == "API: http://10.0.0.11:8080/v1 (the balancer on spark1, in front of spark1)"
    assert line(lines, "Model: ") == "Model: deepseek-v4-flash"
    assert line(lines, "Layout: ") == "Layout: one TP=4 lane (spark1, spark2, spark3, spark4; head spark1)"
    # The ranks' versions differ (each covers its rank's own spec) but are one deployment: not
    # listed as four versions of the engine.
    assert line(lines, "Engine: ") == ("Engine: every rank deployed as this inventory renders it (per-rank versions:"
                                       " spark1 v1-r0, spark2 v1-r1, spark3 v1-r2, spark4 v1-r3); nothing restarted.")
    assert line(lines, "Try it: ").endswith(" http://10.0.0.11:8080/v1/models")


def test_the_fleet_without_a_balancer_names_each_head():
    lines = run_summary(run(balancer=None), engine_hosts(tensor_parallel=2, replicas=2))
    assert [text for text in lines if text.startswith("API: ")] == [
        "API: http://10.0.0.11:8000/v1 (the head of replica 0 on spark1; no balancer serves)",
        "API: http://10.0.0.13:8000/v1 (the head of replica 1 on spark3; no balancer serves)",
    ]
    assert line(lines, "Layout: ") == "Layout: 2 replicas of TP=2 (heads spark1, spark3)"
    assert line(lines, "Try it: ").endswith(" http://10.0.0.11:8000/v1/models")


def test_a_balancer_that_does_not_serve_leaves_the_heads_as_the_api():
    lines = run_summary(run(balancer={"host": "spark1", "url": "http://10.0.0.11:8080", "serving": False}),
                        engine_hosts(replicas=1))
    assert line(lines, "API: ") == "API: http://10.0.0.11:8000/v1 (the head of replica 0 on spark1; no balancer serves)"
    assert line(lines, "(the balancer on spark1 does not serve").endswith("site.yml --tags balancer puts it in place)")
    assert line(lines, "Try it: ").endswith(" http://10.0.0.11:8000/v1/models")


def test_facts_left_as_text_by_a_template_read_the_same():
    hosts = engine_hosts(tensor_parallel=2, replicas=2)
    for facts in hosts.values():
        facts["engine_service_is_head"] = str(facts["engine_service_is_head"])
        facts["engine_service_api"] = {key: str(value) for key, value in facts["engine_service_api"].items()}
    assert run_summary(run(), hosts) == run_summary(run(), engine_hosts(tensor_parallel=2, replicas=2))


def test_a_balancer_that_does_not_serve_yet_is_named_so():
    lines = run_summary(run(balancer={"host": "lb1", "url": "http://10.0.0.5:8080", "serving": False}, check_mode=True),
                        engine_hosts(tensor_parallel=2, replicas=2))
    assert lines[0] == "site.yml summary (check mode: nothing was changed)"
    assert line(lines, "API: ") == ("API: http://10.0.0.5:8080/v1 (the balancer on lb1, in front of spark1, spark3,"
                                    " once a run without --check installs it)")


def test_no_secret_reaches_the_text_the_curl_reads_the_key_from_the_vault():
    lines = run_summary(run(), engine_hosts())
    text = "\n".join(lines)
    assert SECRET not in text
    curl = line(lines, "Try it: ")[len("Try it: "):]
    # The key is read by an ad-hoc debug of engine_service_api_key on the head, from the run's inventory.
    assert curl.startswith("curl -sS --oauth2-bearer $(ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 ANSIBLE_CALLBACK_RESULT_FORMAT=json ansible spark1 -i ")
    assert "-m ansible.builtin.debug -a var=engine_service_api_key" in curl
    assert "-i '%s'" % INVENTORY in curl
    # Readable the same in the JSON and the YAML result format.
    assert '"' not in curl and "\\" not in curl
    assert all(text == text.rstrip() for text in lines)


def test_the_key_reader_extracts_the_key_from_the_ad_hoc_output():
    curl = line(run_summary(run(), engine_hosts()), "Try it: ")
    sed = curl[curl.index("| sed ") + 2:curl.rindex(")")]
    output = 'spark1 | SUCCESS => {\n    "changed": false,\n    "engine_service_api_key": "%s"\n}\n' % SECRET
    done = subprocess.run(["sh", "-c", sed], input=output, capture_output=True, text=True, check=True)
    assert done.stdout == SECRET + "\n"


def test_an_engine_without_a_key_gets_a_plain_curl():
    lines = run_summary(run(), engine_hosts(key=False))
    assert line(lines, "Try it: ") == "Try it: curl -sS http://10.0.0.11:8080/v1/models"
    assert not any("vault" in text for text in lines)


def test_each_part_takes_the_time_until_the_next_mark_and_the_total_is_the_run():
    marks = [["preflight", 100.0], ["driver", 101.5], ["preflight", 103.0], ["image", 103.25], ["engine", 104.0]]
    lines = run_summary(run(marks=marks, finished=110.0), engine_hosts())
    assert part_line(lines, "preflight") == "1.8 s"  # 1.5 s, and the engine playbook's checks 0.25 s
    assert part_line(lines, "driver") == "1.5 s"
    assert part_line(lines, "image") == "0.8 s"
    assert part_line(lines, "engine") == "6.0 s"
    assert part_line(lines, "weights") == "not measured"
    assert line(lines, "Total: ") == "Total: 10.0 s"


def test_parts_the_tags_leave_out_are_shown_as_not_run():
    lines = run_summary(run(run_tags=["engine"], skip_tags=["monitoring"]), engine_hosts())
    assert part_line(lines, "driver") == "not run (--tags engine --skip-tags monitoring)"
    assert part_line(lines, "monitoring") == "not run (--tags engine --skip-tags monitoring)"
    assert part_line(lines, "engine").endswith(" s")
    assert part_line(lines, "preflight").endswith(" s")


def test_restart_lists_its_own_parts():
    lines = run_summary(run(playbook="restart.yml", skip_tags=["weights"]), engine_hosts())
    assert lines[0] == "restart.yml summary"
    listed = [text.split()[0] for text in lines[lines.index("Parts (wall time):") + 1:] if text.startswith("  ")]
    assert listed == list(PLAYBOOK_PARTS["restart.yml"])
    assert part_line(lines, "weights") == "not run (--skip-tags weights)"


EVERY_RANK_V1 = "per-rank versions: spark1 v1-r0, spark2 v1-r1, spark3 v1-r2, spark4 v1-r3"


@pytest.mark.parametrize(("changes", "deployed", "expected"), [
    ({}, "v2", "Engine: every rank deployed as this inventory renders it (per-rank versions: spark1 v2-r0, spark2 v2-r1,"
               " spark3 v2-r2, spark4 v2-r3), started in this run (spark1 runs v1-r0, wants v2-r0)."),
    ({"check_mode": True}, "v1",
     "Engine: %s (spark1, spark2, spark3, spark4 are not as this inventory renders them); a real run would start this"
     " inventory's versions (spark1 runs v1-r0, wants v2-r0)." % EVERY_RANK_V1),
    ({"skip_tags": ["engine"]}, "v1",
     "Engine: %s (spark1, spark2, spark3, spark4 are not as this inventory renders them); the engine part did not run,"
     " so this inventory's versions are not started (spark1 runs v1-r0, wants v2-r0)." % EVERY_RANK_V1),
])
def test_the_engine_line_says_what_this_run_did(changes, deployed, expected):
    lines = run_summary(run(**changes), engine_hosts(deployed=deployed, wanted="v2", reasons=["spark1 runs v1-r0, wants v2-r0"]))
    assert line(lines, "Engine: ") == expected


def test_the_engine_line_names_the_ranks_that_differ_and_a_cluster_with_nothing_deployed():
    hosts = engine_hosts()
    hosts["spark3"]["engine_service_deployed_version"] = "old-r2"
    hosts["spark4"]["engine_service_deployed_version"] = ""
    assert line(run_summary(run(), hosts), "Engine: ") == (
        "Engine: per-rank versions: spark1 v1-r0, spark2 v1-r1, spark3 old-r2, spark4 nothing (spark3, spark4 are not as"
        " this inventory renders them); nothing restarted.")
    hosts["spark4"]["engine_service_deployed_version"] = "v1-r3"
    assert line(run_summary(run(), hosts), "Engine: ").endswith(" (spark3 is not as this inventory renders it); nothing restarted.")
    assert line(run_summary(run(check_mode=True), engine_hosts(deployed="", reasons=["spark1 runs nothing, wants v1-r0"])),
                "Engine: ") == ("Engine: nothing deployed on any rank; a real run would start this inventory's versions"
                                " (spark1 runs nothing, wants v1-r0).")


def test_missing_engine_facts_are_an_error_naming_them():
    hosts = engine_hosts()
    for facts in hosts.values():
        facts["engine_service_is_head"] = False
    with pytest.raises(RunSummaryError, match="engine_service_is_head"):
        run_summary(run(), hosts)
    with pytest.raises(RunSummaryError, match="no engine hosts"):
        run_summary(run(), {})


def test_the_filters_wrap_the_functions_and_raise_filter_errors():
    filters = FilterModule().filters()
    assert sorted(filters) == ["run_limit_problems", "run_part_problems", "run_part_runs", "run_summary"]
    assert filters["run_part_runs"]("image", ["engine"], []) is False
    assert filters["run_summary"](run(), engine_hosts()) == run_summary(run(), engine_hosts())
    with pytest.raises(AnsibleFilterError, match="no entry playbook"):
        filters["run_part_problems"]([], [], "status.yml")


def test_every_pair_of_parts_is_a_valid_selection_of_site_yml():
    for pair in itertools.combinations(PLAYBOOK_PARTS["site.yml"], 2):
        assert part_selection_problems(list(pair), [], "site.yml") == []


def test_the_key_reader_reads_the_key_with_the_real_ansible_even_where_colour_is_forced(tmp_path):
    # Molecule, CI systems and some shells force colour; escape codes in the
    # key would make the balancer answer 400. debug runs on the controller only.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    spark1:\n      engine_service_api_key: %s\n" % SECRET)
    curl = line(run_summary({**run(), "inventory_sources": [str(inventory)]}, engine_hosts()), "Try it: ")
    reader = curl[curl.index("$(") + 2:curl.rindex(")")]
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    done = subprocess.run(["sh", "-c", reader], env={**env, "ANSIBLE_FORCE_COLOR": "1"}, cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.stdout == SECRET + "\n", done.stdout


def test_the_engine_line_gives_each_replicas_reasons_once_though_every_rank_carries_them():
    hosts = engine_hosts(tensor_parallel=2, replicas=2, deployed="v1", wanted="v2")
    for host, reasons in (("spark1", ["spark1 runs v1-r0, wants v2-r0", "spark2 runs v1-r1, wants v2-r1"]),
                          ("spark2", ["spark1 runs v1-r0, wants v2-r0", "spark2 runs v1-r1, wants v2-r1"]),
                          ("spark3", ["spark3's rank is not running"]), ("spark4", ["spark3's rank is not running"])):
        hosts[host]["engine_service_start_reasons"] = reasons
    assert line(run_summary(run(), hosts), "Engine: ").endswith(
        ", started in this run (spark1 runs v1-r0, wants v2-r0; spark2 runs v1-r1, wants v2-r1; spark3's rank is not running).")
