# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""TEST-ONLY STAND-IN for the sysfs tree of a ConnectX-7 RoCE port.

This is not part of the collection and must never run on a real node. The
simulated cluster has no RDMA hardware, so this script writes, under a root
directory, files shaped like a ConnectX-7's ``class/infiniband/<hca>`` tree for
one HCA, port and netdev (and, with ``--sibling``, the adapter's other RDMA
functions), so that GID discovery and fabric checks can run against
``--sysfs-root <root>``:

* ``ports/<port>/gids/<i>`` with ``gid_attrs/types/<i>`` and
  ``gid_attrs/ndevs/<i>``: slots 0 and 1 hold the default GID
  (fe80::EUI-64 of the MAC) as RoCE v1 then v2; each extra address, each IPv4
  address and each global IPv6 address of the netdev then takes the first free
  slots, v1 then v2, as the kernel's GID cache does. Every other slot up to the
  table size holds the all-zero GID, and its attribute "files" are directories,
  so that reading them fails with an OSError the way the kernel's EINVAL does.
* ``ports/<port>/{state,phys_state,link_layer,rate}`` and zeroed
  ``ports/<port>/counters/*``.
* ``<root>/class/net``: a symlink to the real ``/sys/class/net`` (or
  ``--net-dir``), so MTU and netdev statistics come from the node itself.
* ``class/infiniband/<hca>/device``: as on a real node, a relative symlink to
  the PCI function's directory (``<root>/devices/pci0002:00/0002:00:00.0/
  0002:01:00.1`` for ``roceP2p1s0f1``: domain, bus, slot and function come from
  the name), whose ``net/<netdev>`` names the function's netdev (a symlink to
  ``<root>/class/net/<netdev>``). That is how the fabric checks tell which
  netdev an HCA belongs to.
* ``--sibling HCA=NETDEV`` (repeatable): another RDMA function of the adapter
  (a ConnectX-7 has one per port half), with its own PCI directory and
  netdev, port 1 DOWN and no GID table; only its pairing is used.

Addresses come from ``ip -j addr show dev <netdev>`` unless ``--address`` and
``--mac`` give them. Run again on an existing tree, or with ``--watch``, it
updates the table the way the kernel does when addresses change: slots of
addresses that went away are zeroed, the others keep their index, and new
addresses fill the first free slots.

Run it as ``python3 cx7_sysfs.py``: it has no shebang, which ansible-test
would reject if it named python3.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROCE_V1 = "IB/RoCE v1"
ROCE_V2 = "RoCE v2"
ZERO_GID = ":".join(["0000"] * 8)
DEFAULT_TABLE_SIZE = 255
DEFAULT_RATE = "200 Gb/sec (4X HDR)"

PORT_COUNTER_NAMES = (
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
)


# udev's names of a PCI RDMA function: [P<domain>]p<bus>s<slot>[f<function>], decimal.
_HCA_NAME_RE = re.compile(r"\Aroce(?:P(\d+))?p(\d+)s(\d+)(?:f(\d+))?\Z")


class StandinError(Exception):
    pass


def pci_function_dir(hca):
    """The PCI function directory of an HCA, relative to the root, as the kernel lays it out:
    devices/pci<domain>:00/<domain>:00:00.0/<domain>:<bus>:<slot>.<function>."""
    match = _HCA_NAME_RE.match(hca)
    if match is None:
        return os.path.join("devices", "pci0000:00", "0000:00:00.0", "standin-" + hca)
    domain, bus, slot, function = (int(group or 0) for group in match.groups())
    return os.path.join(
        "devices",
        "pci%04x:00" % domain,
        "%04x:00:00.0" % domain,
        "%04x:%02x:%02x.%x" % (domain, bus, slot, function),
    )


def parse_sibling(spec):
    """(hca, netdev) of a --sibling HCA=NETDEV."""
    hca, sep, netdev = spec.partition("=")
    if not sep or not hca or not netdev or "/" in hca + netdev:
        raise StandinError("--sibling %r: expected HCA=NETDEV, e.g. roceP2p1s0f0=enP2p1s0f0np0" % spec)
    return hca, netdev


def gid_text(ip):
    """A GID the way sysfs writes it: eight groups of four hex digits."""
    if ip.version == 4:
        ip = ipaddress.IPv6Address("::ffff:" + str(ip))
    return ":".join(ip.exploded.split(":"))


def parse_mac(mac):
    octets = [int(part, 16) for part in mac.split(":")]
    if len(octets) != 6 or any(o > 255 for o in octets):
        raise StandinError("%r is not a MAC address" % mac)
    return octets


def default_gid(mac):
    """fe80::/64 with the modified EUI-64 interface identifier of the MAC."""
    o = parse_mac(mac)
    eui = [o[0] ^ 0x02, o[1], o[2], 0xFF, 0xFE, o[3], o[4], o[5]]
    return ipaddress.IPv6Address(bytes([0xFE, 0x80, 0, 0, 0, 0, 0, 0] + eui))


def parse_address(text):
    try:
        return ipaddress.ip_interface(text.strip()).ip
    except ValueError:
        raise StandinError("%r is not an IP address" % text) from None


def gid_addresses(addresses):
    """The addresses that get GIDs besides the default one: IPv4 first, then global IPv6."""
    ips = [parse_address(a) for a in addresses]
    ipv4 = [ip for ip in ips if ip.version == 4]
    ipv6 = [ip for ip in ips if ip.version == 6 and not ip.is_link_local]
    return ipv4 + ipv6


def ip_addr_show(netdev):
    """(mac, addresses) of a netdev, from iproute2's JSON output."""
    try:
        result = subprocess.run(
            ["ip", "-j", "addr", "show", "dev", netdev],
            capture_output=True,
            text=True,
            check=False,
            env=dict(os.environ, LC_ALL="C"),
        )
    except OSError as exc:
        raise StandinError("cannot run ip: %s" % exc) from exc
    if result.returncode != 0:
        raise StandinError("ip addr show dev %s failed: %s" % (netdev, result.stderr.strip()))
    links = json.loads(result.stdout or "[]")
    if not links:
        raise StandinError("netdev %s not found" % netdev)
    link = links[0]
    addresses = [
        info["local"]
        for info in link.get("addr_info", [])
        if info.get("family") in ("inet", "inet6") and "local" in info
    ]
    return link.get("address"), addresses


def desired_entries(mac, netdev, addresses, extra_addresses=()):
    """Default pair, then [(gid, type, ndev), ...] in the order the slots fill."""
    default = gid_text(default_gid(mac))
    defaults = [(default, ROCE_V1, netdev), (default, ROCE_V2, netdev)]
    rest = []
    seen = set()
    extras = []
    for spec in extra_addresses:
        address, _sep, ndev = spec.partition("@")
        extras.append((address, ndev or netdev))
    for ip, ndev in [(parse_address(a), d) for a, d in extras] + [
        (ip, netdev) for ip in gid_addresses(addresses)
    ]:
        gid = gid_text(ip)
        if (gid, ndev) in seen or gid == default:
            continue
        seen.add((gid, ndev))
        rest.extend([(gid, ROCE_V1, ndev), (gid, ROCE_V2, ndev)])
    return defaults, rest


def _read(path):
    with open(path, encoding="ascii") as handle:
        return handle.read().strip()


def read_slots(port_dir):
    """(populated {slot: (gid, type, ndev)}, slots present on disk)."""
    gids_dir = os.path.join(port_dir, "gids")
    try:
        names = [n for n in os.listdir(gids_dir) if n.isdigit()]
    except FileNotFoundError:
        return {}, set()
    populated = {}
    for name in names:
        gid = _read(os.path.join(gids_dir, name))
        if gid.replace(":", "").strip("0") == "":
            continue
        populated[int(name)] = (
            gid,
            _read(os.path.join(port_dir, "gid_attrs", "types", name)),
            _read(os.path.join(port_dir, "gid_attrs", "ndevs", name)),
        )
    return populated, {int(n) for n in names}


def plan_slots(current, defaults, rest, table_size):
    """Kernel-like slot assignment: survivors keep their slot, newcomers take the first free."""
    planned = {0: defaults[0], 1: defaults[1]}
    wanted = list(rest)
    for slot, entry in sorted(current.items()):
        if slot >= 2 and entry in wanted:
            planned[slot] = entry
            wanted.remove(entry)
    free = (slot for slot in range(2, table_size) if slot not in planned)
    for entry in wanted:
        slot = next(free, None)
        if slot is None:
            raise StandinError("GID table of %d slots is full" % table_size)
        planned[slot] = entry
    return planned


def atomic_write(path, text):
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix="." + name + ".", dir=directory)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(text)
    os.chmod(tmp, 0o444)
    os.replace(tmp, path)


def write_if_changed(path, text):
    try:
        if _read(path) == text.strip():
            return False
    except OSError:
        pass
    atomic_write(path, text)
    return True


def _make_unreadable(path):
    if os.path.isdir(path):
        return
    if os.path.lexists(path):
        os.unlink(path)
    os.mkdir(path)


def _make_file(path, text):
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    atomic_write(path, text + "\n")


def write_slot(port_dir, slot, entry):
    """Write one slot in an order a concurrent reader cannot misread.

    Emptying zeroes the GID before its attributes turn unreadable; filling
    makes the attributes readable before the GID appears.
    """
    name = str(slot)
    gid_path = os.path.join(port_dir, "gids", name)
    type_path = os.path.join(port_dir, "gid_attrs", "types", name)
    ndev_path = os.path.join(port_dir, "gid_attrs", "ndevs", name)
    if entry is None:
        atomic_write(gid_path, ZERO_GID + "\n")
        _make_unreadable(type_path)
        _make_unreadable(ndev_path)
    else:
        gid, gid_type, ndev = entry
        if os.path.exists(gid_path):
            atomic_write(gid_path, ZERO_GID + "\n")
        _make_file(type_path, gid_type)
        _make_file(ndev_path, ndev)
        atomic_write(gid_path, gid + "\n")


def _ensure_symlink(path, target):
    if os.path.islink(path):
        if os.readlink(path) == target:
            return
    elif os.path.exists(path):
        raise StandinError("%s exists and is not a symlink; refusing to replace it" % path)
    tmp = path + ".tmp-%d" % os.getpid()
    os.symlink(target, tmp)
    os.replace(tmp, path)


def link_device(root, hca_dir, hca, netdev):
    """Point <hca>/device at the PCI function's directory and put the netdev in its net/."""
    root = os.fspath(root)
    pci_dir = os.path.join(root, pci_function_dir(hca))
    os.makedirs(os.path.join(pci_dir, "net"), exist_ok=True)
    _ensure_symlink(os.path.join(pci_dir, "net", netdev), os.path.join(root, "class", "net", netdev))
    device = os.path.join(hca_dir, "device")
    if os.path.isdir(device) and not os.path.islink(device):
        # A tree of an earlier stand-in: device/ was a directory of its own.
        shutil.rmtree(device)
    _ensure_symlink(device, os.path.relpath(pci_dir, hca_dir))


def sync_sibling(root, hca, netdev, port=1, rate=DEFAULT_RATE):
    """Another RDMA function of the adapter: its device, netdev and a DOWN port, no GIDs."""
    hca_dir = os.path.join(os.fspath(root), "class", "infiniband", hca)
    port_dir = os.path.join(hca_dir, "ports", str(port))
    os.makedirs(port_dir, exist_ok=True)
    link_device(root, hca_dir, hca, netdev)
    write_if_changed(os.path.join(hca_dir, "node_type"), "1: CA\n")
    write_if_changed(os.path.join(hca_dir, "hca_type"), "MT4129\n")
    write_if_changed(os.path.join(port_dir, "link_layer"), "Ethernet\n")
    write_if_changed(os.path.join(port_dir, "rate"), rate + "\n")
    write_if_changed(os.path.join(port_dir, "state"), "1: DOWN\n")
    write_if_changed(os.path.join(port_dir, "phys_state"), "3: Disabled\n")


def _parse_bumps(specs):
    bumps = {}
    for spec in specs or ():
        name, _sep, amount = spec.partition("=")
        if name not in PORT_COUNTER_NAMES:
            raise StandinError(
                "unknown counter %r; known: %s" % (name, ", ".join(PORT_COUNTER_NAMES))
            )
        try:
            bumps[name] = bumps.get(name, 0) + (int(amount) if amount else 1)
        except ValueError:
            raise StandinError("--bump-counter %s: %r is not an integer" % (name, amount)) from None
    return bumps


def sync_tree(
    root,
    hca,
    port,
    netdev,
    mac,
    addresses,
    extra_addresses=(),
    table_size=DEFAULT_TABLE_SIZE,
    down=False,
    rate=DEFAULT_RATE,
    net_dir="/sys/class/net",
    bump_counters=None,
    siblings=(),
):
    """Create or update the tree; return the populated slots {slot: (gid, type, ndev)}.

    O(siblings) are C(HCA=NETDEV) strings or (hca, netdev) pairs: other RDMA
    functions of the adapter (:func:`sync_sibling`)."""
    root = os.fspath(root)
    pairs = [parse_sibling(spec) if isinstance(spec, str) else tuple(spec) for spec in siblings or ()]
    hca_dir = os.path.join(root, "class", "infiniband", hca)
    port_dir = os.path.join(hca_dir, "ports", str(port))
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs", "counters"):
        os.makedirs(os.path.join(port_dir, sub), exist_ok=True)
    _ensure_symlink(os.path.join(root, "class", "net"), os.fspath(net_dir))
    link_device(root, hca_dir, hca, netdev)
    for sibling_hca, sibling_netdev in pairs:
        if sibling_hca == hca or pci_function_dir(sibling_hca) == pci_function_dir(hca):
            raise StandinError("--sibling %s=%s names the PCI function of %s" % (sibling_hca, sibling_netdev, hca))
        sync_sibling(root, sibling_hca, sibling_netdev, port=port, rate=rate)

    write_if_changed(os.path.join(hca_dir, "node_type"), "1: CA\n")
    write_if_changed(os.path.join(hca_dir, "hca_type"), "MT4129\n")
    write_if_changed(os.path.join(port_dir, "link_layer"), "Ethernet\n")
    write_if_changed(os.path.join(port_dir, "rate"), rate + "\n")
    write_if_changed(os.path.join(port_dir, "state"), "1: DOWN\n" if down else "4: ACTIVE\n")
    write_if_changed(
        os.path.join(port_dir, "phys_state"), "3: Disabled\n" if down else "5: LinkUp\n"
    )
    bumps = _parse_bumps(bump_counters)
    for name in PORT_COUNTER_NAMES:
        path = os.path.join(port_dir, "counters", name)
        try:
            value = int(_read(path))
        except (OSError, ValueError):
            value = 0
        if name in bumps or not os.path.exists(path):
            atomic_write(path, "%d\n" % (value + bumps.get(name, 0)))

    current, on_disk = read_slots(port_dir)
    size = max([table_size] + [slot + 1 for slot in on_disk])
    defaults, rest = desired_entries(mac, netdev, addresses, extra_addresses)
    planned = plan_slots(current, defaults, rest, size)
    for slot in range(size):
        if slot not in on_disk or current.get(slot) != planned.get(slot):
            write_slot(port_dir, slot, planned.get(slot))
    return planned


def _source(args):
    """Callable giving (mac, addresses) now: from the options, else from ip."""

    def observe():
        mac, addresses = args.mac, args.address
        if mac is None or addresses is None:
            seen_mac, seen_addresses = ip_addr_show(args.netdev)
            mac = mac or seen_mac
            addresses = seen_addresses if addresses is None else addresses
        if not mac:
            raise StandinError("netdev %s has no MAC address" % args.netdev)
        return mac, list(addresses)

    return observe


def _sync_args(args, mac, addresses, bump):
    return sync_tree(
        args.root,
        args.hca,
        args.port,
        args.netdev,
        mac,
        addresses,
        extra_addresses=args.extra_address or (),
        table_size=args.table_size,
        down=args.down,
        rate=args.rate,
        net_dir=args.net_dir,
        bump_counters=args.bump_counter if bump else None,
        siblings=args.sibling or (),
    )


def _describe(planned):
    return ", ".join(
        "%d=%s/%s" % (slot, gid, gid_type.split()[-1])
        for slot, (gid, gid_type, _n) in sorted(planned.items())
    )


def _log(line):
    # Flushed at once: under systemd stdout is a pipe to the journal.
    print(line, flush=True)


def watch(args, observe, interval, iterations=None, sleep=time.sleep, log=_log):
    """Re-sync whenever the observed (mac, addresses) change; iterations=None loops forever."""
    last = None
    bumped = False
    count = 0
    while iterations is None or count < iterations:
        count += 1
        try:
            seen = observe()
        except StandinError as exc:
            if last != "missing":
                log("cx7_sysfs: waiting: %s" % exc)
            last = "missing"
        else:
            if seen != last:
                planned = _sync_args(args, seen[0], seen[1], bump=not bumped)
                bumped = True
                log(
                    "cx7_sysfs: %s addresses %s; GID table %s"
                    % (args.netdev, seen[1], _describe(planned))
                )
                last = seen
        if iterations is None or count < iterations:
            sleep(interval)


def _argument_parser():
    parser = argparse.ArgumentParser(
        prog="cx7_sysfs",
        description="TEST-ONLY stand-in: write a ConnectX-7-shaped RoCE sysfs tree under ROOT.",
    )
    parser.add_argument("--root", required=True, help="directory to build the tree in")
    parser.add_argument("--hca", required=True)
    parser.add_argument("--port", type=int, default=1)
    parser.add_argument("--netdev", required=True)
    parser.add_argument("--mac", help="MAC for the default GID (default: the netdev's)")
    parser.add_argument(
        "--address",
        action="append",
        help="address of the netdev (repeatable; default: the netdev's current addresses)",
    )
    parser.add_argument(
        "--extra-address",
        action="append",
        metavar="ADDR[@NETDEV]",
        help="address whose GIDs precede the netdev's own, pushing their index up (repeatable)",
    )
    parser.add_argument("--table-size", type=int, default=DEFAULT_TABLE_SIZE)
    parser.add_argument("--rate", default=DEFAULT_RATE)
    parser.add_argument("--down", action="store_true", help="port DOWN / Disabled")
    parser.add_argument(
        "--bump-counter",
        action="append",
        metavar="NAME[=N]",
        help="add N (default 1) to a port counter (repeatable)",
    )
    parser.add_argument(
        "--sibling",
        action="append",
        metavar="HCA=NETDEV",
        help="another RDMA function of the adapter and its netdev, port DOWN (repeatable)",
    )
    parser.add_argument("--net-dir", default="/sys/class/net", help="target of <root>/class/net")
    parser.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        help="keep running, updating the table when the netdev's addresses change",
    )
    return parser


def main(argv=None):
    args = _argument_parser().parse_args(argv)
    if args.table_size < 2:
        print("cx7_sysfs: --table-size must be at least 2", file=sys.stderr)
        return 2
    observe = _source(args)
    try:
        for spec in args.sibling or ():
            parse_sibling(spec)
        if args.watch:
            signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(0))
            watch(args, observe, args.watch)
        else:
            mac, addresses = observe()
            _sync_args(args, mac, addresses, bump=True)
    except (StandinError, OSError) as exc:
        print("cx7_sysfs: %s" % exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
