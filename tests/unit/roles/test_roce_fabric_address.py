# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roce_fabric role exports the node's one fabric address, roce_fabric_node_address:
validate.yml the first planned link's (for an inventory giving roce_fabric_address only,
roce_fabric_links only, or both), gid.yml the first link with carrier, with the NCCL
environment on that link's netdev. The tasks' own expressions are templated with the
role's defaults, as a play templates them."""

from __future__ import annotations

import json

import pytest
import yaml

from unit_support import REPO_ROOT, template_role_vars

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_address import host_address

TASKS = REPO_ROOT / "roles" / "roce_fabric" / "tasks"
PORT1 = {"netdev": "enp1s0f1np1", "hca": "rocep1s0f1", "address": "192.168.201.11", "prefix": 24}
PORT2 = {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "192.168.200.11", "prefix": 24}


def _task(file, name):
    return next(task for task in yaml.safe_load((TASKS / file).read_text()) if task["name"] == name)


def _inner(template):
    """The expression of a one-expression template "{{ ... }}" (a literal as itself)."""
    if not isinstance(template, str):
        return json.dumps(template)
    text = template.strip()
    assert text.startswith("{{") and text.endswith("}}"), template
    return text[2:-2]


def _exports(task):
    """One template computing the task's set_fact values from its vars, as JSON."""
    sets = "".join("{%% set %s = (%s) %%}" % (name, _inner(value)) for name, value in (task.get("vars") or {}).items())
    values = ", ".join("'%s': (%s)" % (name, _inner(value)) for name, value in task["ansible.builtin.set_fact"].items())
    return sets + "{{ {%s} | to_json }}" % values


DESCRIBE = _exports(_task("validate.yml", "Fabric | Describe this node's fabric links"))
EXPORT = _exports(_task("gid.yml", "Fabric | Export this node's fabric address and its NCCL and Gloo environment"))


def state(link, carrier):
    return {"ifname": link["netdev"], "hca": link["hca"], "address": link["address"], "present": True,
            "carrier": carrier, "configured": carrier}


def gid(link, index=3):
    return {"item": {"ifname": link["netdev"], "hca": link["hca"], "address": link["address"]}, "index": index,
            "gid": "::ffff:0", "type": "RoCE v2", "port": {"state": "ACTIVE"}}


def read(plan_links, states, gids):
    """A node's variables after links.yml: its plan, the link states and the verdict's GIDs."""
    return {"inventory_hostname": "spark1", "roce_fabric_node_plan": {"mtu": 9000, "links": plan_links},
            "roce_fabric_link_state": states, "roce_fabric_link_verdict": {"gids": gids}}


CASES = {
    # validate.yml: before the links are read, the first planned link.
    "address only": ({"roce_fabric_address": "192.168.200.11"}, DESCRIBE),
    "links only": ({"roce_fabric_links": [PORT1, PORT2]}, DESCRIBE),
    "both": ({"roce_fabric_address": "10.9.9.9", "roce_fabric_links": [PORT2]}, DESCRIBE),
    "neither": ({}, DESCRIBE),
    # gid.yml: once read, the first link with carrier.
    "both links up": (read([PORT1, PORT2], [state(PORT1, True), state(PORT2, True)], [gid(PORT1), gid(PORT2)]), EXPORT),
    "first link without carrier": (read([PORT1, PORT2], [state(PORT1, False), state(PORT2, True)], [gid(PORT2)]), EXPORT),
    # Check mode on a node whose links this run would configure: no GID yet, the planned values.
    "check mode before the links are up": (
        read([PORT1, PORT2], [state(PORT1, False), state(PORT2, False)], []), EXPORT),
}


@pytest.fixture(scope="module")
def exported():
    results = template_role_vars("roce_fabric", [(variables, {"out": expression})
                                                 for variables, expression in CASES.values()])
    return {name: json.loads(result["out"]) for name, result in zip(CASES, results)}


@pytest.mark.parametrize("name, address", [
    ("address only", "192.168.200.11"),
    ("links only", "192.168.201.11"),
    ("both", "192.168.200.11"),
    ("neither", None),
])
def test_validate_exports_the_first_planned_links_address(exported, name, address):
    assert exported[name]["roce_fabric_node_address"] == address
    # What a play without the fact (balancer.yml on its own) reads for the host is the same.
    assert host_address(CASES[name][0]) == address


@pytest.mark.parametrize("name, link, hcas, gid_index", [
    ("both links up", PORT1, [PORT1["hca"], PORT2["hca"]], 3),
    ("first link without carrier", PORT2, [PORT2["hca"]], 3),
    ("check mode before the links are up", PORT1, [PORT1["hca"], PORT2["hca"]], "unknown until the links are configured"),
])
def test_gid_exports_the_address_and_the_nccl_environment_of_one_link(exported, name, link, hcas, gid_index):
    facts = exported[name]
    assert facts["roce_fabric_node_address"] == link["address"]
    assert facts["roce_fabric_active_hcas"] == hcas
    assert facts["roce_fabric_gid_index"] == gid_index
    assert facts["roce_fabric_nccl_env"] == {
        "NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0",
        "NCCL_IB_HCA": ",".join(hca + ":1" for hca in hcas), "NCCL_IB_GID_INDEX": str(gid_index),
        "NCCL_SOCKET_IFNAME": link["netdev"], "GLOO_SOCKET_IFNAME": link["netdev"],
    }
