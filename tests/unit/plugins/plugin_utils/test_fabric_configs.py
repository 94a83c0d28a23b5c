# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The configurations a node already has for its fabric ports: adopted when they
say what the links say, refused naming the file otherwise, and never two
managers on one port."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_configs import (
    READ_SCRIPT,
    fabric_config_verdict,
    read_argv,
)

OURS = "/etc/netplan/60-dgxspark-fabric.yaml"
CONTEXT = {"ours": OURS, "netplan_installed": True,
           "backend": "netplan (renderer networkd, /etc/netplan/60-dgxspark-fabric.yaml)"}
# Where NetworkManager runs, the role's netplan file renders for it.
NM_CONTEXT = dict(CONTEXT, renderer="NetworkManager",
                  backend="netplan (renderer NetworkManager, /etc/netplan/60-dgxspark-fabric.yaml)")
# Both halves of the CX-7 port, as a two-link inventory lists them.
LINKS = [
    {"netdev": "enp1s0f1np1", "hca": "rocep1s0f1", "address": "192.168.100.11", "prefix": 24},
    {"netdev": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "address": "192.168.101.11", "prefix": 24},
]

# As NVIDIA's DGX Spark cluster setup writes it for the port halves.
NVIDIA_CX7 = """\
network:
  version: 2
  ethernets:
    enp1s0f1np1:
      dhcp4: no
      dhcp6: no
      link-local: []
      mtu: 9000
      addresses: [192.168.100.11/24]
    enP2p1s0f1np1:
      dhcp4: no
      dhcp6: no
      link-local: []
      mtu: 9000
      addresses: [192.168.101.11/24]
"""
# What DGX OS's installer leaves for the management port: not a fabric netdev.
INSTALLER = """\
network:
  version: 2
  renderer: NetworkManager
  ethernets:
    enP7s7:
      dhcp4: true
"""
# A NetworkManager keyfile for a fabric port half, as nmcli connection add writes it.
KEYFILE = """\
[connection]
id=cx7-port1
uuid=0c4e4b4e-7f4a-4f7e-9a43-3c1f7c0e5a11
type=ethernet
interface-name=enp1s0f1np1

[ethernet]
mtu=9000

[ipv4]
address1=192.168.100.11/24
method=manual

[ipv6]
addr-gen-mode=default
method=disabled
"""


def verdict(netplan=None, keyfiles=None, nm_devices=None, links=None, mtu=9000, context=None):
    found = {"netplan": netplan or {}, "keyfiles": keyfiles or {}, "nm_devices": nm_devices}
    return fabric_config_verdict("spark3", LINKS if links is None else links, mtu, found,
                                 CONTEXT if context is None else context)


def test_nothing_present_is_no_problem():
    assert verdict() == ([], [])


def test_nvidias_file_with_the_same_values_is_adopted_per_netdev():
    # The installer's global renderer is NetworkManager's, for NVIDIA's file too (netplan merges it).
    problems, adopted = verdict({"/etc/netplan/40-cx7.yaml": NVIDIA_CX7, "/etc/netplan/50-cloud-init.yaml": INSTALLER},
                                context=NM_CONTEXT)
    assert problems == []
    assert adopted == [
        "spark3: /etc/netplan/40-cx7.yaml configures enp1s0f1np1 (roce_fabric_links[0]) as "
        "network.ethernets.enp1s0f1np1 with the same values (addresses 192.168.100.11/24, mtu 9000): adopted, "
        "left as it is; the role's configuration carries the same values.",
        "spark3: /etc/netplan/40-cx7.yaml configures enP2p1s0f1np1 (roce_fabric_links[1]) as "
        "network.ethernets.enP2p1s0f1np1 with the same values (addresses 192.168.101.11/24, mtu 9000): adopted, "
        "left as it is; the role's configuration carries the same values.",
    ]


