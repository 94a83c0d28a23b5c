# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest
from ansible.module_utils import _internal
from ansible.module_utils.common import warnings


@pytest.fixture(autouse=True)
def module_warnings_as_on_a_node(monkeypatch):
    """Modules run here as they do on a node: their warnings go into the
    result. Once a filter test has imported controller code, ansible-core
    would send them to the controller's display instead, and the registries
    are process-wide, so each test starts with none."""
    monkeypatch.setattr(_internal, "is_controller", False)
    warnings._global_warnings.clear()
    warnings._global_deprecations.clear()
    yield
