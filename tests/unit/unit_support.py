# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Paths shared by the unit tests, and loading of the test harness stand-ins
(molecule/resources/standins is not a package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDINS = REPO_ROOT / "molecule" / "resources" / "standins"
FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures"


def load_cx7_standin():
    spec = importlib.util.spec_from_file_location("cx7_sysfs_standin", STANDINS / "cx7_sysfs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
