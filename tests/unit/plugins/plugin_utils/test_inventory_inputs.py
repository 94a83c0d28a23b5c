# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import re

import pytest
import yaml

from unit_support import REPO_ROOT

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import SETTINGS_BY_NAME, _variable
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._inventory_inputs import (
    GROUP_INPUTS,
    INPUT_RANGES,
    InventoryInputsError,
    declared_inputs,
    group_problems,
    input_ranges,
    input_rules,
    inventory_input_problems,
    range_problems,
    role_prefixes,
    unknown_input_problems,
)

SPEC_FILES = sorted(REPO_ROOT.glob("roles/*/meta/argument_specs.yml"))
SPECS = {path.parts[-3]: yaml.safe_load(path.read_text()) for path in SPEC_FILES}
DECLARED = declared_inputs(SPECS)
PREFIXES = role_prefixes(SPECS)


def test_the_prefixes_are_the_roles_names():
    assert "engine_service_" in PREFIXES and "bench_" in PREFIXES and "preflight_" in PREFIXES
    assert len(PREFIXES) == len(SPEC_FILES) >= 12


def test_every_entry_point_counts():
    # engine_service_head_wait is no input of main but of another entry point.
    specs = {"r": {"argument_specs": {"main": {"options": {"r_a": {"type": "int"}}},
                                      "other": {"options": {"r_b": {"type": "str"}}}}}}
    assert set(declared_inputs(specs)) == {"r_a", "r_b"}


def test_unusable_specs_are_an_error():
    with pytest.raises(InventoryInputsError, match="roles/r/meta/argument_specs.yml"):
        declared_inputs({"r": {"options": {}}})


def test_a_misspelt_input_is_refused_with_the_closest_name():
    problems = unknown_input_problems(DECLARED, PREFIXES, "spark2", {"engine_service_start_timout": 600})
    assert problems == [
        "spark2: engine_service_start_timout is set (to 600) but no role declares it, so it would be ignored and "
        "the default used; did you mean engine_service_start_timeout? Rename or remove it in the inventory (the "
        "inputs are in roles/*/meta/argument_specs.yml)."]


def test_declared_inputs_and_names_without_a_role_prefix_pass():
    # The rule: only names with a role's prefix are judged (ansible_host, sim_*, the
    # inventory's own helpers pass), and every declared input of every entry point passes.
    host_vars = dict.fromkeys(DECLARED, 1)
    host_vars.update(ansible_host="10.0.0.1", sim_engine_image_refs={}, inventory_check_done=True)
    assert unknown_input_problems(DECLARED, PREFIXES, "spark1", host_vars) == []


def test_a_misspelt_input_holding_a_string_is_refused_without_its_value():
    # engine_service_api_kee: a vaulted key arrives decrypted; the refusal must not print it.
    [problem] = unknown_input_problems(DECLARED, PREFIXES, "spark1", {"engine_service_api_kee": "sk-not-for-logs"})
    assert "sk-not-for-logs" not in problem
    assert "spark1: engine_service_api_kee is set (its value not shown: it may be a secret)" in problem


def test_a_name_far_from_every_input_gets_no_guess():
    [problem] = unknown_input_problems(DECLARED, PREFIXES, "spark1", {"bench_zzzzzzzzzzzzzzzzzz": True})
    assert "did you mean" not in problem and "bench_zzzzzzzzzzzzzzzzzz is set (to True)" in problem


