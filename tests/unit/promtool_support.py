# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""promtool and amtool for the unit tests, taken without root from Debian's prometheus and
prometheus-alertmanager packages.

Each package comes from the simulation's Debian mirror (.cache/simulation/debian-mirror,
which tools/sim-assets builds, and is asked to build here when it is missing) or, where
that cannot be built, from ``apt-get download <package>``; ``dpkg-deb -x`` unpacks it and the tool is kept under .cache/promtool/,
keyed by the package's file name, so it is unpacked once."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from unit_support import REPO_ROOT

CACHE = REPO_ROOT / ".cache" / "promtool"
ROLE = REPO_ROOT / "roles" / "monitoring"
MIRROR = REPO_ROOT / ".cache" / "simulation" / "debian-mirror"


class PromtoolUnavailable(RuntimeError):
    pass


def _package(workdir, package):
    debs = sorted(MIRROR.glob("%s_*.deb" % package))
    if not debs and shutil.which("dpkg-scanpackages"):
        # The mirror the simulation needs anyway; tools/sim-assets builds it without root.
        subprocess.run([str(REPO_ROOT / "tools" / "sim-assets"), "debs"], check=False, capture_output=True)
        debs = sorted(MIRROR.glob("%s_*.deb" % package))
    if debs:
        return debs[-1]
    try:
        subprocess.run(["apt-get", "download", package], cwd=workdir, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise PromtoolUnavailable(
            "%s: no %s_*.deb under %s and 'apt-get download %s' failed (%s); "
            "run tools/sim-assets or give this machine a Debian apt source"
            % (package, package, MIRROR, package, getattr(exc, "stderr", exc))
        ) from exc
    debs = sorted(Path(workdir).glob("%s_*.deb" % package))
    if not debs:
        raise PromtoolUnavailable("apt-get download %s left no %s_*.deb" % (package, package))
    return debs[-1]


def _tool(binary, package):
    """Path of O(binary) from the Debian O(package), cached and unpacked on first use."""
    cached = sorted(CACHE.glob("%s_*/%s" % (package, binary)))
    if cached:
        return cached[-1]
    with tempfile.TemporaryDirectory() as workdir:
        deb = _package(workdir, package)
        unpacked = Path(workdir) / "root"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        target = CACHE / deb.stem
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(unpacked / "usr" / "bin" / binary, target / (binary + ".tmp"))
        (target / (binary + ".tmp")).rename(target / binary)
    return target / binary


def promtool():
    """Path of a cached promtool (Debian's prometheus), unpacked on first use."""
    return _tool("promtool", "prometheus")


def amtool():
    """Path of a cached amtool (Debian's prometheus-alertmanager), unpacked on first use."""
    return _tool("amtool", "prometheus-alertmanager")


def role_defaults():
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def rule_settings(**overrides):
    """The settings the role's vars/main.yml builds, from its defaults."""
    defaults = role_defaults()
    keys = ("rate_window", "wedge_window", "wedge_for", "down_for", "metrics_stale_after", "nic_error_window",
            "nic_error_for", "nic_error_counters", "nic_error_hw_counters", "kv_cache_threshold", "kv_cache_for",
            "memory_available_ratio", "memory_for", "link_for")
    settings = {key: defaults["monitoring_" + key] for key in keys}
    settings["engine_unit"] = "dgxspark-engine.service"
    settings.update(overrides)
    return settings
