# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NCCL/Gloo environment the fabric role exports, node by node, against
what the node's own RDMA tree and inventory say."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import ROOT, flat, group_vars, inventory_hosts

testinfra_hosts = ["local://"]

GV = group_vars()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("facts")
    command = ["ansible-playbook", "-i", str(ROOT / "inventory" / "simulated" / "hosts.yml"),
               str(ROOT / "molecule" / "resources" / "export_fabric_facts.yml"), "-e", f"sim_facts_dir={out}"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, flat(result.stdout)[-3000:]
    return {host: json.loads((out / f"{host}.json").read_text()) for host in inventory_hosts()}


def _raw_gid_index(host, address):
    ports = f"{GV['roce_fabric_sysfs_root']}/class/infiniband/{GV['roce_fabric_hca']}/ports/1"
    octets = [int(o) for o in address.split(".")]
    wanted = "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % tuple(octets)
    listing = subprocess.run(
        ["docker", "exec", host, "sh", "-c", f"cd {ports} && grep -l '^{wanted}$' gids/* | sed 's|gids/||' | "
         "while read i; do echo $i $(cat gid_attrs/types/$i); done"],
        capture_output=True, text=True, check=True,
    ).stdout
    return [int(line.split()[0]) for line in listing.splitlines() if line.endswith("RoCE v2")]


@pytest.mark.parametrize("host", sorted(inventory_hosts()))
def test_nccl_environment_of_each_node(exported, host):
    facts = exported[host]
    address = inventory_hosts()[host]["roce_fabric_address"]
    assert [facts["gid_index"]] == _raw_gid_index(host, address)
    assert facts["node_address"] == address
    assert facts["active_hcas"] == [GV["roce_fabric_hca"]]
    assert facts["nccl_env"] == {
        "NCCL_IB_HCA": f"{GV['roce_fabric_hca']}:1",
        "NCCL_IB_GID_INDEX": str(facts["gid_index"]),
        "NCCL_SOCKET_IFNAME": GV["roce_fabric_netdev"],
        "GLOO_SOCKET_IFNAME": GV["roce_fabric_netdev"],
        "NCCL_NET": "IB",
        "NCCL_IB_DISABLE": "0",
        "NCCL_CUMEM_ENABLE": "0",
        "NCCL_NVLS_ENABLE": "0",
    }


def test_gid_index_is_computed_per_node(exported):
    indexes = {host: facts["gid_index"] for host, facts in exported.items()}
    assert indexes == {"spark1": 3, "spark2": 3, "spark3": 5, "spark4": 3}