def _playbook_plays(path):
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", sorted(REPO_ROOT.glob("playbooks/*.yml")), ids=lambda path: path.name)
def test_every_entry_playbook_judges_the_inventory_before_any_node_play(path):
    # The rule that keeps registered results and set_facts (engine_service_started,
    # preflight_node...) out of the check: it runs before any play on a node.
    plays = _playbook_plays(path)
    if path.name == "inventory_check.yml":
        # The controller's play: localhost, with the cluster's hosts beside it only so
        # that a --limit to nodes does not skip it; every task runs once, on the controller.
        (play,) = plays
        assert play["hosts"].startswith("localhost") and play["connection"] == "local"
        for task in play["tasks"]:
            assert "ansible.builtin.meta" in task or (task.get("delegate_to"), task.get("run_once")) == ("localhost", True), task
        return
    if all(play.get("hosts") == "localhost" for play in plays):
        return  # bench_compare.yml reads reports on the controller only
    assert plays[0].get("ansible.builtin.import_playbook") == "inventory_check.yml", path.name


def test_registered_results_with_a_role_prefix_exist_so_the_timing_rule_matters():
    # Were the check run later in a play, these would be refused: the test above must hold.
    registered = set()
    for path in REPO_ROOT.glob("roles/*/tasks/*.yml"):
        registered.update(re.findall(r"^\s*register: (\w+)", path.read_text(), re.MULTILINE))
    internal = {name for name in registered if name.startswith(PREFIXES) and name not in DECLARED}
    assert internal, "no registered result has a role prefix any more"
    assert len(unknown_input_problems(DECLARED, PREFIXES, "h", dict.fromkeys(internal))) == len(internal)


def _numeric_options():
    return sorted({name for name, option in DECLARED.items() if option.get("type") in ("int", "float")})


@pytest.mark.parametrize("name", _numeric_options())
def test_every_numeric_input_has_a_range_or_choices(name):
    assert name in input_ranges() or DECLARED[name].get("choices"), (
        "%s is a number without a range: add it to INPUT_RANGES in plugins/plugin_utils/_inventory_inputs.py "
        "(or give its engine setting's row a minimum/maximum)" % name)


def test_a_range_is_declared_in_one_place():
    engine_variables = {_variable(setting) for setting in SETTINGS_BY_NAME}
    assert not set(INPUT_RANGES) & engine_variables
    assert set(INPUT_RANGES) <= set(DECLARED), set(INPUT_RANGES) - set(DECLARED)


@pytest.mark.parametrize("name, value, expected", [
    ("engine_service_start_timeout", 60, "spark3: engine_service_start_timeout is 60; expected a number 300 or more."),
    ("engine_service_start_timeout", -1, "spark3: engine_service_start_timeout is -1; expected a number 300 or more."),
    ("bench_request_timeout", 0, "spark3: bench_request_timeout is 0; expected a number from 0.01 to 86400."),
    ("model_weights_rsync_port", 70000, "spark3: model_weights_rsync_port is 70000; expected a number from 1 to 65535."),
    ("roce_fabric_mtu", "100", "spark3: roce_fabric_mtu is 100; expected a number from 1280 to 9216."),
])
def test_a_number_outside_its_range_is_refused(name, value, expected):
    assert range_problems(input_ranges(), "spark3", {name: value}) == [expected + " Set it in that range in the inventory."]


@pytest.mark.parametrize("name, value", [
    ("engine_service_start_timeout", 300), ("engine_service_start_timeout", 1500), ("roce_fabric_mtu", 9000),
    ("fabric_report_ping_count", "many"), ("balancer_port", True), ("unrelated", -1),
])
def test_a_number_in_range_or_not_a_number_passes(name, value):
    # Not a number: the role's spec names the type.
    assert range_problems(input_ranges(), "spark1", {name: value}) == []


def test_every_default_is_in_its_range():
    ranges = input_ranges()
    defaults = {name: option["default"] for name, option in DECLARED.items()
                if name in ranges and isinstance(option.get("default"), (int, float))}
    assert defaults and range_problems(ranges, "default", defaults) == []


CLUSTER = ["spark1", "spark2", "spark3", "spark4"]


def _groups(**groups):
    return dict({"dgxspark_cluster": CLUSTER}, **groups)


def _hosts(**overrides):
    return {host: dict(overrides.get(host, {})) for host in CLUSTER}


def test_a_fleet_without_the_balancer_group_is_refused():
    hosts = {"spark1": {"engine_service_replicas": 2}, "spark2": {"engine_service_replicas": 2}}
    assert group_problems(DECLARED, hosts, {"dgxspark_cluster": ["spark1", "spark2"]}) == [
        "spark1, spark2: engine_service_replicas is 2, a fleet that needs the balancer, but the inventory has no "
        "group dgxspark_balancer. Add the group (empty, the balancer runs on rank 0) or set "
        "engine_service_replicas to 1."]
    assert group_problems(DECLARED, hosts, {"dgxspark_cluster": ["spark1", "spark2"], "dgxspark_balancer": []}) == []
    assert group_problems(DECLARED, {"spark1": {"engine_service_replicas": 1}}, {"dgxspark_cluster": ["spark1"]}) == []


def test_the_fleet_check_reads_each_hosts_own_balancer_group():
    # A row whose playbook targets "lb": the fleet on spark2, which names lb, needs lb, and
    # the group dgxspark_balancer does not stand in for it.
    rows = {"balancer_group": GROUP_INPUTS["balancer_group"]._replace(group="lb")}
    hosts = _hosts(spark2={"engine_service_replicas": 2, "balancer_group": "lb"})
    assert group_problems(DECLARED, hosts, _groups(dgxspark_balancer=[]), rows) == [
        "spark2: balancer_group is lb, but the inventory has no group lb; expected a group that holds the host nginx "
        "runs on. Add the group, or remove balancer_group from the inventory (without the group, the balancer runs on "
        "the engine's rank 0)."]
    assert group_problems(DECLARED, hosts, _groups(lb=[]), rows) == []


def test_a_balancer_group_other_than_the_one_the_playbook_targets_is_refused():
    hosts = _hosts(spark3={"balancer_group": "lb"})
    assert group_problems(DECLARED, hosts, _groups(dgxspark_balancer=[], lb=["lb1"])) == [
        "spark3: balancer_group is lb; expected dgxspark_balancer, the group playbooks/balancer.yml runs the role on "
        "(a play's hosts: is read before any host's variables, so the playbook names the group itself and the hosts "
        "of lb would be left out). Put the host nginx runs on in the group dgxspark_balancer and remove "
        "balancer_group from the inventory."]


MONITORING_ABSENT = "(without the group, Prometheus runs on the first host of monitoring_node_group)"


@pytest.mark.parametrize("hosts, groups, expected", [
    # Named by the inventory but missing: Prometheus would land on the first engine host.
    (_hosts(spark1={"monitoring_server_group": "monitoring"}), _groups(),
     "spark1: monitoring_server_group is monitoring, but the inventory has no group monitoring; expected a group that "
     "holds the host Prometheus runs on. Add the group, or remove monitoring_server_group from the inventory "
     + MONITORING_ABSENT + "."),
    # The default's group, present but empty.
    (_hosts(), _groups(monitoring=[]),
     "spark1, spark2, spark3, spark4: monitoring_server_group is monitoring (the default), but the group monitoring "
     "holds no host; expected the host Prometheus runs on in it. Put the host Prometheus runs on in the group, or "
     "remove the empty group (without it, Prometheus runs on the first host of monitoring_node_group)."),
    (_hosts(spark4={"monitoring_server_group": "prometheus"}), _groups(prometheus=["mon1"]),
     "spark4: monitoring_server_group is prometheus; expected monitoring, the group playbooks/site.yml and "
     "playbooks/status.yml run the role on"),
    (_hosts(spark2={"monitoring_node_group": "sparks"}), _groups(sparks=CLUSTER),
     "spark2: monitoring_node_group is sparks; expected dgxspark_cluster, the group playbooks/site.yml and "
     "playbooks/status.yml run the role on"),
], ids=["named_but_missing", "empty", "another_server_group", "another_node_group"])
def test_a_monitoring_group_the_layout_cannot_use_is_refused(hosts, groups, expected):
    problems = group_problems(DECLARED, hosts, groups)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_the_monitoring_layouts_that_work_pass():
    # No monitoring group: Prometheus on the first engine host, as documented.
    assert group_problems(DECLARED, _hosts(), _groups()) == []
    # A monitoring host, also one outside the cluster.
    assert group_problems(DECLARED, _hosts(spark1={"monitoring_server_group": "monitoring"}),
                          _groups(monitoring=["mon1"])) == []
    assert group_problems(DECLARED, dict(_hosts(), mon1={}), _groups(monitoring=["mon1"])) == []


def test_a_host_outside_the_roles_plays_that_leaves_the_inputs_out_is_not_judged():
    # sim-upstream: in no group the balancer or monitoring plays target.
    assert group_problems(DECLARED, {"sim-upstream": {}}, {"simulation_upstream": ["sim-upstream"], "monitoring": []}) == []


def test_the_groups_need_a_mapping():
    with pytest.raises(InventoryInputsError, match="mapping of each inventory group to its hosts"):
        inventory_input_problems(input_rules(SPECS), _hosts(), ["dgxspark_cluster"])


@pytest.mark.parametrize("name", sorted(GROUP_INPUTS))
def test_each_group_input_names_the_group_its_playbooks_target(name):
    row = GROUP_INPUTS[name]
    # The role's default is the group the playbooks name, and the role runs there.
    assert DECLARED[name]["default"] == row.group
    assert row.group in row.role_hosts
    role = name.split("_")[0]
    for playbook in row.plays:
        plays = yaml.safe_load((REPO_ROOT / playbook).read_text())
        targets = [play["hosts"] for play in plays if "hosts" in play
                   and role in yaml.safe_dump(play.get("roles", [])) + yaml.safe_dump(play.get("tasks", []))]
        assert targets, (playbook, role)
        for hosts in targets:
            # A play's hosts: is templated before any host's variables exist: no variable of the row.
            assert name not in hosts, hosts
            assert all(group in hosts for group in row.role_hosts), hosts


def _inventory_vars(inventory):
    merged = {}
    for path in sorted((REPO_ROOT / "inventory" / inventory / "group_vars").glob("dgxspark_cluster*/*.yml")) + sorted(
            (REPO_ROOT / "inventory" / inventory / "group_vars").glob("dgxspark_cluster.yml")):
        merged.update(yaml.load(path.read_text(), Loader=_VaultLoader) or {})
    hosts = yaml.load((REPO_ROOT / "inventory" / inventory / "hosts.yml").read_text(), Loader=_VaultLoader)
    cluster = hosts["dgxspark_cluster"]
    merged.update(cluster.get("vars") or {})
    groups = {group: list((data or {}).get("hosts") or {}) for group, data in hosts.items()}
    return {host: dict(merged, **(values or {})) for host, values in cluster["hosts"].items()}, groups


class _VaultLoader(yaml.SafeLoader):
    pass


_VaultLoader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))


@pytest.mark.parametrize("inventory", ["sample", "simulated"])
def test_the_shipped_inventories_pass(inventory):
    hosts_values, groups = _inventory_vars(inventory)
    assert hosts_values
    assert inventory_input_problems(input_rules(SPECS), hosts_values, groups) == []
