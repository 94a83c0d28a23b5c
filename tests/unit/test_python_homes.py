# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's two Python homes, read from the tree (README "Layout"):

- ``plugins/module_utils/`` holds only code that runs on a node: a file there is imported by a
  module in ``plugins/modules/`` (directly, or through another module_utils file; Ansible ships
  it with the module) or copied to the nodes as a script by a role or playbook (a
  ``lookup('ansible.builtin.file', ...)`` or a ``src:`` naming it).
- ``plugins/plugin_utils/`` holds code only the controller runs (filters, lookups, actions,
  callbacks), so nothing that runs on a node may import it: Ansible does not ship it.

A controller-only file in module_utils would be packed into no module and copied nowhere, yet
read as node code (python 2.7 sanity, no controller imports); these tests name it.
"""

from __future__ import annotations

import ast
import re

from unit_support import REPO_ROOT

PACKAGE = "ansible_collections.dgxspark.cluster.plugins"
MODULE_UTILS = REPO_ROOT / "plugins" / "module_utils"
MODULES = REPO_ROOT / "plugins" / "modules"
# A role or playbook line that copies a file to a node: the file lookup that becomes a
# file_set/copy content, or a copy's src (a variable ending in _src holds one too).
SHIPPING_LINE = re.compile(r"lookup\('ansible\.builtin\.file'|\bsrc:|_src:")
SHIPPED_NAME = re.compile(r"/(_\w+)\.py\b")


def collection_imports(path):
    """(home, name) for every collection module a Python file imports, home being
    ``module_utils`` or ``plugin_utils``: both ``from PACKAGE.home._name import x`` and
    ``from PACKAGE.home import _name``."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            dotted, names = node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            dotted, names = None, [alias.name for alias in node.names]
        else:
            continue
        for full in [dotted] if dotted else names:
            if not full.startswith(PACKAGE + "."):
                continue
            parts = full[len(PACKAGE) + 1 :].split(".")
            if len(parts) >= 2:
                imported.add((parts[0], parts[1]))
            elif dotted:
                imported.update((parts[0], name) for name in names)
    return imported


def shipped_scripts():
    """module_utils names a role or playbook copies to the nodes as a script."""
    shipped = set()
    yaml_files = [*(REPO_ROOT / "roles").rglob("*.yml"), *(REPO_ROOT / "playbooks").rglob("*.yml")]
    for path in yaml_files:
        for line in path.read_text(encoding="utf-8").splitlines():
            # A comment naming a file copies nothing.
            if line.lstrip().startswith("#") or not SHIPPING_LINE.search(line):
                continue
            if "module_utils" in line:
                shipped.update(SHIPPED_NAME.findall(line))
    return shipped


def module_utils_names():
    return {path.stem for path in MODULE_UTILS.glob("*.py") if path.stem != "__init__"}


def node_side_names():
    """The module_utils files that reach a node: what the modules import and the shipped
    scripts, and everything those import from module_utils in turn."""
    pending = set(shipped_scripts())
    for module in MODULES.glob("*.py"):
        pending.update(name for home, name in collection_imports(module) if home == "module_utils")
    reached = set()
    while pending:
        name = pending.pop()
        if name in reached or not (MODULE_UTILS / f"{name}.py").is_file():
            continue
        reached.add(name)
        pending.update(n for home, n in collection_imports(MODULE_UTILS / f"{name}.py") if home == "module_utils")
    return reached


def test_every_module_utils_file_runs_on_a_node():
    controller_only = sorted(module_utils_names() - node_side_names())
    assert not controller_only, (
        f"plugins/module_utils/ holds code that no module imports and no role or playbook copies to a node: "
        f"{', '.join(name + '.py' for name in controller_only)}; controller-only code belongs in plugins/plugin_utils/"
    )


def test_the_shipped_scripts_are_found():
    # Guards the reading of the roles itself: these are copied to the nodes today, so a change
    # to how roles name them must change SHIPPING_LINE too, not quietly ship nothing.
    assert {"_roce_gid", "_engine_health", "_engine_timeline", "_image_stream", "_node_metrics", "_bench_client"} <= (
        shipped_scripts()
    )


def test_node_side_code_never_imports_plugin_utils():
    offenders = sorted(
        f"{path.relative_to(REPO_ROOT)} imports plugin_utils.{name}"
        for path in [*MODULES.glob("*.py"), *MODULE_UTILS.glob("*.py")]
        for home, name in collection_imports(path)
        if home == "plugin_utils"
    )
    assert not offenders, (
        "code that runs on a node imports controller-only code, which Ansible does not ship: " + "; ".join(offenders)
    )
