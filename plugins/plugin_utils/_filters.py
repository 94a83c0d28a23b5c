# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Turn the pure functions of module_utils into Jinja filters."""

from __future__ import annotations

import functools

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
