# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Free space on the filesystem that holds (or will hold) a path."""

from __future__ import annotations

import os


def nearest_existing(path):
    """O(path) itself or its deepest existing ancestor: a directory that will
    be created later is checked on the filesystem that will hold it."""
    if not os.path.isabs(path):
        raise ValueError("expected an absolute path, got %r" % (path,))
    current = os.path.normpath(path)
    while not os.path.exists(current):
        current = os.path.dirname(current)
    return current


def disk_space(path, statvfs=os.statvfs):
    checked = nearest_existing(path)
    st = statvfs(checked)
    return {
        "path": path,
        "checked_path": checked,
        "free_bytes": st.f_bavail * st.f_frsize,
        "total_bytes": st.f_blocks * st.f_frsize,
    }