def test_a_different_address_is_refused_naming_host_file_netdev_and_the_fix():
    text = NVIDIA_CX7.replace("192.168.100.11/24", "192.168.100.111/24")
    problems, adopted = verdict({"/etc/netplan/40-cx7.yaml": text})
    assert problems == [
        "spark3: /etc/netplan/40-cx7.yaml configures enp1s0f1np1 (roce_fabric_links[0]) as "
        "network.ethernets.enp1s0f1np1 with addresses 192.168.100.111/24, expected 192.168.100.11/24 "
        "(roce_fabric_links / roce_fabric_mtu). Remove that stanza (or the file) so that the role's "
        "/etc/netplan/60-dgxspark-fabric.yaml configures the port, or set roce_fabric_links and roce_fabric_mtu to "
        "what it says."
    ]
    # The other half says what its link says.
    assert [a.split(" configures ")[1].split(" ")[0] for a in adopted] == ["enP2p1s0f1np1"]


@pytest.mark.parametrize(
    "change, expected",
    [
        (("mtu: 9000\n      addresses: [192.168.100.11/24]", "mtu: 1500\n      addresses: [192.168.100.11/24]"),
         "with mtu 1500, expected 9000"),
        (("dhcp4: no\n      dhcp6: no\n      link-local: []\n      mtu: 9000\n      addresses: [192.168.100.11/24]",
          "dhcp4: true"), "with dhcp4: true, expected a static address without DHCP"),
        (("addresses: [192.168.100.11/24]", "addresses: [192.168.100.11/24, 10.0.0.5/8]"),
         "with addresses 10.0.0.5/8, 192.168.100.11/24, expected 192.168.100.11/24"),
        (("addresses: [192.168.100.11/24]", "addresses: [192.168.100.11/16]"),
         "with addresses 192.168.100.11/16, expected 192.168.100.11/24"),
    ],
    ids=["mtu", "dhcp", "an extra address", "another prefix"],
)
def test_each_difference_is_named(change, expected):
    problems, _adopted = verdict({"/etc/netplan/40-cx7.yaml": NVIDIA_CX7.replace(*change, 1)})
    assert len(problems) == 1, problems
    assert "spark3: /etc/netplan/40-cx7.yaml configures enp1s0f1np1 (roce_fabric_links[0])" in problems[0]
    assert expected in problems[0], problems[0]


def test_the_long_address_form_and_a_match_by_name_are_read():
    text = """\
network:
  version: 2
  ethernets:
    cx7-half:
      match: {name: "enp1s0f1*"}
      mtu: 9000
      addresses:
        - 192.168.100.11/24: {label: fabric}
"""
    problems, adopted = verdict({"/etc/netplan/40-cx7.yaml": text})
    assert problems == []
    assert "configures enp1s0f1np1 (roce_fabric_links[0]) as network.ethernets.cx7-half" in adopted[0]


def test_a_match_by_mac_address_alone_is_not_taken_for_the_netdev():
    text = "network:\n  version: 2\n  ethernets:\n    cx7:\n      match: {macaddress: '4c:bb:47:00:00:01'}\n      mtu: 1500\n"
    assert verdict({"/etc/netplan/40-cx7.yaml": text}) == ([], [])


def test_the_networkmanager_renderer_is_refused_as_a_second_manager():
    text = "network:\n  version: 2\n  renderer: NetworkManager\n" + NVIDIA_CX7.split("version: 2\n", 1)[1]
    problems, adopted = verdict({"/etc/netplan/90-NM-cx7.yaml": text})
    assert adopted == []
    assert len(problems) == 2
    assert problems[0] == (
        "spark3: /etc/netplan/90-NM-cx7.yaml configures enp1s0f1np1 (roce_fabric_links[0]) as "
        "network.ethernets.enp1s0f1np1 with renderer NetworkManager, while this role configures it through netplan "
        "(renderer networkd, /etc/netplan/60-dgxspark-fabric.yaml): two managers would own one port. Remove that "
        "stanza (or the file) so that NetworkManager leaves enp1s0f1np1, or set its renderer to networkd "
        "(roce_fabric_renderer chooses the role's)."
    )


