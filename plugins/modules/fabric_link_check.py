#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_link_check
short_description: Read the fabric links of a node, wait for them and ping every peer with jumbo frames, in one call
version_added: 0.1.0
description:
  - Reads each fabric link with C(ip -j addr show dev <netdev>), which tells whether it exists, its carrier (the
    kernel's C(LOWER_UP) flag), its operstate, MTU and IPv4 addresses.
  - Waits up to O(timeout) seconds, on the node, until every link carries its address and O(mtu). A link without
    carrier is waited for only with O(wait_for_carrier). With O(gid), a link also waits for the RoCE GID of its
    address, at most O(gid_timeout) seconds after the address appeared (the kernel publishes it a moment later).
  - Then sends every ping of O(pings) at once, each C(ping -M do -s <mtu - 28>) (a don't-fragment frame that fills
    the MTU) over a local link; a ping over a local link without carrier is skipped.
  - With O(gid), resolves the RoCE GID of each carrier link's address exactly as M(dgxspark.cluster.roce_gid) does,
    with its port state and error counters.
  - Never fails because of what it finds. It only reads and reports, and the caller judges the result
    (the P(dgxspark.cluster.fabric_link_verdict#filter) filter does, with readable messages).
author:
  - Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The module only reads the links and sends pings, so check mode runs it unchanged.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  links:
    description:
      - The fabric links of this node, in order (C(roce_fabric_links)).
    type: list
    elements: dict
    required: true
    suboptions:
      netdev:
        description: The network interface.
        type: str
        required: true
      address:
        description: The IPv4 address the link must carry.
        type: str
        required: true
      hca:
        description: The RDMA device of the link; needed with O(gid).
        type: str
      prefix:
        description: The prefix length of O(links[].address); accepted so that C(roce_fabric_links) can be passed as it is.
        type: int
  mtu:
    description: The MTU every link must have.
    type: int
    required: true
  pings:
    description:
      - Pings to send, normally the P(dgxspark.cluster.fabric_ping_plan#filter) of this node.
    type: list
    elements: dict
    default: []
    suboptions:
      peer:
        description: Name of the peer, returned with the result.
        type: str
        required: true
      netdev:
        description: The local link to send over (C(ping -I)).
        type: str
        required: true
      address:
        description: The peer's address.
        type: str
        required: true
      position:
        description: Position of the link in the fabric plan, returned with the result.
        type: int
  ping_count:
    description: Echo requests per peer.
    type: int
    default: 3
  ping_interval:
    description: Seconds between echo requests.
    type: float
    default: 0.2
  ping_timeout:
    description: Seconds to wait for each reply (C(ping -W)).
    type: int
    default: 2
  timeout:
    description:
      - Seconds to wait for the links to carry their address and MTU. V(0) reads them once.
    type: int
    default: 0
  wait_for_carrier:
    description:
      - Also wait, up to O(timeout), for links without carrier. Right after a change a link can take a moment to
        come up; when nothing changed, a link without carrier is reported at once.
    type: bool
    default: true
  gid:
    description: Resolve the RoCE GID of each carrier link's address (O(links[].hca) port O(ib_port)).
    type: bool
    default: false
  gid_timeout:
    description: With O(gid), seconds a link that carries its address may wait for its GID (within O(timeout)).
    type: int
    default: 10
  ib_port:
    description: Port number of the HCAs.
    type: int
    default: 1
  roce_version:
    description: RoCE version of the GID.
    type: int
    choices: [1, 2]
    default: 2
  sysfs_root:
    description: Where sysfs is mounted, for the GID tables. Tests point this at a generated tree.
    type: path
    default: /sys
notes:
  - Needs C(ip) (iproute2 with JSON output) and C(ping) (iputils) on the node.
seealso:
  - module: dgxspark.cluster.roce_gid
"""

EXAMPLES = r"""
- name: Check the links and ping every peer with a don't-fragment jumbo frame
  dgxspark.cluster.fabric_link_check:
    links: "{{ roce_fabric_links }}"
    mtu: 9000
    pings:
      - {peer: spark2, netdev: enP2p1s0f1np1, address: 192.168.100.12}
      - {peer: spark3, netdev: enP2p1s0f1np1, address: 192.168.100.13}
    timeout: 30
    gid: true
  register: link_check

- name: Show the links
  ansible.builtin.debug:
    msg: "{{ link_check.links | map(attribute='ifname') | zip(link_check.links | map(attribute='carrier')) }}"
"""

RETURN = r"""
links:
  description: One entry per link of O(links), in order (the C(roce_fabric_link_state) fact of the roce_fabric role).
  returned: always
  type: list
  elements: dict
  contains:
    ifname:
      description: The netdev.
      type: str
      sample: enP2p1s0f1np1
    hca:
      description: The RDMA device from O(links).
      type: str
      sample: roceP2p1s0f1
    address:
      description: The address the link must carry.
      type: str
      sample: 192.168.100.11
    present:
      description: Whether C(ip) showed the netdev.
      type: bool
    carrier:
      description: Whether the link has carrier (C(LOWER_UP)).
      type: bool
    operstate:
      description: The kernel's operstate.
      type: str
      sample: UP
    mtu:
      description: The MTU found.
      type: int
      sample: 9000
    addresses:
      description: The IPv4 addresses found.
      type: list
      elements: str
    configured:
      description: Whether the link carries its address and O(mtu).
      type: bool
    error:
      description: What C(ip) printed when it failed, else V(null).
      type: str
    gid:
      description:
        - With O(gid), for a link with carrier, what M(dgxspark.cluster.roce_gid) returns (C(index), C(gid), C(type),
          C(roce_version), C(netdev), C(address), C(scope), C(table), C(port), C(counters)), or C(failed), C(msg)
          and C(table) when the address has no GID. V(null) for a link without carrier.
      type: dict
      returned: with O(gid)
pings:
  description: One entry per ping of O(pings), in order.
  returned: always
  type: list
  elements: dict
  contains:
    peer:
      description: The peer.
      type: str
    netdev:
      description: The local link.
      type: str
    address:
      description: The peer's address.
      type: str
    skipped:
      description: Whether the ping was not sent (the local link has no carrier).
      type: bool
    skip_reason:
      description: Why it was skipped.
      type: str
      returned: when skipped
    rc:
      description: The exit status of C(ping); V(0) when replies came back.
      type: int
      returned: when sent
    stdout:
      description: What C(ping) printed.
      type: str
      returned: when sent
    stderr:
      description: What C(ping) printed on standard error.
      type: str
      returned: when sent
waited:
  description: Seconds spent reading and waiting for the links.
  returned: always
  type: float
  sample: 0.0
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils import _fabric_links


def main():
    module = AnsibleModule(
        argument_spec=dict(
            links=dict(type="list", elements="dict", required=True, options=dict(
                netdev=dict(type="str", required=True),
                address=dict(type="str", required=True),
                hca=dict(type="str"),
                prefix=dict(type="int"),
            )),
            mtu=dict(type="int", required=True),
            pings=dict(type="list", elements="dict", default=[], options=dict(
                peer=dict(type="str", required=True),
                netdev=dict(type="str", required=True),
                address=dict(type="str", required=True),
                position=dict(type="int"),
            )),
            ping_count=dict(type="int", default=3),
            ping_interval=dict(type="float", default=0.2),
            ping_timeout=dict(type="int", default=2),
            timeout=dict(type="int", default=0),
            wait_for_carrier=dict(type="bool", default=True),
            gid=dict(type="bool", default=False),
            gid_timeout=dict(type="int", default=10),
            ib_port=dict(type="int", default=1),
            roce_version=dict(type="int", choices=[1, 2], default=2),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["gid"]:
        missing = [link["netdev"] for link in params["links"] if not link.get("hca")]
        if missing:
            module.fail_json(msg="gid needs the hca of every link; none given for %s" % ", ".join(missing))
    gid = None
    if params["gid"]:
        gid = {"sysfs_root": params["sysfs_root"], "port": params["ib_port"], "roce_version": params["roce_version"]}
    # ip and ping live in sbin on some systems, which a non-login PATH may lack.
    ip = module.get_bin_path("ip", required=True)
    ping = module.get_bin_path("ping", required=True) if params["pings"] else "ping"
    try:
        result = _fabric_links.check_links(
            params["links"],
            params["mtu"],
            pings=params["pings"],
            timeout=params["timeout"],
            wait_for_carrier=params["wait_for_carrier"],
            ping_count=params["ping_count"],
            ping_interval=params["ping_interval"],
            ping_timeout=params["ping_timeout"],
            gid=gid,
            gid_wait=params["gid_timeout"],
            ip=ip,
            ping=ping,
        )
    except _fabric_links.FabricLinkError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
