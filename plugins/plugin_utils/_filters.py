# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Turn the pure functions of module_utils and plugin_utils into Jinja filters."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def as_filter(function, error_type):
    """Wrap O(function) so that its O(error_type) reaches the play as an
    AnsibleFilterError carrying the same message."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except error_type as exc:
            raise AnsibleFilterError(str(exc), orig_exc=exc) from exc

    return wrapper


def plain(value):
    """O(value) with every mapping rebuilt as a plain dict and every list or tuple as a plain
    list, values as they are.

    ansible-core 2.19 hands a filter a variable's dicts and lists as lazy containers,
    and copy.deepcopy of one of those copies its templar, with every variable of the
    host (some 200 ms with gathered facts); a plain copy costs next to nothing. The
    functions behind the filters check for dicts and lists, as YAML and JSON give them.
    """
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
