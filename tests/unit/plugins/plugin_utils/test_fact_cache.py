# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fact cache's directory per inventory (plugin_utils/_fact_cache.py)."""

from __future__ import annotations

import os

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._fact_cache import (
    KEY_LENGTH,
    inventory_cache_dir,
    inventory_cache_key,
    resolved_sources,
    sources_note,
)


def test_sources_are_made_absolute_from_the_working_directory_and_free_of_symlinks(tmp_path, monkeypatch):
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text("{}\n")
    (tmp_path / "link").symlink_to(tmp_path / "inv")
    monkeypatch.setenv("HOME", str(tmp_path))
    real = os.path.realpath(tmp_path / "inv" / "hosts.yml")
    assert resolved_sources(["inv/hosts.yml"], cwd=str(tmp_path)) == [real]
    assert resolved_sources("link/hosts.yml", cwd=str(tmp_path)) == [real]
    assert resolved_sources(["~/inv/hosts.yml"], cwd="/") == [real]
    # A host list names no file.
    assert resolved_sources(["spark1,spark2"], cwd=str(tmp_path)) == ["spark1,spark2"]
    assert resolved_sources(None) == []


def test_one_inventory_named_two_ways_has_one_key_and_two_inventories_two(tmp_path):
    (tmp_path / "a").mkdir()
    same = inventory_cache_key(["a/hosts.yml"], cwd=str(tmp_path))
    assert same == inventory_cache_key([str(tmp_path / "a" / "hosts.yml")], cwd="/")
    assert len(same) == KEY_LENGTH and int(same, 16) >= 0
    other = inventory_cache_key(["b/hosts.yml"], cwd=str(tmp_path))
    assert other != same
    # The order of the sources decides how they merge: another inventory.
    assert (inventory_cache_key(["a/hosts.yml", "b/hosts.yml"], cwd=str(tmp_path))
            != inventory_cache_key(["b/hosts.yml", "a/hosts.yml"], cwd=str(tmp_path)))
    assert inventory_cache_dir("/cache", ["a/hosts.yml"], cwd=str(tmp_path)) == "/cache/" + same


def test_the_sources_note_lists_one_resolved_source_a_line(tmp_path):
    assert sources_note(["x.yml", "localhost,"], cwd=str(tmp_path)) == "%s\nlocalhost,\n" % (
        os.path.realpath(tmp_path / "x.yml"))
