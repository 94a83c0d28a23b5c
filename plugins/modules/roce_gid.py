#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: roce_gid
short_description: Find the RoCE GID index of an HCA port for a fabric address
version_added: 0.1.0
description:
  - Reads the GID table of one RDMA device port from sysfs
    (C(<sysfs_root>/class/infiniband/<hca>/ports/<port>/gids/) with its C(gid_attrs/types/) and C(gid_attrs/ndevs/))
    and returns the entry that NCCL must use as E(NCCL_IB_GID_INDEX) on this node.
  - The index depends on the order in which addresses were configured, so it can differ between nodes
    and change after an address change. Resolve it on each node; never copy it from another node.
  - With O(address), the entry carrying that address (IPv4 addresses match their IPv4-mapped
    V(::ffff:a.b.c.d) GID) with the RoCE version O(roce_version) is returned. When O(netdev) is also given,
    the entry must be bound to that netdev.
  - With only O(netdev), the best entry on that netdev is returned, preferring
    the requested RoCE version to the other one, and within a version an IPv4-mapped GID,
    then a global IPv6 GID, then the link-local default GID; the lowest index breaks ties.
  - Also returns the port state, rate and MTUs and its error counters, so that callers can check the link
    with the same read.
  - The same logic runs without Ansible as C(python3 _roce_gid.py --hca HCA --address ADDR --write-env PATH),
    which the engine's systemd unit uses to re-resolve the index at every start.
  - Empty GID slots are skipped without reading their attribute files, which the kernel refuses with EINVAL.
author:
  - Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads sysfs, so check mode runs it unchanged.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  hca:
    description:
      - RDMA device name as listed in C(/sys/class/infiniband), for example V(rocep1s0f1) or V(roceP2p1s0f1).
    type: str
    required: true
  port:
    description:
      - Port number of the HCA.
    type: int
    default: 1
  address:
    description:
      - IPv4 or IPv6 address the GID must carry, normally the node's own fabric address on this HCA.
      - A prefix length (V(10.10.1.11/24)) is accepted and ignored.
      - At least one of O(address) and O(netdev) is required.
    type: str
  netdev:
    description:
      - Network interface the GID must be bound to, for example V(enp1s0f1np1).
      - With O(address), an address found only on another netdev is an error that names that netdev.
    type: str
  roce_version:
    description:
      - RoCE version of the GID. V(2) is routable RoCE over UDP, which the cluster's NCCL settings expect.
    type: int
    choices: [1, 2]
    default: 2
  sysfs_root:
    description:
      - Where sysfs is mounted. Tests point this at a generated tree.
    type: path
    default: /sys
notes:
  - RV(port.netdev_mtu) and RV(port.active_mtu) come from C(<sysfs_root>/class/net/<netdev>/mtu); RV(port.active_mtu)
    is the RoCE path MTU the kernel derives from it (netdev MTU less 96 bytes of RoCE headers, rounded down
    to 256, 512, 1024, 2048 or 4096), so an MTU of 9000 gives 4096 and 1500 gives 1024.
seealso:
  - name: Linux RDMA sysfs ABI
    description: The layout of C(/sys/class/infiniband).
    link: https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband
"""

EXAMPLES = r"""
- name: Resolve the GID index for this node's fabric address
  dgxspark.cluster.roce_gid:
    hca: roceP2p1s0f1
    address: "{{ roce_fabric_node_address }}"
    netdev: enP2p1s0f1np1
  register: fabric_gid

- name: Show the index NCCL will use
  ansible.builtin.debug:
    msg: "NCCL_IB_GID_INDEX={{ fabric_gid.index }} ({{ fabric_gid.gid }}, {{ fabric_gid.type }})"

- name: Fail when the port is not up with a 4096-byte RoCE MTU
  ansible.builtin.assert:
    that:
      - fabric_gid.port.state == 'ACTIVE'
      - fabric_gid.port.active_mtu == 4096
    fail_msg: "{{ fabric_gid.port }}"

- name: Take the best RoCE v2 GID of a netdev when no address is known
  dgxspark.cluster.roce_gid:
    hca: rocep1s0f1
    netdev: enp1s0f1np1
  register: any_gid
"""

RETURN = r"""
index:
  description: Index of the selected GID, the value for E(NCCL_IB_GID_INDEX).
  returned: success
  type: int
  sample: 3
gid:
  description: The selected GID as sysfs writes it.
  returned: success
  type: str
  sample: "0000:0000:0000:0000:0000:ffff:0a0a:020b"
