# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""RoCE GID discovery from sysfs.

One implementation with two callers: the ``dgxspark.cluster.roce_gid`` module,
and the engine's systemd unit, which runs this file as a script at every start
(ExecStartPre) so the GID index follows the node's current fabric address::

    python3 _roce_gid.py --hca roceP2p1s0f1 --address 10.10.2.11 \\
        --write-env /run/dgxspark/nccl-gid.env

Standard library only: it must run on the node's system Python without Ansible.
Run it through an explicit interpreter (``python3 FILE``): it carries no
shebang because ansible-test accepts none that names python3.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import sys
import tempfile

ROCE_V1_TYPE = "IB/RoCE v1"
ROCE_V2_TYPE = "RoCE v2"
_VERSION_BY_TYPE = {ROCE_V1_TYPE: 1, ROCE_V2_TYPE: 2}

SCOPE_IPV4 = "ipv4"
SCOPE_GLOBAL = "global"
SCOPE_LINK_LOCAL = "link-local"

# With only a netdev to go on, prefer the GID NCCL can route on: the requested
# RoCE version before the other one, and inside a version an IPv4-mapped GID,
# then a global IPv6 GID, then the link-local default GID.
SCOPE_PRIORITY = (SCOPE_IPV4, SCOPE_GLOBAL, SCOPE_LINK_LOCAL)

# iboe_get_mtu() in include/rdma/ib_addr.h subtracts these headers
# (GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4) from the
# netdev MTU before picking the largest IB MTU that still fits.
ROCE_HEADER_OVERHEAD = 40 + 8 + 12 + 4 + 28 + 4
IB_MTUS = (4096, 2048, 1024, 512, 256)

PORT_COUNTERS = (
    "symbol_error",
    "link_downed",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_rcv_remote_physical_errors",
)
NETDEV_COUNTERS = (
    "rx_crc_errors",
    "rx_dropped",
    "tx_dropped",
    "rx_errors",
)

ENV_VARIABLE = "NCCL_IB_GID_INDEX"
EXIT_FAILURE = 2


class RoceGidError(Exception):
    """Base class: the GID table could not be read or gave no usable entry."""

    def __init__(self, message, table=None):
        super().__init__(message)
        self.table = list(table or [])


class HcaNotFoundError(RoceGidError):
    """The HCA does not exist under <sysfs_root>/class/infiniband."""

    def __init__(self, message, available):
        super().__init__(message)
        self.available = list(available)


class PortNotFoundError(RoceGidError):
    """The HCA exists but has no such port."""

    def __init__(self, message, available):
        super().__init__(message)
        self.available = list(available)


class GidNotFoundError(RoceGidError):
    """The table was read, but no entry matches what was asked for."""


class AddressOnOtherNetdevError(GidNotFoundError):
    """The address is in the table, but bound to another netdev than requested."""

    def __init__(self, message, table, netdevs):
        super().__init__(message, table)
        self.netdevs = list(netdevs)


def _ib_class_dir(sysfs_root):
    return os.path.join(os.fspath(sysfs_root), "class", "infiniband")