def test_where_networkmanager_renders_the_links_its_netplan_files_are_adopted_and_networkds_refused():
    text = "network:\n  version: 2\n  renderer: NetworkManager\n" + NVIDIA_CX7.split("version: 2\n", 1)[1]
    problems, adopted = verdict({"/etc/netplan/90-NM-cx7.yaml": text}, context=NM_CONTEXT)
    assert problems == [] and len(adopted) == 2
    assert adopted[0].startswith("spark3: /etc/netplan/90-NM-cx7.yaml configures enp1s0f1np1 (roce_fabric_links[0]) "
                                 "as network.ethernets.enp1s0f1np1 with the same values")
    # The same file for networkd: the other manager, refused with the role's renderer named.
    problems, adopted = verdict({"/etc/netplan/40-cx7.yaml": NVIDIA_CX7}, context=NM_CONTEXT)
    assert adopted == [] and len(problems) == 2
    assert problems[0] == (
        "spark3: /etc/netplan/40-cx7.yaml configures enp1s0f1np1 (roce_fabric_links[0]) as "
        "network.ethernets.enp1s0f1np1 with renderer networkd, while this role configures it through netplan "
        "(renderer NetworkManager, /etc/netplan/60-dgxspark-fabric.yaml): two managers would own one port. Remove "
        "that stanza (or the file) so that networkd leaves enp1s0f1np1, or set its renderer to NetworkManager "
        "(roce_fabric_renderer chooses the role's)."
    )
    # Other values through the same renderer: refused as with networkd.
    problems, adopted = verdict({"/etc/netplan/90-NM-cx7.yaml": text.replace("mtu: 9000", "mtu: 1500")},
                                context=NM_CONTEXT)
    assert adopted == [] and len(problems) == 2 and "mtu 1500, expected 9000" in problems[0]


def test_a_global_renderer_of_another_file_renders_the_fabric_files_too():
    # DGX OS: 01-network-manager-all.yaml sets the renderer for every file; NVIDIA's file sets none.
    files = {"/etc/netplan/01-network-manager-all.yaml": "network:\n  version: 2\n  renderer: NetworkManager\n",
             "/etc/netplan/40-cx7.yaml": NVIDIA_CX7}
    problems, adopted = verdict(files, context=NM_CONTEXT)
    assert problems == [] and len(adopted) == 2
    problems, adopted = verdict(files)
    assert adopted == [] and len(problems) == 2 and "with renderer NetworkManager" in problems[0]
    # The last file by name that sets it wins; a renderer under ethernets: is no device.
    later = dict(files, **{"/run/netplan/90-back.yaml": "network:\n  renderer: networkd\n"})
    assert verdict(later) == ([], adopted_of(later))
    typed = NVIDIA_CX7.replace("  ethernets:\n", "  ethernets:\n    renderer: NetworkManager\n")
    problems, adopted = verdict({"/etc/netplan/40-cx7.yaml": typed}, context=NM_CONTEXT)
    assert problems == [] and len(adopted) == 2


def adopted_of(files):
    return verdict(files)[1]


# What NetworkManager writes itself under /run: the automatic connection of a
# port without one, and the one it assumes for an address another program set.
GENERATED = """\
[connection]
id=Wired connection 2
type=ethernet
interface-name=enp1s0f1np1
[ipv4]
method=auto
[.nmmeta]
nm-generated=true
"""


