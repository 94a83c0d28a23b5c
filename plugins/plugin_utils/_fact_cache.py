# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which fact cache directory an inventory gets (the inventory_jsonfile cache
plugin): one per set of inventory sources, so hosts of the same name in two
inventories (spark1 of the simulated cluster and spark1 of a real one) never
answer with each other's facts.

Standard library only, so it is unit-tested without Ansible.
"""

from __future__ import annotations

import hashlib
import os

# Hex digits of the key: 48 bits tell apart any inventories one controller has.
KEY_LENGTH = 12
# The file in each inventory's directory that names its sources, for a person
# looking at the cache (a dot file: the jsonfile cache takes it for no host).
SOURCES_FILE = ".inventory_sources"


def resolved_sources(sources, cwd=None):
    """The inventory sources as ansible-core gets them (-i, ANSIBLE_INVENTORY or
    the configured default), each path made absolute and free of symlinks, so one
    inventory named two ways is one; a host list ("a,b,") stays as it is."""
    if isinstance(sources, str):
        sources = [sources]
    cwd = cwd or os.getcwd()
    return [source if "," in source else os.path.realpath(os.path.join(cwd, os.path.expanduser(source)))
            for source in sources or []]


def inventory_cache_key(sources, cwd=None):
    """A short, stable name for a set of inventory sources (in their order, which
    decides how they merge)."""
    text = "\n".join(resolved_sources(sources, cwd))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_LENGTH]


def inventory_cache_dir(base, sources, cwd=None):
    """The directory under the configured fact_caching_connection for these sources."""
    return os.path.join(base, inventory_cache_key(sources, cwd))


def sources_note(sources, cwd=None):
    """What SOURCES_FILE holds: one resolved source per line."""
    return "".join(source + "\n" for source in resolved_sources(sources, cwd))