type:
  description: GID type as the kernel writes it.
  returned: success
  type: str
  sample: RoCE v2
roce_version:
  description: RoCE version of the selected GID, V(1) or V(2).
  returned: success
  type: int
  sample: 2
netdev:
  description: Netdev the selected GID is bound to.
  returned: success
  type: str
  sample: enP2p1s0f1np1
address:
  description: Address of the selected GID, the IPv4 address for an IPv4-mapped GID, else the compressed IPv6 address.
  returned: success
  type: str
  sample: 10.10.2.11
scope:
  description: V(ipv4), V(global) or V(link-local).
  returned: success
  type: str
  sample: ipv4
table:
  description:
    - Every populated GID slot of the port, each with the keys of the selected entry.
    - Also returned on failure, so that the error can be read against what the port holds.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      gid: "fe80:0000:0000:0000:5e00:00ff:fe00:0101"
      type: IB/RoCE v1
      roce_version: 1
      netdev: enP2p1s0f1np1
      address: "fe80::5e00:ff:fe00:101"
      scope: link-local
    - index: 3
      gid: "0000:0000:0000:0000:0000:ffff:0a0a:020b"
      type: RoCE v2
      roce_version: 2
      netdev: enP2p1s0f1np1
      address: 10.10.2.11
      scope: ipv4
port:
  description: State of the port. Values the device does not expose are V(null).
  returned: success
  type: dict
  contains:
    state:
      description: Logical port state without its numeric code.
      type: str
      sample: ACTIVE
    phys_state:
      description: Physical port state without its numeric code.
      type: str
      sample: LinkUp
    link_layer:
      description: V(Ethernet) for RoCE.
      type: str
      sample: Ethernet
    rate:
      description: Rate as sysfs writes it.
      type: str
      sample: 200 Gb/sec (4X HDR)
    rate_gbps:
      description: The rate in Gb/s.
      type: float
      sample: 200.0
    netdev:
      description: Netdev of the port.
      type: str
      sample: enP2p1s0f1np1
    netdev_mtu:
      description: MTU of the netdev.
      type: int
      sample: 9000
    active_mtu:
      description: RoCE path MTU the kernel derives from RV(port.netdev_mtu).
      type: int
      sample: 4096
counters:
  description:
    - Error counters of the port (C(ports/<port>/counters/)) and of the netdev (C(class/net/<netdev>/statistics/)),
      for comparing before and after a fabric test. Counters the device does not expose are left out.
  returned: success
  type: dict
  sample:
    symbol_error: 0
    link_downed: 0
    port_rcv_errors: 0
    port_xmit_discards: 0
    port_rcv_remote_physical_errors: 0
    rx_crc_errors: 0
    rx_dropped: 0
    tx_dropped: 0
    rx_errors: 0
available:
  description: HCAs or ports that do exist, when O(hca) or O(port) was not found.
  returned: when O(hca) or O(port) is not found
  type: list
  elements: str
  sample: [rocep1s0f0, rocep1s0f1, roceP2p1s0f0, roceP2p1s0f1]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._roce_gid import (
    HcaNotFoundError,
    PortNotFoundError,
    RoceGidError,
    read_gid_table,
    read_port_counters,
    read_port_info,
    select_gid,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hca=dict(type="str", required=True),
            port=dict(type="int", default=1),
            address=dict(type="str"),
            netdev=dict(type="str"),
            roce_version=dict(type="int", choices=[1, 2], default=2),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        required_one_of=[("address", "netdev")],
        supports_check_mode=True,
    )
    params = module.params
    table = []
    try:
        table = read_gid_table(params["sysfs_root"], params["hca"], params["port"])
        entry = select_gid(
            table,
            address=params["address"],
            netdev=params["netdev"],
            roce_version=params["roce_version"],
        )
        port = read_port_info(
            params["sysfs_root"], params["hca"], params["port"], netdev=entry["netdev"]
        )
        counters = read_port_counters(
            params["sysfs_root"], params["hca"], params["port"], netdev=entry["netdev"]
        )
    except (HcaNotFoundError, PortNotFoundError) as exc:
        module.fail_json(msg=str(exc), table=[], available=exc.available)
    except RoceGidError as exc:
        module.fail_json(msg=str(exc), table=exc.table or table)

    module.exit_json(changed=False, table=table, port=port, counters=counters, **entry)


if __name__ == "__main__":
    main()