def test_networkmanagers_own_connections_yield_to_the_roles():
    keyfiles = {"/run/NetworkManager/system-connections/Wired connection 2.nmconnection": GENERATED,
                "/run/NetworkManager/system-connections/enP2p1s0f1np1.nmconnection":
                    GENERATED.replace("Wired connection 2", "enP2p1s0f1np1").replace("enp1s0f1np1", "enP2p1s0f1np1")}
    devices = ("enp1s0f1np1:connecting (getting IP configuration):Wired connection 2\n"
               "enP2p1s0f1np1:connected (externally):enP2p1s0f1np1\n")
    for context in (CONTEXT, NM_CONTEXT):
        assert verdict(keyfiles=keyfiles, nm_devices=devices, context=context) == ([], [])
    # The same connection written by a user (no nm-generated mark) owns the port.
    mine = {path: text.replace("[.nmmeta]\nnm-generated=true\n", "") for path, text in keyfiles.items()}
    problems, _adopted = verdict(keyfiles=mine, nm_devices=devices, context=NM_CONTEXT)
    assert len(problems) == 4
    assert "is a NetworkManager connection (id Wired connection 2) for enp1s0f1np1" in problems[0]
    assert "NetworkManager manages enP2p1s0f1np1 (roce_fabric_links[1]; nmcli device: connected (externally)" \
        in problems[2]


def test_a_per_device_renderer_overrides_the_files():
    text = NVIDIA_CX7.replace("    enp1s0f1np1:\n", "    enp1s0f1np1:\n      renderer: NetworkManager\n")
    problems, _adopted = verdict({"/etc/netplan/40-cx7.yaml": text})
    assert len(problems) == 1 and "enp1s0f1np1 (roce_fabric_links[0])" in problems[0]
    assert "with renderer NetworkManager" in problems[0]


def test_a_bond_member_is_refused():
    text = "network:\n  version: 2\n  bonds:\n    bond0:\n      interfaces: [enp1s0f1np1, enp1s0f0np0]\n"
    problems, _adopted = verdict({"/etc/netplan/40-bond.yaml": text})
    assert problems == [
        "spark3: /etc/netplan/40-bond.yaml configures enp1s0f1np1 (roce_fabric_links[0]) as network.bonds.bond0, a "
        "member of bond bond0; the fabric link needs the port alone. Remove enp1s0f1np1 from that bond (or the "
        "file), or set roce_fabric_links to another port."
    ]


def test_a_file_that_does_not_parse_is_named():
    problems, _adopted = verdict({"/etc/netplan/40-cx7.yaml": "network:\n  ethernets: [\n"})
    assert len(problems) == 1
    assert problems[0].startswith("spark3: /etc/netplan/40-cx7.yaml does not parse as YAML (line 3)")
    assert problems[0].endswith("Fix or remove /etc/netplan/40-cx7.yaml.")


def test_an_unreadable_file_and_a_file_without_network_are_named():
    problems, _adopted = verdict({"/etc/netplan/40-a.yaml": None, "/etc/netplan/40-b.yaml": "version: 2\n"})
    assert problems[0].startswith("spark3: /etc/netplan/40-a.yaml could not be read")
    assert problems[1].startswith("spark3: /etc/netplan/40-b.yaml has no network: mapping at its top")


def test_our_own_file_and_an_empty_file_are_not_judged():
    assert verdict({OURS: NVIDIA_CX7.replace("mtu: 9000", "mtu: 1500"), "/etc/netplan/01-empty.yaml": ""}) == ([], [])


def test_netplan_files_count_only_where_netplan_is_installed():
    context = dict(CONTEXT, netplan_installed=False, backend="systemd-networkd (/etc/systemd/network)")
    text = NVIDIA_CX7.replace("mtu: 9000", "mtu: 1500")
    assert verdict({"/etc/netplan/40-cx7.yaml": text}, context=context) == ([], [])


def test_a_networkmanager_keyfile_for_a_fabric_netdev_is_refused():
    context = dict(CONTEXT, backend="systemd-networkd (/etc/systemd/network)")
    problems, adopted = verdict(keyfiles={"/etc/NetworkManager/system-connections/cx7.nmconnection": KEYFILE,
                                          "/etc/NetworkManager/system-connections/Wired.nmconnection":
                                              KEYFILE.replace("enp1s0f1np1", "enP7s7")}, context=context)
    assert adopted == []
    assert problems == [
        "spark3: /etc/NetworkManager/system-connections/cx7.nmconnection is a NetworkManager connection (id "
        "cx7-port1) for enp1s0f1np1 (roce_fabric_links[0]; it sets address 192.168.100.11/24; mtu 9000), while this "
        "role configures it through systemd-networkd (/etc/systemd/network): two managers would own one port. Delete "
        "it (nmcli connection delete 'cx7-port1', or remove the file), or set roce_fabric_links to another port."
    ]


