# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection built and installed as a user installs it, offline, into an
empty collections path with the collections it declares
(molecule/resources/tests/collection_install.py, which the Molecule test
test_installed_collection.py also uses before it runs site.yml on the
cluster): every playbook resolves there, with nothing else visible."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from unit_support import REPO_ROOT, load_collection_install

collection_install = load_collection_install()
PLAYBOOKS = sorted(path.stem for path in (REPO_ROOT / "playbooks").glob("*.yml"))


class User:
    """A user in a fresh directory (no ansible.cfg) whose only collections path is O(root)/collections."""

    def __init__(self, root):
        self.collections = root / "collections"
        self.cwd = root / "run"
        self.cwd.mkdir()
        self.env = collection_install.isolated_env(self.collections)
        # The ansible-* programs of the interpreter running the tests.
        self.env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + self.env.get("PATH", "")

    def run(self, *cmd):
        result = subprocess.run(cmd, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=120,
                                check=False)
        assert result.returncode == 0, "%s: %s" % (" ".join(cmd), (result.stdout + result.stderr)[-3000:])
        return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    user = User(tmp_path_factory.mktemp("installed"))
    tarball = collection_install.build(REPO_ROOT, user.cwd.parent, user.run)
    return SimpleNamespace(user=user, tarball=tarball,
                           dependencies=collection_install.install_offline(tarball, user.collections, user.run))


def test_the_tarball_is_named_after_galaxy_yml_and_declares_what_it_was_built_with(installed):
    info = collection_install.collection_info(installed.tarball)
    assert installed.tarball.name == "dgxspark-cluster-%s.tar.gz" % info["version"]
    assert sorted(info["dependencies"]) == installed.dependencies


def test_only_the_installed_collections_are_visible(installed):
    user = installed.user
    visible = collection_install.visible_collections(user.run)
    assert visible == {str(user.collections / "ansible_collections"):
                       sorted(["dgxspark.cluster", *installed.dependencies])}
    assert "config file = None" in user.run("ansible-playbook", "--version")


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_every_playbook_resolves_from_the_installed_collection(installed, playbook):
    # Roles, modules and filters of statically imported tasks must all resolve (a module of a collection that
    # is not installed fails here); include_tasks files are covered by test_collection_metadata.py's scan.
    user = installed.user
    assert "playbook: " in user.run("ansible-playbook", "--syntax-check", "dgxspark.cluster." + playbook,
                                    "-i", str(REPO_ROOT / "inventory" / "sample"))


def test_a_playbook_missing_from_the_installed_path_does_not_resolve(installed):
    # The check above can fail: a name the installed collections do not hold is refused.
    user = installed.user
    result = subprocess.run(["ansible-playbook", "--syntax-check", "dgxspark.cluster.no_such_playbook",
                             "-i", str(REPO_ROOT / "inventory" / "sample")], cwd=user.cwd, env=user.env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0


def test_declared_dependencies_are_installed_with_theirs_from_the_bundle(tmp_path):
    # A collection that declares community.docker, which declares a collection of its own: both come from
    # the ansible bundle, offline, and are what the user then sees beside it.
    user = User(tmp_path)
    source = tmp_path / "source"
    source.mkdir()
    (source / "galaxy.yml").write_text(textwrap.dedent("""\
        namespace: example
        name: dependent
        version: 1.0.0
        readme: README.md
        authors: [Example]
        dependencies:
          community.docker: ">=3.10.0"
        """), encoding="utf-8")
    (source / "README.md").write_text("example\n", encoding="utf-8")
    (source / "meta").mkdir()
    (source / "meta" / "runtime.yml").write_text('requires_ansible: ">=2.19.0"\n', encoding="utf-8")
    tarball = collection_install.build(source, tmp_path, user.run)
    assert collection_install.install_offline(tarball, user.collections, user.run) == [
        "community.docker", "community.library_inventory_filtering_v1"]
    assert collection_install.visible_collections(user.run) == {str(user.collections / "ansible_collections"): [
        "community.docker", "community.library_inventory_filtering_v1", "example.dependent"]}
    installed = user.collections / "ansible_collections" / "community" / "docker"
    assert (installed / "plugins" / "connection" / "docker.py").is_file()


def test_a_collection_the_bundle_lacks_is_named():
    with pytest.raises(LookupError, match="example.absent is not in the ansible bundle"):
        collection_install.dependency_closure({"example.absent": "*"})
