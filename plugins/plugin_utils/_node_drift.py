# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure helpers behind the drift checks of the nvidia_driver and container_runtime roles
and status.yml: a kernel the next boot picks without an NVIDIA module built for it, the
packages to hold so that unattended-upgrades cannot move them, installed versions that
left their pin, and the node whose driver answers another version than the others.

The node's side is read as text (a shell listing of /boot and /lib/modules, dpkg-query's
output) and judged here, so the logic is unit-tested without Ansible.
"""

from __future__ import annotations

import fnmatch
import re

# Names of the NVIDIA kernel module a kernel's module tree may hold: built by DKMS
# (updates/dkms/), shipped by linux-modules-nvidia-<series>-open-<kernel> (kernel/nvidia-<series>*/),
# compressed or not.
MODULE_NAMES = ("nvidia.ko", "nvidia.ko.zst", "nvidia.ko.xz", "nvidia.ko.gz")
REPAIR_METHODS = ("package", "dkms")
# dpkg's Status-Status values of a package that is not on the node.
_ABSENT = ("not-installed", "config-files")
_RUN = re.compile(r"(\d+)|(\D+)")


class NodeDriftError(ValueError):
    """An input the checks cannot work with; the message names the variable to change."""


def kernel_sort_key(version):
    """The order GRUB's version_sort (sort -V) gives kernel releases, newest last:
    runs of digits compare as numbers, the rest as text (6.11.0-1002-nvidia-64k after
    6.8.0-1010-nvidia, 6.8.0-1010-nvidia after 6.8.0-1009-nvidia)."""
    key = []
    for digits, text in _RUN.findall(str(version)):
        key.append((1, int(digits), "") if digits else (0, 0, text))
    return tuple(key)


def parse_kernel_listing(text):
    """Kernel release -> C(boot) (a /boot/vmlinuz-<release> exists), C(modules) (a
    /lib/modules/<release> directory exists) and C(nvidia) (the paths of an NVIDIA module
    under it), from the lines C(boot <release>), C(modules <release>) and
    C(nvidia <release> <path>) the read prints."""
    kernels = {}
    for line in str(text).splitlines():
        parts = line.strip().split(" ", 2)
        if len(parts) < 2 or parts[0] not in ("boot", "modules", "nvidia"):
            continue
        kind, release = parts[0], parts[1]
        if kind == "boot" and release.endswith((".old", ".bak", ".dpkg-tmp")):
            continue
        entry = kernels.setdefault(release, {"boot": False, "modules": False, "nvidia": []})
        if kind == "nvidia":
            if len(parts) == 3 and parts[2].rsplit("/", 1)[-1] in MODULE_NAMES:
                entry["nvidia"].append(parts[2])
        else:
            entry[kind] = True
    return kernels


def _fixes(release, package_prefix):
    return "install %s%s, or run dkms autoinstall -k %s, or remove that kernel" % (package_prefix, release, release)


def kernel_module_verdict(listing, running, host="", repair=False, package_prefix="", method="package"):
    """Judge the installed kernels against the NVIDIA module built for each.

    O(listing) is the read's output (see parse_kernel_listing), O(running) the running
    release (uname -r). A kernel counts as installed when /boot holds its vmlinuz. A kernel
    newer than the running one (kernel_sort_key: the one the next boot picks) without an
    NVIDIA module blocks: the verdict refuses, or with O(repair) says what to run
    (O(method) V(package): install O(package_prefix)<release>; V(dkms): dkms autoinstall).
    Returns C(state) (V(ok), V(refuse) or V(repair)), C(running), C(next_boot) (the
    newest installed kernel), C(kernels) (newest first, each with C(release) and
    C(nvidia)), C(without_module) (every installed kernel lacking one), C(blocking),
    C(packages) and C(commands) (what a repair runs) and C(message).
    """
    if method not in REPAIR_METHODS:
        raise NodeDriftError(
            "nvidia_driver_kernel_repair_method=%r; expected one of %s" % (method, ", ".join(REPAIR_METHODS))
        )
    if method == "package" and not str(package_prefix or "").strip():
        raise NodeDriftError(
            "nvidia_driver_kernel_module_package_prefix is empty; expected the package name before the kernel "
            "release, such as linux-modules-nvidia-580-open-"
        )
    running = str(running).strip()
    prefix = "%s: " % host if host else ""
    parsed = parse_kernel_listing(listing)
    installed = sorted((release for release, entry in parsed.items() if entry["boot"]), key=kernel_sort_key, reverse=True)
    kernels = [{"release": release, "nvidia": parsed[release]["nvidia"]} for release in installed]
    without = [item["release"] for item in kernels if not item["nvidia"]]
    blocking = [release for release in without if kernel_sort_key(release) > kernel_sort_key(running)]
    verdict = {
        "running": running,
        "next_boot": installed[0] if installed else running,
        "kernels": kernels,
        "without_module": without,
        "blocking": blocking,
        "packages": [],
        "commands": [],
    }
    if not blocking:
        verdict.update(
            state="ok",
            message="%sno installed kernel newer than the running %s lacks an NVIDIA module%s"
            % (prefix, running, (" (older ones without: %s)" % ", ".join(without)) if without else ""),
        )
        return verdict
    found = "; ".join(
        "kernel %s (/boot/vmlinuz-%s) has %s" % (
            release, release,
            "no /lib/modules/%s at all" % release if not parsed[release]["modules"]
            else "no nvidia.ko, .ko.zst or .ko.xz under /lib/modules/%s" % release)
        for release in blocking
    )
    if repair:
        if method == "package":
            verdict["packages"] = ["%s%s" % (package_prefix, release) for release in blocking]
        else:
            verdict["commands"] = [["dkms", "autoinstall", "-k", release] for release in blocking]
        verdict.update(
            state="repair",
            message="%s%s, newer than the running %s; nvidia_driver_kernel_repair is true, so the role %s"
            % (prefix, found, running,
               "installs %s" % ", ".join(verdict["packages"]) if verdict["packages"]
               else "runs %s" % "; ".join(" ".join(argv) for argv in verdict["commands"])),
        )
        return verdict
    verdict.update(
        state="refuse",
        message="%s%s, newer than the running %s: the next boot picks %s and would come up without the NVIDIA "
        "driver (kernel and module packages phase in separately). Expected an NVIDIA module for every kernel "
        "newer than the running one. Fix: %s; or set nvidia_driver_kernel_repair=true (method: "
        "nvidia_driver_kernel_repair_method=%s), or nvidia_driver_kernel_check=false to go on anyway."
        % (prefix, found, running, verdict["next_boot"],
           "; ".join("for %s, %s" % (release, _fixes(release, package_prefix or "linux-modules-nvidia-<series>-open-"))
                     for release in blocking),
           method),
    )
    return verdict


def parse_package_listing(text):
    """Package -> C(version) and C(held), for each package the read lists as on the node,
    from dpkg-query lines C(<want> <status> <package> <version>)
    (-f '${db:Status-Want} ${db:Status-Status} ${Package} ${Version}\\n')."""
    packages = {}
    for line in str(text).splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[1] in _ABSENT:
            continue
        want, _status, name, version = parts
        packages[name] = {"version": version, "held": want == "hold"}
    return packages


def _patterns(patterns, variable):
    if isinstance(patterns, str) or not isinstance(patterns, (list, tuple)) or not all(
        isinstance(item, str) and item.strip() for item in patterns
    ):
        raise NodeDriftError("%s=%r; expected a list of package names or glob patterns" % (variable, patterns))
    return list(patterns)


def package_holds(listing, patterns, variable="nvidia_driver_hold_packages"):
    """What holding O(patterns) means on a node whose packages the read listed.

    Returns C(matched) (installed packages matching a pattern, name -> version and held),
    C(held) and C(to_hold) (names, sorted): only installed packages are held (a hold on a
    package that is not installed would keep apt from installing it).
    """
    patterns = _patterns(patterns, variable)
    installed = parse_package_listing(listing)
    matched = {
        name: entry for name, entry in sorted(installed.items())
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
    }
    return {
        "matched": matched,
        "held": [name for name, entry in matched.items() if entry["held"]],
        "to_hold": [name for name, entry in matched.items() if not entry["held"]],
    }


def pin_drift(listing, packages, version):
    """Lines naming each installed package of O(packages) at another version than the pinned
    O(version); [] when none is, or when nothing is pinned (O(version) empty)."""
    if not version:
        return []
    installed = parse_package_listing(listing)
    return [
        "%s is at %s, pinned %s" % (name, installed[name]["version"], version)
        for name in packages if name in installed and installed[name]["version"] != str(version)
    ]


def driver_version_drift(versions):
    """O(versions) maps host -> the driver version it answers (empty when none answers).
    Lines naming each host whose version differs from the one most hosts answer (ties go to
    the newest), and each host with no driver; [] when they all agree."""
    if not isinstance(versions, dict):
        raise NodeDriftError("expected a dict host -> driver version, got %r" % (versions,))
    answered = {host: str(version) for host, version in versions.items() if version}
    lines = ["%s: no NVIDIA driver answers" % host for host in sorted(versions) if not versions[host]]
    if not answered:
        return lines
    counts = {}
    for version in answered.values():
        counts[version] = counts.get(version, 0) + 1
    common = max(counts, key=lambda version: (counts[version], kernel_sort_key(version)))
    for host in sorted(answered):
        if answered[host] != common:
            lines.append(
                "%s: the driver answers %s, the other nodes %s (%d of %d)"
                % (host, answered[host], common, counts[common], len(answered))
            )
    return lines