def _listdir_or_empty(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _port_dir(sysfs_root, hca, port):
    ib_dir = _ib_class_dir(sysfs_root)
    hca_dir = os.path.join(ib_dir, hca)
    if not os.path.isdir(hca_dir):
        available = _listdir_or_empty(ib_dir)
        if available:
            found = "the HCAs present are " + ", ".join(available)
        else:
            found = "there are no RDMA devices at all (is the RDMA driver loaded?)"
        raise HcaNotFoundError("HCA %s not found under %s; %s." % (hca, ib_dir, found), available)
    ports_dir = os.path.join(hca_dir, "ports")
    port_dir = os.path.join(ports_dir, str(port))
    if not os.path.isdir(port_dir):
        available = sorted(_listdir_or_empty(ports_dir), key=_numeric_key)
        raise PortNotFoundError(
            "HCA %s has no port %s; its ports are %s."
            % (hca, port, ", ".join(available) or "none"),
            available,
        )
    return hca_dir, port_dir


def _numeric_key(name):
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _read_text(path):
    with open(path, encoding="ascii", errors="replace") as handle:
        return handle.read().strip()


def _read_optional(path):
    """Text of an attribute file, or None where it is absent or unreadable."""
    try:
        return _read_text(path)
    except OSError:
        return None


def _gid_bytes(text):
    """16 bytes of a GID as sysfs writes it, or None for an empty slot."""
    digits = text.replace(":", "")
    if not re.fullmatch(r"[0-9a-fA-F]*", digits):
        raise ValueError("not a GID: %r" % text)
    if not digits or int(digits, 16) == 0:
        return None
    if len(digits) != 32:
        raise ValueError("not a GID: %r" % text)
    return bytes.fromhex(digits)


def _slot_emptied(gid_path):
    try:
        return _gid_bytes(_read_optional(gid_path) or "") is None
    except ValueError:
        return False


def describe_gid(gid_bytes):
    """Return (address, scope) for a GID: the IPv4 for an IPv4-mapped GID."""
    ipv6 = ipaddress.IPv6Address(gid_bytes)
    if ipv6.ipv4_mapped is not None:
        return str(ipv6.ipv4_mapped), SCOPE_IPV4
    if ipv6.is_link_local:
        return str(ipv6), SCOPE_LINK_LOCAL
    return str(ipv6), SCOPE_GLOBAL


def read_gid_table(sysfs_root, hca, port):
    """Read the populated GID slots of one HCA port.

    Empty (all-zero) slots are skipped without touching their gid_attrs files,
    because the kernel answers reads of those with EINVAL.
    """
    _hca_dir, port_dir = _port_dir(sysfs_root, hca, port)
    gids_dir = os.path.join(port_dir, "gids")
    try:
        slots = [name for name in os.listdir(gids_dir) if name.isdigit()]
    except OSError as exc:
        raise RoceGidError(
            "HCA %s port %s has no readable GID table at %s: %s"
            % (hca, port, gids_dir, exc.strerror or exc)
        ) from exc
    types_dir = os.path.join(port_dir, "gid_attrs", "types")
    ndevs_dir = os.path.join(port_dir, "gid_attrs", "ndevs")

    table = []
    for slot in sorted(slots, key=int):
        gid_path = os.path.join(gids_dir, slot)
        gid_text = _read_optional(gid_path)
        try:
            gid = _gid_bytes(gid_text or "")
        except ValueError:
            raise RoceGidError(
                "GID slot %s of %s port %s holds %r, which is not a GID."
                % (slot, hca, port, gid_text),
                table,
            ) from None
        if gid is None:
            continue
        try:
            gid_type = _read_text(os.path.join(types_dir, slot))
            netdev = _read_text(os.path.join(ndevs_dir, slot)) or None
        except OSError as exc:
            # The kernel may empty a slot between the two reads (an address
            # went away); only a slot that is still populated is an error.
            if _slot_emptied(gid_path):
                continue
            raise RoceGidError(
                "GID slot %s of %s port %s is populated but its attributes "
                "cannot be read: %s" % (slot, hca, port, exc.strerror or exc),
                table,
            ) from exc
        address, scope = describe_gid(gid)
        table.append(
            {
                "index": int(slot),
                "gid": gid_text,
                "type": gid_type,
                "roce_version": _VERSION_BY_TYPE.get(gid_type),
                "netdev": netdev,
                "address": address,
                "scope": scope,
            }
        )
    return table


def format_entry(entry):
    return "index %d: gid %s (%s), %s, netdev %s" % (
        entry["index"],
        entry["gid"],
        entry["address"],
        entry["type"],
        entry["netdev"] or "none",
    )


def format_table(table):
    """The table as one readable paragraph, for error messages."""
    if not table:
        return "The GID table holds no populated entry."
    return "The GID table holds %d entries: %s." % (
        len(table),
        "; ".join(format_entry(entry) for entry in table),
    )


def normalise_address(address):
    """Canonical text of an IP address; accepts a prefix length, a zone and IPv4-mapped IPv6."""
    text = re.sub(r"%[^/]*", "", str(address).strip())
    try:
        ip = ipaddress.ip_interface(text).ip
    except ValueError:
        raise RoceGidError("%r is not an IPv4 or IPv6 address." % (address,)) from None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip)


def _type_name(roce_version):
    return ROCE_V1_TYPE if roce_version == 1 else ROCE_V2_TYPE


