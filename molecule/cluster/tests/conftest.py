# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources" / "tests"))


# Last of the session: test_engine_restart.py ends in the 2xTP=2 fleet, and the way back to
# the inventory's TP=4 lane, which every other module needs, costs a coordinated start of
# every rank; run last, its fleet fixture judges the way back in check mode instead.
LAST_MODULES = ("test_engine_restart.py",)


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name in LAST_MODULES)
