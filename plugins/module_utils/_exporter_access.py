# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Who may reach a node's metrics exporter: a chain of the node's firewall in front of its port.

node-exporter has no allow-list of its own and serves every address it
listens on to anyone who connects. The monitoring role runs this script from
a oneshot unit on every node (``apply`` at start, ``remove`` at stop), before
node-exporter starts, so that only the hosts Prometheus runs on and the node
itself reach the exporter's TCP port:

* the node's INPUT chain sends TCP to the port to the chain ``CHAIN`` (one
  rule, first in INPUT);
* ``CHAIN`` returns the node's own packets (those on the loopback
  interface, whatever address they were sent to) and the listed readers'
  packets to INPUT,
  where the rest of the node's firewall still judges them (the chain accepts
  nothing itself), and rejects every other one with a TCP reset.

IPv4 through ``iptables``, IPv6 through ``ip6tables`` (whichever backend the
node's alternatives choose, as Docker uses); a node without ``ip6tables`` is
told so and keeps IPv4's rules. Readers are addresses, networks or host names
(resolved at each apply). Running ``apply`` again rebuilds the chain, so it is
safe to repeat. Standard library only: it runs on the node's system Python.
"""

import argparse
import ipaddress
import os
import socket
import subprocess
import sys

CHAIN = "DGXSPARK-EXPORTER"
FAMILIES = (("iptables", 4), ("ip6tables", 6))


# The same few lines as _engine_api_guard.py's: each file is installed alone
# (this one in libexec, that one into the engine's container), so neither can
# import the other.
def _resolve(name):
    try:
        infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    return sorted({info[4][0].split("%", 1)[0] for info in infos})


def reader_networks(readers, resolve=_resolve):
    """The readers as C({4: [networks], 6: [networks]}) and the names that resolved to nothing."""
    networks = {4: [], 6: []}
    unresolved = []
    for reader in readers:
        reader = reader.strip()
        if not reader:
            continue
        try:
            found = [ipaddress.ip_network(reader, strict=False)]
        except ValueError:
            found = [ipaddress.ip_network(address) for address in resolve(reader)]
            if not found:
                unresolved.append(reader)
        for network in found:
            if str(network) not in networks[network.version]:
                networks[network.version].append(str(network))
    return networks, unresolved


def jump_rule(port):
    """The INPUT rule that sends TCP to O(port) through the chain (without -I/-D/-C)."""
    return ["INPUT", "-p", "tcp", "--dport", str(int(port)), "-j", CHAIN]


def chain_rules(networks):
    """The chain's rules in order (each without -A CHAIN): the node itself and the readers return, everyone
    else is reset."""
    rules = [["-i", "lo", "-j", "RETURN"]] + [["-s", network, "-j", "RETURN"] for network in networks]
    rules.append(["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"])
    return rules


def _run(tool, arguments, check=True):
    done = subprocess.run([tool] + arguments, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise RuntimeError("%s %s failed (exit %d): %s" % (tool, " ".join(arguments), done.returncode, said))
    return done.returncode == 0


def apply(port, readers, run=_run, which=None):
    """Build the chain for O(port) and O(readers) in every family the node has; returns lines to log."""
    which = which or _which
    networks, unresolved = reader_networks(readers)
    lines = ["reader %r resolves to no address; it is not let in" % name for name in unresolved]
    for tool, version in FAMILIES:
        if not which(tool):
            lines.append("%s is not installed: the IPv%d port is left as the node's firewall has it" % (tool, version))
            continue
        # New chain, or the old one emptied: its rules are written again in full.
        if not run(tool, ["-N", CHAIN], check=False):
            run(tool, ["-F", CHAIN])
        for rule in chain_rules(networks[version]):
            run(tool, ["-A", CHAIN] + rule)
        if not run(tool, ["-C"] + jump_rule(port), check=False):
            run(tool, ["-I"] + jump_rule(port)[:1] + ["1"] + jump_rule(port)[1:])
        others = " and " + ", ".join(networks[version]) if networks[version] else ""
        lines.append("IPv%d: TCP port %d answers the node itself%s only" % (version, port, others))
    return lines


def remove(port, run=_run, which=None):
    """Take the jump and the chain out again; returns lines to log."""
    which = which or _which
    lines = []
    for tool, version in FAMILIES:
        if not which(tool):
            continue
        while run(tool, ["-D"] + jump_rule(port), check=False):
            pass
        run(tool, ["-F", CHAIN], check=False)
        run(tool, ["-X", CHAIN], check=False)
        lines.append("IPv%d: TCP port %d is no longer filtered by %s" % (version, port, CHAIN))
    return lines


def _which(tool):
    for directory in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        if os.access(os.path.join(directory, tool), os.X_OK):
            return True
    return False


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dgxspark-exporter-access", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("action", choices=("apply", "remove"))
    parser.add_argument("--port", type=int, required=True, help="the exporter's TCP port")
    parser.add_argument("--reader", action="append", default=[],
                        help="an address, network or host name that may reach the port (repeat)")
    args = parser.parse_args(argv)
    try:
        lines = apply(args.port, args.reader) if args.action == "apply" else remove(args.port)
    except RuntimeError as exc:
        sys.stderr.write("dgxspark-exporter-access: %s\n" % exc)
        return 1
    for line in lines:
        sys.stdout.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