def select_gid(table, address=None, netdev=None, roce_version=2):
    """Pick one entry of a table from read_gid_table().

    With an address: the entry for that address of the requested RoCE version,
    on the given netdev when one is given. With only a netdev: the best entry on
    it, the requested version first, and within a version IPv4-mapped, then
    global IPv6, then link-local (SCOPE_PRIORITY); the lowest index breaks ties.
    Returns a copy of the entry.
    """
    if roce_version not in (1, 2):
        raise ValueError("roce_version must be 1 or 2, got %r" % (roce_version,))
    if address is None and netdev is None:
        raise ValueError("select_gid() needs an address, a netdev or both")

    if address is not None:
        wanted = normalise_address(address)
        with_address = [e for e in table if e["address"] == wanted]
        if not with_address:
            raise GidNotFoundError(
                "No GID carries address %s. %s" % (wanted, format_table(table)), table
            )
        with_version = [e for e in with_address if e["roce_version"] == roce_version]
        if not with_version:
            raise GidNotFoundError(
                "Address %s is in the GID table only as %s, not as %s. %s"
                % (
                    wanted,
                    ", ".join(sorted({e["type"] for e in with_address})),
                    _type_name(roce_version),
                    format_table(table),
                ),
                table,
            )
        if netdev is not None:
            on_netdev = [e for e in with_version if e["netdev"] == netdev]
            if not on_netdev:
                others = sorted({e["netdev"] or "none" for e in with_version})
                raise AddressOnOtherNetdevError(
                    "Address %s is bound to netdev %s, not to the requested netdev %s. %s"
                    % (wanted, ", ".join(others), netdev, format_table(table)),
                    table,
                    others,
                )
            with_version = on_netdev
        return dict(min(with_version, key=lambda e: e["index"]))

    on_netdev = [e for e in table if e["netdev"] == netdev]
    if not on_netdev:
        present = sorted({e["netdev"] for e in table if e["netdev"]})
        raise GidNotFoundError(
            "No GID is bound to netdev %s (netdevs in the table: %s). %s"
            % (netdev, ", ".join(present) or "none", format_table(table)),
            table,
        )
    usable = [e for e in on_netdev if e["roce_version"] in (1, 2)]
    if not usable:
        raise GidNotFoundError(
            "No RoCE v1 or v2 GID is bound to netdev %s. %s" % (netdev, format_table(table)),
            table,
        )

    def rank(entry):
        return (
            0 if entry["roce_version"] == roce_version else 1,
            SCOPE_PRIORITY.index(entry["scope"]),
            entry["index"],
        )

    return dict(min(usable, key=rank))


def roce_path_mtu(netdev_mtu):
    """The RoCE path MTU the kernel derives from a netdev MTU, or None if below 256."""
    if netdev_mtu is None:
        return None
    payload = int(netdev_mtu) - ROCE_HEADER_OVERHEAD
    for ib_mtu in IB_MTUS:
        if payload >= ib_mtu:
            return ib_mtu
    return None


def _after_colon(text):
    """'4: ACTIVE' -> 'ACTIVE'; text without a code is returned as it is."""
    if text is None:
        return None
    code, sep, name = text.partition(":")
    return name.strip() if sep and code.strip().isdigit() else text


def _parse_gbps(rate):
    match = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", rate or "")
    return float(match.group(1)) if match else None


def _port_netdev(hca_dir, port_dir):
    """The netdev behind a port: the default GID's ndev, else the PCI device's only netdev."""
    try:
        default_gid = _gid_bytes(_read_optional(os.path.join(port_dir, "gids", "0")) or "")
    except ValueError:
        default_gid = None
    if default_gid is not None:
        netdev = _read_optional(os.path.join(port_dir, "gid_attrs", "ndevs", "0"))
        if netdev:
            return netdev
    netdevs = _listdir_or_empty(os.path.join(hca_dir, "device", "net"))
    return netdevs[0] if len(netdevs) == 1 else None


