# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure helpers behind the nvidia_driver and container_runtime roles: judge the driver a
node answers with, build Docker's daemon.json from the inventory's options, and write the
apt source and pin files both roles install their packages from.

Standard library only, so the logic is unit-tested without Ansible.
"""

from __future__ import annotations

import copy
import re

_DRIVER_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")

# Keys of daemon.json the roles own; the inventory may not set them in its free-form options.
OWNED_KEYS = ("live-restore", "default-ulimits")
ULIMIT_NAMES = ("memlock", "nofile", "stack")
# Docker's cgroup drivers. With "systemd", a `systemctl daemon-reload` (any package
# install, any unit written) revokes the device access of running GPU containers: the
# engine keeps running without its GPU ("Failed to initialize NVML: Unknown Error").
# "cgroupfs" keeps the devices; it is the role's default.
CGROUP_DRIVERS = ("cgroupfs", "systemd")
_CGROUP_DRIVER_OPT = "native.cgroupdriver"


class NodeSoftwareError(ValueError):
    """An input the roles cannot work with; the message names the variable to change."""


def parse_driver_version(text, variable="nvidia_driver_min_version"):
    """'580.95.05' -> (580, 95, 5); anything else is refused naming O(variable)."""
    text = str(text).strip()
    if not _DRIVER_VERSION_RE.match(text):
        raise NodeSoftwareError(
            "%s=%r is not a driver version; expected dot-separated numbers such as 580.95.05" % (variable, text)
        )
    return tuple(int(part) for part in text.split("."))


def driver_verdict(gpu_facts, min_version):
    """Judge the driver a node answers with against the pinned minimum.

    O(gpu_facts) is the ansible_facts of dgxspark.cluster.gpu_facts (or hostvars of a host).
    Returns a dict with C(state) (V(ok), V(missing) or V(old)), C(found) (the version or
    None), C(expected) (the minimum) and C(message) for humans.
    """
    parse_driver_version(min_version)
    present = bool(gpu_facts.get("dgxspark_gpu_present"))
    found = gpu_facts.get("dgxspark_gpu_driver_version") if present else None
    verdict = {"found": found, "expected": str(min_version)}
    if not found:
        verdict.update(state="missing", message="no NVIDIA driver answers (nvidia-smi is missing or fails)")
        return verdict
    if parse_driver_version(found, "the driver version nvidia-smi reports") < parse_driver_version(min_version):
        verdict.update(state="old", message="the driver answers %s, older than %s" % (found, min_version))
        return verdict
    verdict.update(state="ok", message="the driver answers %s, at least %s" % (found, min_version))
    return verdict


def _ulimit_entry(name, limit):
    if not isinstance(limit, dict) or set(limit) - {"soft", "hard"} or "soft" not in limit or "hard" not in limit:
        raise NodeSoftwareError(
            "container_runtime_ulimits.%s=%r; expected a dict with soft and hard (whole numbers, -1 for unlimited)"
            % (name, limit)
        )
    values = {}
    for key in ("soft", "hard"):
        value = limit[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            raise NodeSoftwareError(
                "container_runtime_ulimits.%s.%s=%r; expected a whole number, -1 for unlimited" % (name, key, value)
            )
        values[key] = value
    soft, hard = values["soft"], values["hard"]
    if hard != -1 and (soft == -1 or soft > hard):
        raise NodeSoftwareError(
            "container_runtime_ulimits.%s has soft %s above hard %s; expected soft <= hard" % (name, soft, hard)
        )
    return {"Name": name, "Soft": soft, "Hard": hard}


def _exec_opt_name(item):
    return item.split("=", 1)[0].strip().lower()


def _tls_verified(options):
    return options.get("tlsverify") is True and all(options.get(key) for key in ("tlscacert", "tlscert", "tlskey"))


def daemon_options_problems(options, host=""):
    """What makes O(options) (container_runtime_daemon_options) unsafe or impossible for
    dockerd, one sentence per problem naming O(host), the key, what was found and the fix;
    an empty list when there is none. Judged on the controller before any node changes:
    a C(tcp://) listener without C(tlsverify) and its certificates hands root on the node to
    anyone who reaches the port, and a key the role owns would be overwritten."""
    prefix = "%s: " % host if host else ""
    if not isinstance(options, dict):
        return ["%scontainer_runtime_daemon_options=%r; expected a dict of daemon.json keys" % (prefix, options)]
    problems = []
    for key in OWNED_KEYS:
        if key in options:
            problems.append(
                "%scontainer_runtime_daemon_options sets %r; the role owns it (set container_runtime_ulimits for "
                "default-ulimits; live-restore is always true). Remove it." % (prefix, key)
            )
    exec_opts = options.get("exec-opts", [])
    if not isinstance(exec_opts, list) or not all(isinstance(item, str) for item in exec_opts):
        problems.append(
            "%scontainer_runtime_daemon_options.exec-opts=%r; expected a list of strings such as "
            "['native.umask=normal']" % (prefix, exec_opts)
        )
    else:
        driver_opts = [item for item in exec_opts if _exec_opt_name(item) == _CGROUP_DRIVER_OPT]
        if driver_opts:
            problems.append(
                "%scontainer_runtime_daemon_options.exec-opts holds %s; the role owns Docker's cgroup driver. "
                "Remove it and set container_runtime_cgroup_driver (cgroupfs keeps running GPU containers' "
                "devices across a systemctl daemon-reload; systemd does not)." % (prefix, ", ".join(driver_opts))
            )
    hosts = options.get("hosts", [])
    if isinstance(hosts, str):
        hosts = [hosts]
    if not isinstance(hosts, list) or not all(isinstance(item, str) for item in hosts):
        problems.append(
            "%scontainer_runtime_daemon_options.hosts=%r; expected a list of listen addresses such as "
            "unix:///var/run/docker.sock" % (prefix, options.get("hosts"))
        )
        return problems
    open_hosts = [item for item in hosts if item.strip().lower().startswith("tcp://")]
    if open_hosts and not _tls_verified(options):
        problems.append(
            "%scontainer_runtime_daemon_options.hosts holds %s without tlsverify: true and tlscacert, tlscert "
            "and tlskey: anyone who reaches that port is root on the node; expected only unix:// sockets, or TLS "
            "client verification with its three files. Remove the tcp:// address or add the TLS keys."
            % (prefix, ", ".join(open_hosts))
        )
    if hosts:
        # On a systemd unit that passes -H (Debian's and Docker CE's pass -H fd://), dockerd refuses
        # to start when daemon.json also sets hosts: "specified both as a flag and in the
        # configuration file".
        problems.append(
            "%scontainer_runtime_daemon_options sets hosts (%s): docker.service already passes -H fd://, and "
            "dockerd refuses to start with hosts both as a flag and in daemon.json; expected no hosts key. "
            "Remove it (a listener needs a docker.service drop-in that clears ExecStart)." % (prefix, ", ".join(hosts))
        )
    return problems


def daemon_config(options, runtime_path, ulimits, default_runtime="", cgroup_driver="cgroupfs"):
    """Docker's daemon.json: the inventory's O(options) with the keys the cluster relies on.

    The nvidia runtime (at O(runtime_path)) is added next to any runtimes in O(options);
    C(live-restore) is forced on so that restarting dockerd leaves running containers alone;
    C(default-ulimits) comes from O(ulimits) (name -> soft/hard) and must hold memlock,
    nofile and stack. O(default_runtime), when set, must name a configured runtime.
    C(exec-opts) gets C(native.cgroupdriver=)O(cgroup_driver) after the options' own.
    """
    if cgroup_driver not in CGROUP_DRIVERS:
        raise NodeSoftwareError(
            "container_runtime_cgroup_driver=%r; expected one of %s" % (cgroup_driver, ", ".join(CGROUP_DRIVERS))
        )
    if not isinstance(options, dict):
        raise NodeSoftwareError(
            "container_runtime_daemon_options=%r; expected a dict of daemon.json keys" % (options,)
        )
    for key in OWNED_KEYS:
        if key in options:
            raise NodeSoftwareError(
                "container_runtime_daemon_options sets %r; the role owns it (set container_runtime_ulimits for "
                "default-ulimits; live-restore is always true)" % key
            )
    if not runtime_path or not isinstance(runtime_path, str):
        raise NodeSoftwareError(
            "container_runtime_nvidia_runtime_path=%r; expected the nvidia-container-runtime path" % (runtime_path,)
        )
    if not isinstance(ulimits, dict):
        raise NodeSoftwareError("container_runtime_ulimits=%r; expected a dict name -> {soft, hard}" % (ulimits,))
    missing = [name for name in ULIMIT_NAMES if name not in ulimits]
    if missing:
        raise NodeSoftwareError(
            "container_runtime_ulimits lacks %s; expected soft/hard for each of %s"
            % (", ".join(missing), ", ".join(ULIMIT_NAMES))
        )
    config = copy.deepcopy(options)
    runtimes = config.get("runtimes", {})
    if not isinstance(runtimes, dict):
        raise NodeSoftwareError(
            "container_runtime_daemon_options.runtimes=%r; expected a dict name -> {path}" % (runtimes,)
        )
    nvidia = dict(runtimes.get("nvidia") or {})
    nvidia["path"] = runtime_path
    runtimes["nvidia"] = nvidia
    config["runtimes"] = runtimes
    exec_opts = config.get("exec-opts", [])
    if not isinstance(exec_opts, list) or any(
        not isinstance(item, str) or _exec_opt_name(item) == _CGROUP_DRIVER_OPT for item in exec_opts
    ):
        raise NodeSoftwareError(
            "container_runtime_daemon_options.exec-opts=%r; expected a list of strings without %s "
            "(set container_runtime_cgroup_driver)" % (exec_opts, _CGROUP_DRIVER_OPT)
        )
    config["exec-opts"] = exec_opts + ["%s=%s" % (_CGROUP_DRIVER_OPT, cgroup_driver)]
    config["live-restore"] = True
    config["default-ulimits"] = {name: _ulimit_entry(name, ulimits[name]) for name in sorted(ulimits)}
    if default_runtime:
        if default_runtime not in runtimes and default_runtime not in ("runc", "io.containerd.runc.v2"):
            raise NodeSoftwareError(
                "container_runtime_default_runtime=%r names no runtime; expected one of %s"
                % (default_runtime, ", ".join(sorted(set(runtimes) | {"runc"})))
            )
        config["default-runtime"] = default_runtime
    return config


def docker_info_problems(info, expected="nvidia", cgroup_driver="cgroupfs"):
    """Problems with what `docker info` printed as one JSON object with its Runtimes and
    CgroupDriver (the container_runtime role's container_runtime_docker_info_argv), parsed: the
    O(expected) runtime must be listed and the cgroup driver must be O(cgroup_driver);
    [] when fine."""
    if not isinstance(info, dict):
        return ["docker info printed %r; expected a JSON object with Runtimes and CgroupDriver" % (info,)]
    problems = []
    runtimes = info.get("Runtimes")
    if not isinstance(runtimes, dict):
        problems.append("docker info listed runtimes %r; expected a JSON object" % (runtimes,))
    elif expected not in runtimes:
        problems.append(
            "docker info lists runtimes %s; expected %s among them" % (", ".join(sorted(runtimes)) or "none", expected)
        )
    found = info.get("CgroupDriver")
    if found != cgroup_driver:
        problems.append(
            "docker info reports cgroup driver %s; expected %s (container_runtime_cgroup_driver)%s"
            % (
                found or "none",
                cgroup_driver,
                ": with systemd, a systemctl daemon-reload takes running GPU containers' devices away"
                if found == "systemd"
                else "",
            )
        )
    return problems


def gpu_check_problems(container_output, gpu_facts):
    """Compare what nvidia-smi printed inside a container (name, driver_version lines)
    with the host's gpu_facts; [] when each host GPU is seen with the same name and driver."""
    lines = [line.strip() for line in str(container_output).splitlines() if line.strip()]
    seen = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 2:
            return ["the container printed %r; expected 'name, driver_version' lines" % line]
        seen.append(tuple(parts))
    expected = [(gpu.get("name"), gpu.get("driver_version")) for gpu in gpu_facts.get("dgxspark_gpus", [])]
    if not expected:
        return ["the host lists no GPU (gpu_facts); expected at least one"]
    if seen != expected:
        return [
            "the container sees %s; the host's nvidia-smi reports %s"
            % ("; ".join("%s driver %s" % gpu for gpu in seen) or "no GPU", "; ".join("%s driver %s" % gpu for gpu in expected))
        ]
    return []


def apt_source_file(uris, suites, components, signed_by, header="Ansible managed"):
    """The text of a deb822 C(.sources) file: one C(deb) entry for O(uris) and O(suites),
    signed by the key at O(signed_by); C(Components) only when O(components) lists some
    (a flat repository, C(Suites: /), has none). Values are written as a template writes
    them, list items joined by spaces."""
    lines = ["# %s" % (header,), "Types: deb", "URIs: %s" % (uris,), "Suites: %s" % (suites,)]
    if components:
        lines.append("Components: %s" % _words(components))
    lines.append("Signed-By: %s" % (signed_by,))
    return "\n".join(lines) + "\n"


def apt_pin_file(packages, version, priority, held, header="Ansible managed"):
    """The text of an apt preferences file that holds O(packages) at O(version) with
    O(priority); O(held) names what is held in the file's comment."""
    return (
        "# %s\n"
        "# Holds %s at the version the cluster is tested with.\n"
        "Package: %s\n"
        "Pin: version %s\n"
        "Pin-Priority: %s\n" % (header, held, _words(packages), version, priority)
    )


def _words(items):
    return " ".join(str(item) for item in items)
