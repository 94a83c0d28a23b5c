# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every inventory shipped here names only engine patches it ships, with their
sha256: the preflight play refuses a missing or changed patch file, so a
copied inventory/sample would otherwise fail before it reached a node."""

from __future__ import annotations

import hashlib
import re

import pytest
import yaml

from unit_support import REPO_ROOT

INVENTORIES = sorted(path.parent for path in (REPO_ROOT / "inventory").glob("*/hosts.yml"))
# The variables the shipped inventories may use in a patch's src (sim_checkout_dir:
# the checkout, which tools/lib.sh writes into the simulated inventory).
PLACEHOLDER = re.compile(r"\{\{\s*(inventory_dir|playbook_dir|sim_checkout_dir)\s*\}\}")


class InventoryLoader(yaml.SafeLoader):
    """Reads group_vars as YAML; a vaulted value stays its ciphertext."""


InventoryLoader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))


def patches_of(inventory):
    found = []
    for path in sorted((inventory / "group_vars").glob("*/*.yml")):
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=InventoryLoader) or {}
        for patch in data.get("engine_service_patches") or []:
            found.append((path.relative_to(REPO_ROOT), patch))
    return found


def resolve(src, inventory):
    # ansible-playbook -i inventory/<name>/hosts.yml playbooks/site.yml
    where = {"inventory_dir": str(inventory), "playbook_dir": str(REPO_ROOT / "playbooks"),
             "sim_checkout_dir": str(REPO_ROOT)}
    resolved = PLACEHOLDER.sub(lambda match: where[match.group(1)], src)
    assert "{{" not in resolved, "%s: only inventory_dir, playbook_dir and sim_checkout_dir are resolved here" % src
    return REPO_ROOT / "playbooks" / resolved  # a relative src is looked up from the playbook


def test_the_sample_and_the_simulated_inventory_are_checked():
    assert {path.name for path in INVENTORIES} >= {"sample", "simulated"}


@pytest.mark.parametrize("inventory", INVENTORIES, ids=lambda path: path.name)
def test_every_patch_an_inventory_names_is_shipped_with_its_sha256(inventory):
    for where, patch in patches_of(inventory):
        path = resolve(patch["src"], inventory)
        assert path.is_file(), "%s names %s, which is not there (%s)" % (where, patch["src"], path)
        found = hashlib.sha256(path.read_bytes()).hexdigest()
        assert found == patch["sha256"], "%s pins %s at %s, the file has %s" % (where, path, patch["sha256"], found)


def test_the_simulated_inventory_exercises_a_patch():
    assert patches_of(REPO_ROOT / "inventory" / "simulated"), "the patch mechanism would go untested"