def test_a_keyfile_that_matches_the_link_is_refused_all_the_same():
    # Even the same values: NetworkManager and networkd would both own the port.
    problems, _adopted = verdict(keyfiles={"/etc/NetworkManager/system-connections/cx7.nmconnection": KEYFILE})
    assert len(problems) == 1 and "two managers would own one port" in problems[0]


def test_netplans_generated_keyfiles_are_left_to_their_netplan_file():
    keyfiles = {"/run/NetworkManager/system-connections/netplan-enp1s0f1np1.nmconnection": KEYFILE,
                "/etc/NetworkManager/system-connections/broken.nmconnection": "[connection\n"}
    assert verdict(keyfiles=keyfiles) == ([], [])


def test_nmcli_showing_networkmanager_manage_a_fabric_netdev_is_refused():
    devices = "enP7s7:connected:Wired connection 1\nenp1s0f1np1:connected:cx7\\:a\nenP2p1s0f1np1:unmanaged:\nlo:unmanaged:\n"
    problems, _adopted = verdict(nm_devices=devices)
    assert problems == [
        "spark3: NetworkManager manages enp1s0f1np1 (roce_fabric_links[0]; nmcli device: connected, connection "
        "cx7:a), while this role configures it through netplan (renderer networkd, "
        "/etc/netplan/60-dgxspark-fabric.yaml): two managers would own one port. Mark it unmanaged (nmcli device "
        "set enp1s0f1np1 managed no, and an unmanaged-devices=interface-name:enp1s0f1np1 entry under "
        "/etc/NetworkManager/conf.d/ so that it stays so) and delete its connection (nmcli connection delete "
        "'cx7:a')."
    ]


def test_a_device_without_a_connection_of_its_own_is_left_to_netplan():
    # A fresh port NetworkManager lists but has no connection on, and one carrying the
    # connection netplan generated from a file judged on its own.
    for devices in ("enP2p1s0f1np1:unavailable:\n", "enP2p1s0f1np1:disconnected:\n",
                    "enP2p1s0f1np1:connected:netplan-enP2p1s0f1np1\n"):
        problems, _adopted = verdict(nm_devices=devices)
        assert problems == [], (devices, problems)
    problems, _adopted = verdict(nm_devices="enP2p1s0f1np1:connecting (getting IP configuration):Wired connection 1\n")
    assert len(problems) == 1 and "delete its connection (nmcli connection delete 'Wired connection 1')" in problems[0]


def test_the_command_result_is_read_and_a_failed_read_is_a_problem():
    found = {"rc": 0, "stdout": json.dumps({"netplan": {"/etc/netplan/40-cx7.yaml": NVIDIA_CX7}, "keyfiles": {},
                                            "nm_devices": None}), "stderr": ""}
    assert len(fabric_config_verdict("spark3", LINKS, 9000, found, CONTEXT)[1]) == 2
    failed = {"rc": 127, "stdout": "", "stderr": "sh: 1: python3: not found"}
    problems, adopted = fabric_config_verdict("spark3", LINKS, 9000, failed, CONTEXT)
    assert adopted == []
    assert problems == [
        "spark3: the read of the network configuration files failed (rc 127): sh: 1: python3: not found; the fabric "
        "ports' existing configurations cannot be judged. Check that python3 runs on the node."
    ]


def test_links_of_another_shape_are_left_to_the_plan_check():
    text = NVIDIA_CX7.replace("mtu: 9000", "mtu: 1500")
    assert verdict({"/etc/netplan/40-cx7.yaml": text}, links="enp1s0f1np1") == ([], [])
    assert verdict({"/etc/netplan/40-cx7.yaml": text}, links=[{"hca": "x"}, 7]) == ([], [])


