# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The network configurations a node already has for the fabric ports.

DGX OS configures its network through netplan (networkd or NetworkManager as
the renderer); NVIDIA's cluster setup writes netplan files of its own for the
ConnectX-7 port halves, and a desktop node may hold NetworkManager connections
for them. Before the roce_fabric role writes a link, :func:`fabric_config_verdict`
judges what the node's read found (:data:`READ_SCRIPT`) against the links the
role configures:

- a netplan file other than the role's that configures a fabric netdev with
  the same addresses and MTU, through the renderer the role uses (networkd, or
  NetworkManager where it runs), is adopted: named in the run, left as it is
  (the role's own file carries the same values, which netplan merges);
- one that configures it otherwise (other addresses, another MTU, DHCP), or
  through the other renderer, is refused naming the file;
- a NetworkManager connection (keyfile) of a user's bound to a fabric netdev,
  or NetworkManager managing it with such a connection (nmcli), is refused: the
  role configures the port through its netplan file (or systemd-networkd), and
  two managers (or two connections) would own it. NetworkManager's own
  connections (nm-generated: the automatic "Wired connection N", the one it
  assumes for an address set by another program) hold nothing and yield to the
  role's;
- a netplan file that does not parse is refused naming it (netplan would refuse
  every file with it).

Pure: no Ansible, unit-tested in tests/unit/plugins/plugin_utils/test_fabric_configs.py.
"""

from __future__ import annotations

import configparser
import fnmatch
import ipaddress
import json
import posixpath
from collections.abc import Mapping

import yaml

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fabric_plan import truthy


class FabricConfigError(Exception):
    """The links or the read are not of the shape this module reads."""


# Run on the node by node_read (one command of the fabric read, as root): the
# netplan files netplan reads (/lib, /etc, /run; a name in a later directory
# shadows the same name in an earlier one, as netplan does), the
# NetworkManager keyfiles, and, where NetworkManager runs, nmcli's device
# table. Prints one JSON line; files that cannot be read are null. Its
# argument, the role's own netplan file, is left out. Secrets never leave the
# node: a keyfile comes back as the keys judged here alone (connection id,
# type and interface-name, the IPv4 method and addresses, the MTU), and a
# netplan value whose key names a password, passphrase, PSK, secret or key is
# replaced with "(redacted)".
READ_SCRIPT = r"""
import configparser, glob, json, os, re, subprocess, sys
SECRET = re.compile(r"(\b[\w-]*(?:password|passphrase|psk|secret|key)[\w-]*[\"']?\s*:\s*)"
                    r"(\"[^\"\n]*\"|'[^'\n]*'|[^,}\n#]*)", re.I)
KEEP = {"connection": ("id", "type", "interface-name"), "ethernet": ("mtu",), "ipv4": ("method",),
        ".nmmeta": ("nm-generated",)}
def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None
def netplan_text(path):
    text = read(path)
    return None if text is None else SECRET.sub(lambda m: m.group(1) + '"(redacted)"', text)
def keyfile_text(path):
    text = read(path)
    if text is None:
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str
    try:
        parser.read_string(text)
    except configparser.Error:
        return ""
    lines = []
    for section in parser.sections():
        if section in KEEP:
            lines.append("[%s]" % section)
            lines += ["%s=%s" % (key, value) for key, value in parser[section].items()
                      if key in KEEP[section] or (section == "ipv4" and key.startswith("address"))]
    return "\n".join(lines) + "\n"
netplan = {}
for directory in ("/lib/netplan", "/etc/netplan", "/run/netplan"):
    for path in sorted(glob.glob(directory + "/*.yaml")):
        netplan[os.path.basename(path)] = path
ours = sys.argv[1] if len(sys.argv) > 1 else ""
keyfiles = {}
for directory in ("/etc/NetworkManager/system-connections", "/run/NetworkManager/system-connections"):
    for path in sorted(glob.glob(directory + "/*.nmconnection")):
        keyfiles[path] = keyfile_text(path)
devices = None
try:
    if subprocess.run(["systemctl", "is-active", "--quiet", "NetworkManager.service"]).returncode == 0:
        ran = subprocess.run(["nmcli", "-t", "-f", "DEVICE,STATE,CONNECTION", "device"],
                             capture_output=True, text=True)
        devices = ran.stdout if ran.returncode == 0 else None
except OSError:
    pass
print(json.dumps({"netplan": {path: netplan_text(path) for path in sorted(netplan.values()) if path != ours},
                  "keyfiles": keyfiles, "nm_devices": devices}))
""".strip()

NETPLAN_SECTIONS = ("ethernets",)
MEMBER_SECTIONS = ("bonds", "bridges")


def read_argv(ours):
    """The node_read command (argv) that prints what :data:`READ_SCRIPT` reads; O(ours) is left out."""
    return ["python3", "-c", READ_SCRIPT, str(ours or "")]


def _kind(value):
    return type(value).__name__


def _interface(value):
    """The IPv4/IPv6 interface of an address as netplan or NetworkManager writes it, or None."""
    if isinstance(value, Mapping) and len(value) == 1:
        # netplan's long form: - 192.168.100.11/24: {label: ...}
        value = next(iter(value))
    try:
        return ipaddress.ip_interface(str(value).strip())
    except ValueError:
        return None


def _addresses_text(interfaces):
    return ", ".join(sorted(str(i) for i in interfaces)) or "none"


def _int(value):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _planned(links, mtu):
    """[(position, netdev, {interface}, mtu)] of the links of a usable shape."""
    planned = []
    for position, link in enumerate(links if isinstance(links, (list, tuple)) else []):
        if not isinstance(link, Mapping) or not isinstance(link.get("netdev"), str) or not link["netdev"]:
            continue
        wanted = _interface("%s/%s" % (link.get("address"), link.get("prefix")))
        planned.append((position, link["netdev"], {wanted} if wanted is not None else set(), _int(mtu)))
    return planned


def _read(found):
    """The read's {netplan, keyfiles, nm_devices}: a mapping, or the command result whose stdout is its JSON."""
    if isinstance(found, Mapping) and "stdout" in found and "netplan" not in found:
        if found.get("rc") not in (0, "0"):
            raise FabricConfigError("the read of the network configuration files failed (rc %s): %s"
                                    % (found.get("rc"), str(found.get("stderr") or found.get("stdout")).strip()))
        try:
            found = json.loads(found.get("stdout") or "")
        except ValueError as exc:
            raise FabricConfigError("the read of the network configuration files printed no JSON (%s): %.200s"
                                    % (exc, found.get("stdout"))) from exc
    if not isinstance(found, Mapping):
        raise FabricConfigError("found is %s; expected a mapping with netplan, keyfiles and nm_devices" % _kind(found))
    return found


def _netplan_matches(key, conf, netdev):
    """Whether the netplan definition O(key) (O(conf)) applies to O(netdev)."""
    match = conf.get("match") if isinstance(conf, Mapping) else None
    if isinstance(match, Mapping):
        name = match.get("name")
        # A match by MAC address or driver alone cannot be judged from the name.
        return isinstance(name, str) and fnmatch.fnmatchcase(netdev, name)
    return key == netdev


def _netplan_doc(text):
    """(problem, network mapping or None) of one netplan file's text."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = " (line %d)" % (mark.line + 1) if mark is not None else ""
        return "does not parse as YAML%s: %s" % (where, str(getattr(exc, "problem", None) or exc).strip()), None
    if doc is None:
        return None, None
    network = doc.get("network") if isinstance(doc, Mapping) else None
    if not isinstance(network, Mapping):
        return "has no network: mapping at its top (netplan refuses it)", None
    return None, network


def _global_renderer(networks):
    """netplan's default renderer: network.renderer is one key of the merged configuration, so the
    last file (in netplan's order, by file name) that sets it gives it to every file's
    definitions, as DGX OS's 01-network-manager-all.yaml does; networkd where none does."""
    renderer = "networkd"
    for _name, network in sorted(networks, key=lambda pair: posixpath.basename(pair[0])):
        if network.get("renderer"):
            renderer = str(network["renderer"])
    return renderer


def _netplan_stanzas(network, netdevs, global_renderer):
    """[(netdev, section, key, conf, renderer)] of one netplan file's network mapping."""
    stanzas = []
    for section in NETPLAN_SECTIONS + MEMBER_SECTIONS:
        definitions = network.get(section)
        if not isinstance(definitions, Mapping):
            continue
        # A renderer under the device type (ethernets: {renderer: ...}) is not a definition.
        section_renderer = str(definitions.get("renderer") or global_renderer)
        for key, conf in definitions.items():
            if key == "renderer":
                continue
            conf = conf if isinstance(conf, Mapping) else {}
            renderer = str(conf.get("renderer") or section_renderer)
            members = [str(i) for i in conf.get("interfaces")] if isinstance(conf.get("interfaces"), list) else []
            for netdev in netdevs:
                applies = (_netplan_matches(str(key), conf, netdev) if section in NETPLAN_SECTIONS
                           else netdev in members)
                if applies:
                    stanzas.append((netdev, section, str(key), conf, renderer))
    return stanzas


def _netplan_differences(conf, wanted, mtu):
    """What the stanza sets that differs from the link: [text], empty when nothing differs."""
    differences = []
    addresses = conf.get("addresses")
    if addresses is not None:
        found = {_interface(a) for a in (addresses if isinstance(addresses, list) else [addresses])}
        if found != wanted:
            differences.append("addresses %s, expected %s" % (
                ", ".join(sorted(str(a) if a is not None else "(unreadable)" for a in found)) or "none",
                _addresses_text(wanted)))
    if conf.get("mtu") is not None and _int(conf.get("mtu")) != mtu:
        differences.append("mtu %s, expected %s" % (conf.get("mtu"), mtu))
    for key in ("dhcp4", "dhcp6"):
        if truthy(conf.get(key)):
            differences.append("%s: true, expected a static address without DHCP" % key)
    return differences


def _keyfile(text):
    """The keyfile's {section: {key: value}}, or None when it does not parse."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return {section: dict(parser[section]) for section in parser.sections()}


def _keyfile_summary(keyfile):
    ipv4 = keyfile.get("ipv4", {})
    addresses = [v.split(",")[0] for k, v in sorted(ipv4.items()) if k.startswith("address") and v]
    parts = []
    if addresses:
        parts.append("address %s" % ", ".join(addresses))
    elif ipv4.get("method"):
        parts.append("ipv4 method %s" % ipv4["method"])
    mtu = keyfile.get("ethernet", {}).get("mtu")
    if mtu:
        parts.append("mtu %s" % mtu)
    return "; ".join(parts)


def _nm_generated(keyfile):
    """Whether NetworkManager wrote the connection itself (the automatic "Wired connection N", or
    the one it assumes for an address another program set): it holds no configuration of a user's."""
    return truthy(keyfile.get(".nmmeta", {}).get("nm-generated"))


def _nm_devices(text):
    """{device: (state, connection)} of `nmcli -t -f DEVICE,STATE,CONNECTION device`."""
    devices = {}
    for line in str(text or "").splitlines():
        fields = line.split(":", 2)
        if len(fields) >= 2 and fields[0]:
            devices[fields[0]] = (fields[1], fields[2].replace("\\:", ":") if len(fields) > 2 else "")
    return devices


def fabric_config_verdict(host, links, mtu, found, context=None):
    """Judge the configurations the node already has for its fabric netdevs.

    O(links) is C(roce_fabric_links) (links of another shape are left to the plan
    check), O(mtu) C(roce_fabric_mtu). O(found) is the read of :data:`READ_SCRIPT`:
    C(netplan) (path -> text or None), C(keyfiles) (path -> text or None) and
    C(nm_devices) (nmcli's table, or None where NetworkManager does not run); or
    the command result whose stdout is that JSON. O(context): C(ours) (the role's
    netplan file, not judged), C(netplan_installed) (netplan files count only
    where netplan is installed), C(renderer) (networkd, the default, or
    NetworkManager: the renderer of the role's netplan file), C(backend) (how
    the role writes the links, for the messages).

    Returns C((problems, adopted)): one sentence per problem, naming the host,
    the file, the netdev, what was found and expected, and the fix; one sentence
    per netplan file adopted (it configures a fabric netdev as the role does).
    """
    context = context if isinstance(context, Mapping) else {}
    try:
        found = _read(found)
    except FabricConfigError as exc:
        return ["%s: %s; the fabric ports' existing configurations cannot be judged. Check that python3 runs on the "
                "node." % (host, exc)], []
    ours = str(context.get("ours") or "")
    backend = str(context.get("backend") or "systemd-networkd")
    renderer = str(context.get("renderer") or "networkd")
    planned = _planned(links, mtu)
    netdevs = [netdev for _position, netdev, _wanted, _mtu in planned]
    by_netdev = {netdev: (position, wanted, link_mtu) for position, netdev, wanted, link_mtu in planned}
    problems, adopted = [], []
    two_managers = ("while this role configures it through %s: two managers would own one port" % backend)

    netplan = found.get("netplan") or {}
    if not isinstance(netplan, Mapping):
        raise FabricConfigError("found netplan is %s; expected path -> text" % _kind(netplan))
    networks = []
    for path in sorted(netplan):
        if not truthy(context.get("netplan_installed", True)):
            continue
        text = netplan[path]
        if text is None:
            if path != ours:
                problems.append("%s: %s could not be read (netplan reads it, and it may configure the fabric "
                                "ports). Check its owner and mode (root, 0600)." % (host, path))
            continue
        problem, network = _netplan_doc(text)
        if problem and path != ours:
            problems.append("%s: %s %s; netplan would refuse every file with it, ours (%s) included. Fix or remove "
                            "%s." % (host, path, problem, ours or "the fabric's", path))
        elif network is not None:
            networks.append((path, network))
    global_renderer = _global_renderer(networks)
    for path, network in networks:
        if path == ours:
            continue
        stanzas = _netplan_stanzas(network, netdevs, global_renderer)
        for netdev, section, key, conf, their_renderer in stanzas:
            position, wanted, link_mtu = by_netdev[netdev]
            where = "%s: %s configures %s (roce_fabric_links[%d]) as network.%s.%s" % (
                host, path, netdev, position, section, key)
            if section in MEMBER_SECTIONS:
                problems.append("%s, a member of %s %s; the fabric link needs the port alone. Remove %s from that "
                                "%s (or the file), or set roce_fabric_links to another port."
                                % (where, section[:-1], key, netdev, section[:-1]))
                continue
            if their_renderer != renderer:
                problems.append("%s with renderer %s, %s. Remove that stanza (or the file) so that %s leaves %s, or "
                                "set its renderer to %s (roce_fabric_renderer chooses the role's)."
                                % (where, their_renderer, two_managers, their_renderer, netdev, renderer))
                continue
            differences = _netplan_differences(conf, wanted, link_mtu)
            if differences:
                problems.append("%s with %s (roce_fabric_links / roce_fabric_mtu). Remove that stanza (or the file) "
                                "so that the role's %s configures the port, or set roce_fabric_links and "
                                "roce_fabric_mtu to what it says." % (where, "; ".join(differences),
                                                                      ours or "configuration"))
            else:
                adopted.append("%s with the same values (addresses %s, mtu %s): adopted, left as it is; the role's "
                               "configuration carries the same values." % (
                                   where, _addresses_text(wanted) if conf.get("addresses") is not None else "not set",
                                   conf.get("mtu", "not set")))

    keyfiles = found.get("keyfiles") or {}
    if not isinstance(keyfiles, Mapping):
        raise FabricConfigError("found keyfiles is %s; expected path -> text" % _kind(keyfiles))
    # Each keyfile parsed once: None where it is unreadable or does not parse.
    parsed = {path: _keyfile(text) if text is not None else None for path, text in keyfiles.items()}
    for path in sorted(parsed):
        # Written by netplan from a file with renderer NetworkManager, which is judged itself.
        if path.startswith("/run/NetworkManager/system-connections/netplan-"):
            continue
        keyfile = parsed[path]
        if keyfile is None:
            continue
        connection = keyfile.get("connection", {})
        netdev = connection.get("interface-name", "")
        if netdev not in by_netdev or _nm_generated(keyfile):
            continue
        name = connection.get("id") or posixpath.basename(path).rsplit(".", 1)[0]
        summary = _keyfile_summary(keyfile)
        problems.append("%s: %s is a NetworkManager connection (id %s) for %s (roce_fabric_links[%d]%s), %s. Delete "
                        "it (nmcli connection delete '%s', or remove the file), or set roce_fabric_links to another "
                        "port." % (host, path, name, netdev, by_netdev[netdev][0],
                                   "; it sets %s" % summary if summary else "", two_managers, name))

    generated = {keyfile.get("connection", {}).get("id", "") for keyfile in parsed.values()
                 if keyfile is not None and _nm_generated(keyfile)}
    for netdev, (state, connection) in sorted(_nm_devices(found.get("nm_devices")).items()):
        # A device NetworkManager lists without a connection (disconnected, unavailable: a
        # fresh port before the first run) holds nothing; a netplan-<netdev> connection comes
        # from a netplan file, judged above; one NetworkManager generated itself yields to the
        # role's. An active connection of a user's owns the port.
        if netdev in by_netdev and state != "unmanaged" and connection \
                and not connection.startswith("netplan-") and connection not in generated:
            problems.append("%s: NetworkManager manages %s (roce_fabric_links[%d]; nmcli device: %s%s), %s. Mark it "
                            "unmanaged (nmcli device set %s managed no, and an unmanaged-devices=interface-name:%s "
                            "entry under /etc/NetworkManager/conf.d/ so that it stays so)%s."
                            % (host, netdev, by_netdev[netdev][0], state,
                               ", connection %s" % connection if connection else "", two_managers, netdev, netdev,
                               " and delete its connection (nmcli connection delete '%s')" % connection
                               if connection else ""))
    return problems, adopted
