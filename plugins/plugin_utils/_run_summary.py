# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""The parts of an entry playbook, the tags that choose them, and the summary its last play prints.

Every part of ``site.yml`` and ``restart.yml`` carries its own tag (:data:`PARTS`); the checks
and the reads the running parts rely on carry ``always``. :func:`part_selection_problems`
refuses ``--tags``/``--skip-tags`` that name no part of the playbook or would skip those checks;
:func:`part_runs` says whether a part's tag is chosen, as ansible-core decides it for a task tagged
with that part only. :func:`run_summary` writes the lines a person acts on: where the API is, a
``curl`` of ``/v1/models`` that reads the API key from the inventory's vault (the key itself never
reaches it), the model, the layout, the engine's per-rank versions (whether each is what the
inventory renders for its rank) and the wall time of each part. Standard
library only, unit-tested without Ansible.
"""

from __future__ import annotations

import difflib
import shlex

# The parts in the order site.yml runs them, each with what it does.
PARTS = (
    ("preflight", "inventory, node and input checks"),
    ("driver", "NVIDIA driver"),
    ("runtime", "Docker and the NVIDIA Container Toolkit"),
    ("hardening", "earlyoom, sshd, memory reserve, journald"),
    ("fabric", "RoCE fabric links"),
    ("fabric_report", "full-mesh fabric report"),
    ("image", "engine image"),
    ("weights", "model weights"),
    ("engine", "engine units, validation, start"),
    ("monitoring", "Prometheus and the collectors"),
    ("balancer", "nginx in front of the replicas"),
)
PART_NAMES = tuple(name for name, _what in PARTS)
# The parts of each entry playbook (the tags it lists besides always), in the order it runs
# them; site.yml and restart.yml check a tag selection against theirs and print the summary.
PLAYBOOK_PARTS = {
    "site.yml": PART_NAMES,
    "restart.yml": ("preflight", "image", "weights", "engine"),
    "engine.yml": ("image", "weights", "engine"),
    "validate.yml": ("fabric_report",),
    "balancer.yml": ("balancer",),
}
# The parts that act on every node of the cluster together, and why: a --limit that
# leaves a node out cannot run them (part_limit_problems). The others act on each node
# of the run alone.
WHOLE_CLUSTER_PARTS = {
    "fabric_report": "the fabric report measures every pair of nodes",
    "image": "the image spreads from one source node to every rank",
    "weights": "the weights spread from one source node to every rank",
    "engine": "the engine validates, stops and starts every rank of a tensor-parallel group together",
    "balancer": "the balancer routes to the head of every replica",
}
# Tags ansible-core gives a meaning of its own that a selection may name.
_RUN_TAGS_ALLOWED = {"all", "always"}
# What protects every part: a run never skips it.
_NEVER_SKIPPED = ("always", "preflight")
# Names of the engine host variables the summary reads; nothing else of a host is looked at.
API_KEY_VARIABLE = "engine_service_api_key"


class RunSummaryError(Exception):
    """Inputs the parts or the summary cannot be worked out from."""


def _tags(value, option):
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(tag, str) for tag in value):
        raise RunSummaryError("%s must be a list of tag names, found %r" % (option, value))
    return list(value)


def part_runs(part, run_tags, skip_tags):
    """Whether part O(part) runs under O(run_tags) (C(ansible_run_tags)) and O(skip_tags)
    (C(ansible_skip_tags)): as ansible-core decides it for a task tagged O(part) alone. The
    preflight part always runs (its checks carry C(always); skipping it is refused)."""
    if part in _NEVER_SKIPPED:
        return True
    run = set(_tags(run_tags, "ansible_run_tags")) or {"all"}
    skip = set(_tags(skip_tags, "ansible_skip_tags"))
    chosen = "all" in run or "tagged" in run or part in run
    return chosen and not ("all" in skip or "tagged" in skip or part in skip)


def playbook_parts(playbook):
    """The parts of entry playbook O(playbook) (V(site.yml), V(restart.yml)), in order."""
    if playbook not in PLAYBOOK_PARTS:
        raise RunSummaryError("%r is no entry playbook with parts; expected one of: %s"
                              % (playbook, ", ".join(sorted(PLAYBOOK_PARTS))))
    return list(PLAYBOOK_PARTS[playbook])


def part_selection_problems(run_tags, skip_tags, playbook="site.yml"):
    """Messages for a tag selection that entry playbook O(playbook) refuses; [] when every
    part it names is one of the playbook's and nothing protective is skipped."""
    parts = playbook_parts(playbook)
    problems = []
    listing = ", ".join(parts)
    skippable = ", ".join(part for part in parts if part not in _NEVER_SKIPPED)
    for option, tags, allowed in (("--tags", _tags(run_tags, "ansible_run_tags"), _RUN_TAGS_ALLOWED),
                                  ("--skip-tags", _tags(skip_tags, "ansible_skip_tags"), set())):
        for tag in tags:
            if option == "--skip-tags" and tag in _NEVER_SKIPPED:
                problems.append(
                    "--skip-tags %s: the preflight checks and the reads every part relies on (tagged always) protect"
                    " the parts that run, so they always run. To run fewer parts, skip some of %s or name the ones"
                    " to run with --tags." % (tag, skippable))
            elif tag not in parts and tag not in allowed:
                # --tags with no part runs only the checks; --skip-tags of a
                # name no task carries skips nothing (tools such as Molecule
                # pass their own, e.g. notest), unless it looks like a
                # misspelt part, which would then run.
                near = difflib.get_close_matches(tag, parts, n=1, cutoff=0.75)
                if option == "--tags" or near:
                    problems.append("%s %s: %s has no part %s%s; its parts are: %s." % (
                        option, tag, playbook, tag, " (did you mean %s?)" % near[0] if near else "", listing))
    return problems


