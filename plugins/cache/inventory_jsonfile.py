# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: inventory_jsonfile
short_description: JSON files per host, in one directory per inventory
version_added: "0.1.0"
description:
  - P(ansible.builtin.jsonfile#cache)'s cache (one JSON file per host), kept in a directory of its own for each
    inventory, C(<fact_caching_connection>/<key>), where the key is a short hash of the inventory sources this
    run uses (C(-i), else C(ANSIBLE_INVENTORY), else the configured C(inventory)), each made absolute.
  - Hosts of the same name in two inventories (C(spark1) of the simulated cluster and C(spark1) of a real one)
    never answer with each other's facts; a run with the same inventory finds the facts the last one cached.
  - Each directory holds C(.inventory_sources), the sources it belongs to, one per line.
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
options:
  _uri:
    required: true
    description:
      - Directory under which each inventory's directory of JSON files is kept.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_CONNECTION
    ini:
      - key: fact_caching_connection
        section: defaults
    type: path
  _prefix:
    description: Prefix of the JSON files' names.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_PREFIX
    ini:
      - key: fact_caching_prefix
        section: defaults
  _timeout:
    default: 86400
    description: Seconds a host's cached facts stay valid.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_TIMEOUT
    ini:
      - key: fact_caching_timeout
        section: defaults
    type: integer
"""

import os

from ansible import constants as C
from ansible import context
from ansible.plugins.cache.jsonfile import CacheModule as JsonFileCacheModule

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fact_cache import (
    SOURCES_FILE,
    inventory_cache_dir,
    sources_note,
)


class CacheModule(JsonFileCacheModule):
    """ansible.builtin.jsonfile in <fact_caching_connection>/<key of the inventory sources>."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The CLI has put -i (or ANSIBLE_INVENTORY, or the configured default)
        # into its arguments before the variable manager makes this cache.
        sources = context.CLIARGS.get("inventory") or C.DEFAULT_HOST_LIST
        self._cache_dir = inventory_cache_dir(self._cache_dir, sources)
        self.validate_cache_connection()
        note = sources_note(sources)
        path = os.path.join(self._cache_dir, SOURCES_FILE)
        try:
            with open(path, encoding="utf-8") as handle:
                current = handle.read()
        except FileNotFoundError:
            current = None
        if current != note:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(note)