def test_the_read_script_shadows_by_name_leaves_ours_out_and_reads_keyfiles(tmp_path):
    roots = {name: tmp_path / name.strip("/").replace("/", "_") for name in (
        "/lib/netplan", "/etc/netplan", "/run/netplan", "/etc/NetworkManager/system-connections",
        "/run/NetworkManager/system-connections")}
    script = READ_SCRIPT
    for name, root in roots.items():
        root.mkdir()
        script = script.replace('"%s"' % name, '"%s"' % root)
    (roots["/lib/netplan"] / "40-cx7.yaml").write_text("lib")
    (roots["/etc/netplan"] / "40-cx7.yaml").write_text("etc")
    (roots["/etc/netplan"] / "60-dgxspark-fabric.yaml").write_text("ours")
    (roots["/etc/netplan"] / "notes.txt").write_text("not yaml")
    (roots["/etc/NetworkManager/system-connections"] / "cx7.nmconnection").write_text(KEYFILE)
    (roots["/run/NetworkManager/system-connections"] / "auto.nmconnection").write_text(
        GENERATED + "volatile=true\n")
    (roots["/etc/NetworkManager/system-connections"] / "wifi.nmconnection").write_text(
        "[connection]\nid=lab\ntype=wifi\n\n[wifi-security]\nkey-mgmt=wpa-psk\npsk=hunter22\n")
    (roots["/run/netplan"] / "50-wifi.yaml").write_text(
        "network:\n  wifis:\n    wlan0:\n      access-points:\n        lab: {password: hunter22, mode: infrastructure}\n"
        "        lab2:\n          auth: {key-management: psk}\n          password: 'hunter22'\n")
    ours = str(roots["/etc/netplan"] / "60-dgxspark-fabric.yaml")
    argv = read_argv(ours)
    assert argv[:2] == ["python3", "-c"] and argv[3] == ours
    ran = subprocess.run([sys.executable, "-c", script, ours], capture_output=True, text=True, check=True)
    read = json.loads(ran.stdout)
    assert read["netplan"][str(roots["/etc/netplan"] / "40-cx7.yaml")] == "etc"
    assert sorted(read["netplan"]) == [str(roots["/etc/netplan"] / "40-cx7.yaml"), str(roots["/run/netplan"] / "50-wifi.yaml")]
    keyfiles = {path.rsplit("/", 1)[1]: text for path, text in read["keyfiles"].items()}
    # Only the keys judged here leave the node: no secret, no uuid.
    assert keyfiles == {
        "cx7.nmconnection": "[connection]\nid=cx7-port1\ntype=ethernet\ninterface-name=enp1s0f1np1\n[ethernet]\n"
                            "mtu=9000\n[ipv4]\naddress1=192.168.100.11/24\nmethod=manual\n",
        "wifi.nmconnection": "[connection]\nid=lab\ntype=wifi\n",
        # NetworkManager's own mark is kept: such a connection holds no configuration of a user's.
        "auto.nmconnection": "[connection]\nid=Wired connection 2\ntype=ethernet\ninterface-name=enp1s0f1np1\n"
                             "[ipv4]\nmethod=auto\n[.nmmeta]\nnm-generated=true\n",
    }
    assert "hunter22" not in ran.stdout
    wifi = yaml.safe_load(read["netplan"][str(roots["/run/netplan"] / "50-wifi.yaml")])
    assert wifi["network"]["wifis"]["wlan0"]["access-points"]["lab"] == {"password": "(redacted)", "mode": "infrastructure"}
    # What comes back still says what the keyfile says.
    assert verdict(keyfiles={"/etc/NetworkManager/system-connections/cx7.nmconnection": keyfiles["cx7.nmconnection"]}) \
        == verdict(keyfiles={"/etc/NetworkManager/system-connections/cx7.nmconnection": KEYFILE})
    assert read["nm_devices"] is None or isinstance(read["nm_devices"], str)