def _hosts_list(hosts, name):
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) for h in hosts):
        raise RunSummaryError("%s must be a list of host names, found %r" % (name, hosts))
    return list(hosts)


def part_limit_problems(run_hosts, cluster_hosts, run_tags, skip_tags, playbook="site.yml"):
    """Messages for a --limit that leaves out nodes of O(cluster_hosts) (the cluster group)
    while O(playbook) runs a part that acts on every node together (C(WHOLE_CLUSTER_PARTS)),
    naming the nodes left out and the fix; [] when O(run_hosts) (C(ansible_play_hosts_all))
    covers the cluster or the tags run only parts that act on each node alone."""
    run_hosts = _hosts_list(run_hosts, "run_hosts")
    cluster_hosts = _hosts_list(cluster_hosts, "cluster_hosts")
    left_out = [host for host in cluster_hosts if host not in run_hosts]
    if not left_out:
        return []
    parts = playbook_parts(playbook)
    whole = [part for part in parts if part in WHOLE_CLUSTER_PARTS and part_runs(part, run_tags, skip_tags)]
    if not whole:
        return []
    local = [part for part in parts if part not in WHOLE_CLUSTER_PARTS and part not in _NEVER_SKIPPED]
    fix = "add them to --limit, or run without --limit"
    if local:
        fix += (", or run only the parts that act on each node alone: --limit %s --tags %s"
                % (",".join(host for host in cluster_hosts if host in run_hosts), ",".join(local)))
    return ["--limit leaves out %s of the cluster (%s), but %s runs %s: %s. So a run of %s alone would leave the"
            " cluster split; %s." % (
                ", ".join(left_out), ", ".join(cluster_hosts), playbook, ", ".join(whole),
                "; ".join(WHOLE_CLUSTER_PARTS[part] for part in whole),
                ", ".join(host for host in cluster_hosts if host in run_hosts) or "no node", fix)]