def _read_int(path):
    text = _read_optional(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def read_port_info(sysfs_root, hca, port, netdev=None):
    """State, link layer, rate and MTUs of one HCA port.

    The netdev is found from the port when not given; netdev_mtu and
    active_mtu are None when it cannot be found.
    """
    hca_dir, port_dir = _port_dir(sysfs_root, hca, port)
    if netdev is None:
        netdev = _port_netdev(hca_dir, port_dir)
    rate = _read_optional(os.path.join(port_dir, "rate"))
    netdev_mtu = None
    if netdev:
        netdev_mtu = _read_int(os.path.join(os.fspath(sysfs_root), "class", "net", netdev, "mtu"))
    return {
        "state": _after_colon(_read_optional(os.path.join(port_dir, "state"))),
        "phys_state": _after_colon(_read_optional(os.path.join(port_dir, "phys_state"))),
        "link_layer": _read_optional(os.path.join(port_dir, "link_layer")),
        "rate": rate,
        "rate_gbps": _parse_gbps(rate),
        "netdev": netdev,
        "netdev_mtu": netdev_mtu,
        "active_mtu": roce_path_mtu(netdev_mtu),
    }


def read_port_counters(sysfs_root, hca, port, netdev=None):
    """Error counters of a port (and of its netdev when given): name -> int.

    Counters the device does not expose are left out rather than reported as 0.
    """
    _hca_dir, port_dir = _port_dir(sysfs_root, hca, port)
    counters = {}
    for name in PORT_COUNTERS:
        value = _read_int(os.path.join(port_dir, "counters", name))
        if value is not None:
            counters[name] = value
    if netdev:
        stats_dir = os.path.join(os.fspath(sysfs_root), "class", "net", netdev, "statistics")
        for name in NETDEV_COUNTERS:
            value = _read_int(os.path.join(stats_dir, name))
            if value is not None:
                counters[name] = value
    return counters


def write_env_file(path, index):
    """Atomically write NCCL_IB_GID_INDEX=<index> to path, mode 0644."""
    path = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(path)
    fd, tmp_path = tempfile.mkstemp(prefix="." + name + ".", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write("%s=%d\n" % (ENV_VARIABLE, index))
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
            os.fsync(handle.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        try:
            os.unlink(tmp_path)
        except OSError:
            pass
        raise


def _argument_parser():
    parser = argparse.ArgumentParser(
        prog="roce_gid",
        description="Find the RoCE GID index of an HCA port for an address or netdev.",
    )
    parser.add_argument("--sysfs-root", default="/sys", help="sysfs mount point (default /sys)")
    parser.add_argument("--hca", required=True, help="RDMA device name, e.g. rocep1s0f1")
    parser.add_argument("--port", type=int, default=1, help="HCA port number (default 1)")
    parser.add_argument("--address", help="IP address the GID must carry")
    parser.add_argument("--netdev", help="netdev the GID must be bound to")
    parser.add_argument("--roce-version", type=int, choices=(1, 2), default=2)
    parser.add_argument(
        "--format",
        choices=("index", "json"),
        default="index",
        help="print the index alone, or the whole entry as JSON",
    )
    parser.add_argument(
        "--write-env",
        metavar="PATH",
        help="also write %s=<index> to PATH, atomically" % ENV_VARIABLE,
    )
    return parser


def main(argv=None):
    # The command line of the engine unit's ExecStartPre: it prints the GID or
    # why there is none, and returns the exit status. No module runs main().
    # pylint: disable=ansible-bad-function
    parser = _argument_parser()
    args = parser.parse_args(argv)
    if args.address is None and args.netdev is None:
        parser.error("give --address, --netdev or both")
    try:
        table = read_gid_table(args.sysfs_root, args.hca, args.port)
        entry = select_gid(
            table, address=args.address, netdev=args.netdev, roce_version=args.roce_version
        )
    except RoceGidError as exc:
        sought = " and ".join(
            "%s %s" % (label, value)
            for label, value in (("address", args.address), ("netdev", args.netdev))
            if value is not None
        )
        print(
            "roce_gid: looked for a %s GID on %s port %s for %s: %s"
            % (_type_name(args.roce_version), args.hca, args.port, sought, exc),
            file=sys.stderr,
        )
        return EXIT_FAILURE
    if args.write_env:
        try:
            write_env_file(args.write_env, entry["index"])
        except OSError as exc:
            print(
                "roce_gid: found GID index %d but cannot write %s: %s"
                % (entry["index"], args.write_env, exc.strerror or exc),
                file=sys.stderr,
            )
            return EXIT_FAILURE
    if args.format == "json":
        print(json.dumps(entry, sort_keys=True))
    else:
        print(entry["index"])
    return 0


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