def _true(value):
    """A boolean fact, also as the text a template may leave it in."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _number(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def _seconds(value):
    return "%.1f s" % value


def _part_times(marks, finished):
    """Seconds per part from O(marks), [part, epoch seconds] in the order the run noted them; each
    mark's time runs until the next one, the last one's until O(finished)."""
    times = {}
    if not isinstance(marks, list):
        raise RunSummaryError("the part marks must be a list of [part, seconds], found %r" % (marks,))
    for index, mark in enumerate(marks):
        if not isinstance(mark, (list, tuple)) or len(mark) != 2:
            raise RunSummaryError("part mark %r is not [part, seconds]" % (mark,))
        part, started = mark
        ended = marks[index + 1][1] if index + 1 < len(marks) else finished
        times[part] = times.get(part, 0.0) + max(0.0, float(ended) - float(started))
    return times


def _selection_text(run_tags, skip_tags):
    words = []
    run = [tag for tag in _tags(run_tags, "ansible_run_tags") if tag != "all"]
    if run:
        words.append("--tags " + ",".join(run))
    skip = _tags(skip_tags, "ansible_skip_tags")
    if skip:
        words.append("--skip-tags " + ",".join(skip))
    return " ".join(words)


def _engine_hosts(hosts):
    """(host, its facts) of every engine host, in rank order."""
    if not isinstance(hosts, dict) or not hosts:
        raise RunSummaryError("no engine hosts: the summary needs the engine group's hosts and their facts")
    ranked = []
    for host, facts in hosts.items():
        rank = facts.get("engine_service_rank")
        ranked.append((rank if isinstance(rank, int) else len(hosts), host, facts))
    return [(host, facts) for _rank, host, facts in sorted(ranked, key=lambda item: (item[0], item[1]))]


def _layout_line(heads, ranks, api):
    tensor_parallel = _number(api.get("tensor_parallel_size"))
    replicas = _number(api.get("replicas"))
    if replicas == 1:
        return "Layout: one TP=%s lane (%s; head %s)" % (tensor_parallel, ", ".join(ranks), heads[0][0])
    return "Layout: %s replicas of TP=%s (heads %s)" % (replicas, tensor_parallel, ", ".join(host for host, _api in heads))


def _deployed_text(engine_hosts):
    """What the ranks run. A rank's version is a digest of its own unit spec (its address, its part of
    the command line), so the ranks of one lane never share one and no fact names the release they
    came from: the one thing that ties them together is that each is what this inventory renders for
    its rank (C(engine_service_version)). The versions are listed per rank, never as if they were
    releases of their own."""
    per_rank = []
    differing = []
    undeployed = 0
    for host, facts in engine_hosts:
        deployed = facts.get("engine_service_deployed_version") or ""
        per_rank.append("%s %s" % (host, deployed or "nothing"))
        undeployed += not deployed
        if not deployed or deployed != facts.get("engine_service_version"):
            differing.append(host)
    listing = "per-rank versions: %s" % ", ".join(per_rank)
    if not differing:
        return "every rank deployed as this inventory renders it (%s)" % listing
    if undeployed == len(per_rank):
        return "nothing deployed on any rank"
    return "%s (%s %s not as this inventory renders %s)" % (
        listing, ", ".join(differing), "is" if len(differing) == 1 else "are", "it" if len(differing) == 1 else "them")


def _engine_line(engine_hosts, engine_ran, check_mode):
    # Every rank of a replica carries that replica's reasons (roles/engine_service/tasks/decide.yml):
    # each reason once, in rank order.
    reasons = list(dict.fromkeys(reason for _host, facts in engine_hosts
                                 for reason in facts.get("engine_service_start_reasons") or []))
    runs = _deployed_text(engine_hosts)
    if not reasons:
        return "Engine: %s; nothing restarted." % runs
    if check_mode:
        return "Engine: %s; a real run would start this inventory's versions (%s)." % (runs, "; ".join(reasons))
    if not engine_ran:
        return "Engine: %s; the engine part did not run, so this inventory's versions are not started (%s)." % (
            runs, "; ".join(reasons))
    return "Engine: %s, started in this run (%s)." % (runs, "; ".join(reasons))


def _curl_line(url, api_key_required, key_host, inventory_sources):
    """A curl of /v1/models; the key, when the engine demands one, is read from the inventory's
    vault by an ad-hoc debug on the controller (no connection to the node), never written here.
    No double quote or backslash, so the line reads the same in the JSON and YAML result formats."""
    command = "curl -sS"
    if api_key_required:
        inventories = " ".join("-i " + shlex.quote(source) for source in inventory_sources)
        reader = ("ANSIBLE_FORCE_COLOR=0 ANSIBLE_NOCOLOR=1 ANSIBLE_CALLBACK_RESULT_FORMAT=json ansible "
                  "%s %s -m ansible.builtin.debug -a var=%s 2>/dev/null"
                  " | sed -n '/_api_key/{s/.*: .//;s/,$//;s/.$//;p;}'"
                  % (shlex.quote(key_host), inventories, API_KEY_VARIABLE))
        command += " --oauth2-bearer $(%s)" % reader
    return "%s %s" % (command, shlex.quote(url + "/v1/models"))


def run_summary(run, hosts):
    """The lines of the summary at the end of an entry playbook.

    O(run) holds C(playbook) (its parts are listed in that order), C(run_tags) and C(skip_tags)
    (C(ansible_run_tags), C(ansible_skip_tags)), C(marks) ([part, epoch seconds] noted at the start
    of each part's plays), C(finished) (epoch seconds), C(check_mode), C(inventory_sources) and
    C(balancer) (the balancer role's C(balancer_endpoint): C(host), C(url), C(serving); none when
    unknown), and C(run_hosts) (C(ansible_play_hosts_all); none: every host). O(hosts) maps each
    engine host to its variables; only C(engine_service_rank), C(engine_service_is_head),
    C(engine_service_api), C(engine_service_version), C(engine_service_deployed_version) and
    C(engine_service_start_reasons) are read. A run whose C(run_hosts) leave out some of O(hosts)
    (a --limit) ran only the parts that act on each node alone: its summary says so and lists the
    parts' times, with no engine to show.
    """
    if not isinstance(run, dict):
        raise RunSummaryError("the run must be a mapping, found %r" % (run,))
    playbook = run.get("playbook", "site.yml")
    parts = playbook_parts(playbook)
    run_tags, skip_tags = run.get("run_tags"), run.get("skip_tags")
    check_mode = bool(run.get("check_mode"))
    title = "%s summary%s" % (playbook, " (check mode: nothing was changed)" if check_mode else "")
    run_hosts = run.get("run_hosts")
    if run_hosts is not None:
        run_hosts = _hosts_list(run_hosts, "run_hosts")
        left_out = [host for host in (hosts or {}) if host not in run_hosts]
        if left_out:
            whole = [part for part in parts if part in WHOLE_CLUSTER_PARTS]
            return [title, "Ran on %s only (--limit, leaving out %s): the parts that act on every node together (%s)"
                    " were left out; run %s without --limit to bring the engine to serving on every node." % (
                        ", ".join(run_hosts), ", ".join(left_out), ", ".join(whole), playbook)
                    ] + _parts_lines(run, parts, run_tags, skip_tags)
    engine_hosts = _engine_hosts(hosts)
    heads = [(host, facts.get("engine_service_api") or {}) for host, facts in engine_hosts
             if _true(facts.get("engine_service_is_head"))]
    if not heads:
        raise RunSummaryError("no engine host is a replica head (engine_service_is_head): the engine_service role's"
                              " facts are missing")
    head_api = heads[0][1]
    balancer = run.get("balancer") or {}

    lines = [title]
    if balancer.get("url") and (_true(balancer.get("serving")) or check_mode):
        behind = ", ".join(host for host, _api in heads)
        state = "" if _true(balancer.get("serving")) else ", once a run without --check installs it"
        lines.append("API: %s/v1 (the balancer on %s, in front of %s%s)" % (balancer["url"], balancer.get("host"), behind, state))
        url = balancer["url"]
    else:
        for host, api in heads:
            lines.append("API: %s/v1 (the head of replica %s on %s; no balancer serves)" % (api.get("url"), api.get("replica"), host))
        if balancer.get("url"):
            lines.append("(the balancer on %s does not serve %s: not installed or running, or its file is not the"
                         " inventory's; site.yml --tags balancer puts it in place)" % (balancer.get("host"), balancer["url"]))
        url = head_api.get("url")
    lines.append("Model: %s" % head_api.get("model"))
    lines.append(_layout_line(heads, [host for host, _facts in engine_hosts], head_api))
    lines.append(_engine_line(engine_hosts, "engine" in parts and part_runs("engine", run_tags, skip_tags), check_mode))
    sources = run.get("inventory_sources") or []
    key_required = _true(head_api.get("api_key_required"))
    lines.append("Try it: " + _curl_line(url, key_required, heads[0][0], sources))
    if key_required:
        lines.append("(the key comes from %s in the inventory's vault: run it where ansible-playbook ran, with the"
                     " same vault identity)" % API_KEY_VARIABLE)

    return lines + _parts_lines(run, parts, run_tags, skip_tags)


def _parts_lines(run, parts, run_tags, skip_tags):
    """Each part's wall time (or why it did not run) and the total."""
    finished = run.get("finished")
    times = _part_times(run.get("marks") or [], finished)
    selection = _selection_text(run_tags, skip_tags)
    lines = ["Parts (wall time):"]
    width = max(len(part) for part in parts) if parts else 0
    for part in parts:
        if part_runs(part, run_tags, skip_tags):
            took = _seconds(times[part]) if part in times else "not measured"
        else:
            took = "not run (%s)" % selection
        lines.append("  %s  %s" % (part.ljust(width), took))
    marks = run.get("marks") or []
    if marks:
        lines.append("Total: %s" % _seconds(max(0.0, float(finished) - float(marks[0][1]))))
    return lines
