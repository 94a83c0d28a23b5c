# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the collection says about itself agrees with what it is: the
collections its content uses and galaxy.yml's dependencies, the harness's
collections and requirements.yml, the changelog and the version, the
ansible-core it claims and the one it is tested with, and the execution
environment and the tarball it installs."""

from __future__ import annotations

import itertools
import re
import subprocess
import tarfile

import pytest
import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements
from ansible.utils.version import SemanticVersion

from unit_support import REPO_ROOT, load_collection_install

collection_install = load_collection_install()
GALAXY = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text(encoding="utf-8"))
SELF = "%s.%s" % (GALAXY["namespace"], GALAXY["name"])
# What any content may use without declaring it.
ALWAYS_THERE = {"ansible.builtin", SELF}
# The shipped content that runs or documents plugins; README, changelogs and tests only mention collections.
CONTENT = ("roles/", "playbooks/", "plugins/", "meta/", "inventory/")
# A dotted name of three parts or more: ns.name.plugin, or ansible_collections.ns.name.… in Python.
DOTTED = re.compile(r"(?<![\w.])[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*){2,}")
# ansible-core's own Python packages (ansible.utils.display, …) share names with collections.
CORE_IMPORT = re.compile(r"^\s*(?:from|import)\s+ansible\.(?!_collections).*$", re.MULTILINE)


def known_collections():
    """Every collection a name could refer to: those the ansible bundle carries, ansible.builtin and this one."""
    bundled = {"%s.%s" % (path.parent.name, path.name) for path in collection_install.BUNDLE.glob("*/*")
               if (path / "MANIFEST.json").is_file()}
    return bundled | ALWAYS_THERE


def collections_used(root, paths, known):
    """{collection: sorted ["path: name", ...]} for the collections O(known) that the files O(paths) name."""
    used = {}
    for path in paths:
        file = root / path
        if not file.is_file() or file.is_symlink():
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if path.endswith(".py"):
            text = CORE_IMPORT.sub("", text)
        for match in DOTTED.finditer(text):
            parts = match.group(0).split(".")
            for first, second in itertools.pairwise(parts):
                if "%s.%s" % (first, second) in known:
                    used.setdefault("%s.%s" % (first, second), set()).add("%s: %s" % (path, match.group(0)))
                    break
    return {name: sorted(where) for name, where in used.items()}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{"shipped": the tarball's files, "harness": the checkout's tracked files the tarball leaves out}."""
    out = tmp_path_factory.mktemp("build")

    def run(*cmd):
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    with tarfile.open(collection_install.build(REPO_ROOT, out, run)) as archive:
        shipped = {member.name for member in archive.getmembers() if member.isfile()}
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: the harness's files are not known")
    return {"shipped": sorted(shipped), "harness": sorted(set(tracked.stdout.splitlines()) - shipped)}


def test_the_shipped_content_uses_only_ansible_builtin_itself_and_its_declared_dependencies(files):
    used = collections_used(REPO_ROOT, [path for path in files["shipped"] if path.startswith(CONTENT)],
                            known_collections())
    # The scan finds what it must: the content's own modules and ansible-core's.
    assert {"ansible.builtin", SELF} <= set(used)
    undeclared = {name: where for name, where in used.items() if name not in ALWAYS_THERE | set(GALAXY["dependencies"])}
    assert not undeclared, "declare these in galaxy.yml's dependencies (and the EE), or use ansible.builtin: %r" % (
        undeclared,)
    unused = set(GALAXY["dependencies"]) - set(used)
    assert not unused, "galaxy.yml declares collections the content does not use: %s" % sorted(unused)


def test_requirements_yml_lists_what_the_harness_uses_and_nothing_else(files):
    used = collections_used(REPO_ROOT, files["harness"], known_collections())
    needed = (set(used) | set(GALAXY["dependencies"])) - ALWAYS_THERE
    listed = {entry["name"] for entry in
              yaml.safe_load((REPO_ROOT / "requirements.yml").read_text(encoding="utf-8"))["collections"]}
    assert listed == needed, {"used by the harness": {name: used.get(name, "declared in galaxy.yml")
                                                      for name in needed}, "listed": sorted(listed)}


def test_the_bundle_meets_every_version_range_of_requirements_yml_and_galaxy_yml():
    ranges = [(entry["name"], entry.get("version", "*")) for entry in
              yaml.safe_load((REPO_ROOT / "requirements.yml").read_text(encoding="utf-8"))["collections"]]
    ranges += list(GALAXY["dependencies"].items())
    for name, wanted in ranges:
        version = yaml.safe_load((collection_install.bundled(name) / "MANIFEST.json").read_text())[
            "collection_info"]["version"]
        assert meets_requirements(version, wanted), "%s %s: the ansible bundle has %s" % (name, wanted, version)


@pytest.mark.parametrize("text, expected", [
    ("- name: Sync\n  ansible.posix.synchronize:\n", {"ansible.posix"}),
    ("x: \"{{ y | community.general.to_toml }}\"\nansible_connection: community.docker.docker\n",
     {"community.general", "community.docker"}),
    ("os.path.join(a)\nself.server.repo\n- ansible.builtin.command: ls\n", {"ansible.builtin"}),
])
def test_the_scan_finds_the_collections_a_file_names(tmp_path, text, expected):
    (tmp_path / "tasks.yml").write_text(text, encoding="utf-8")
    assert set(collections_used(tmp_path, ["tasks.yml"], known_collections())) == expected


def test_the_scan_reads_collection_imports_and_not_ansible_core_imports(tmp_path):
    (tmp_path / "plugin.py").write_text(
        "from ansible.utils.display import Display\n"
        "from ansible_collections.community.general.plugins.module_utils import x\n", encoding="utf-8")
    assert set(collections_used(tmp_path, ["plugin.py"], known_collections())) == {"community.general"}


def test_galaxy_yml_names_where_the_project_lives():
    base = "https://github.com/dgxspark/dgxspark.cluster"
    assert (GALAXY["repository"], GALAXY["homepage"]) == (base, base)
    assert GALAXY["documentation"] == base + "/blob/main/README.md" and GALAXY["issues"] == base + "/issues"


# --- the changelog and the version ------------------------------------------------------------
CHANGELOGS = REPO_ROOT / "changelogs"
CHANGELOG_CONFIG = yaml.safe_load((CHANGELOGS / "config.yaml").read_text(encoding="utf-8"))
VERSION = SemanticVersion(GALAXY["version"])


def fragments():
    return sorted(path for path in (CHANGELOGS / CHANGELOG_CONFIG["notesdir"]).iterdir() if path.name != ".keep")


def test_the_changelog_has_released_nothing_newer_than_galaxy_yml_and_fragments_only_for_its_version():
    # antsibull-changelog keeps released versions in changelog.yaml and removes their fragments
    # (keep_fragments: false): fragments describe galaxy.yml's version, which must not be released yet.
    releases = yaml.safe_load((CHANGELOGS / CHANGELOG_CONFIG["changes_file"]).read_text(encoding="utf-8"))["releases"]
    released = sorted(SemanticVersion(version) for version in releases or {})
    assert not [version for version in released if version > VERSION], (released, GALAXY["version"])
    if fragments():
        assert not released or released[-1] < VERSION, (
            "fragments exist but %s is released already: raise galaxy.yml's version" % GALAXY["version"])


def test_every_fragment_is_for_the_next_release_and_uses_the_configured_sections():
    sections = {section[0] for section in CHANGELOG_CONFIG["sections"]}
    assert fragments()
    for path in fragments():
        # A version in the name would claim another release than galaxy.yml's.
        assert not re.match(r"\d+\.\d+", path.name), path.name
        content = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert isinstance(content, dict) and content, path.name
        for section, entries in content.items():
            if section == CHANGELOG_CONFIG["prelude_section_name"]:
                assert isinstance(entries, str), (path.name, section)
            else:
                assert section in sections, (path.name, section)
                assert isinstance(entries, list), (path.name, section)
                assert all(isinstance(entry, str) for entry in entries), (path.name, section)


def test_no_plugin_or_role_was_added_in_a_version_newer_than_galaxy_yml():
    pattern = re.compile(r"^\s*version_added:\s*[\"']?([0-9][^\"'\s]*)", re.MULTILINE)
    found = {}
    for path in [*(REPO_ROOT / "plugins").rglob("*"), *(REPO_ROOT / "roles").glob("*/meta/argument_specs.yml")]:
        if path.is_file() and path.suffix in (".py", ".yml"):
            for version in pattern.findall(path.read_text(encoding="utf-8")):
                found.setdefault(version, []).append(str(path.relative_to(REPO_ROOT)))
    assert found
    assert not {version: paths for version, paths in found.items() if SemanticVersion(version) > VERSION}, found


# --- ansible-core: claimed and tested -----------------------------------------------------------
def pinned(requirements, package):
    (version,) = re.findall(r"^%s==(\S+)$" % re.escape(package), requirements, re.MULTILINE)
    return version


REQUIREMENTS_DEV = (REPO_ROOT / "requirements-dev.txt").read_text(encoding="utf-8")
CORE_PIN_TEXT = pinned(REQUIREMENTS_DEV, "ansible-core")
CORE_PIN = SemanticVersion(CORE_PIN_TEXT)


def test_the_claimed_ansible_core_starts_at_the_minor_the_tests_pin():
    claim = yaml.safe_load((REPO_ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))["requires_ansible"]
    match = re.fullmatch(r">=(\d+)\.(\d+)\.(\d+)", claim)
    assert match, "requires_ansible=%r; expected a lower bound such as >=2.19.0" % claim
    assert (int(match.group(1)), int(match.group(2))) == (CORE_PIN.major, CORE_PIN.minor), (
        "meta/runtime.yml claims %s, requirements-dev.txt tests ansible-core %s" % (claim, CORE_PIN_TEXT))


def test_ansible_test_has_an_ignore_file_for_the_tested_minor_only():
    ignores = sorted(path.name for path in (REPO_ROOT / "tests" / "sanity").glob("ignore-*.txt"))
    assert ignores == ["ignore-%d.%d.txt" % (CORE_PIN.major, CORE_PIN.minor)]


# --- the execution environment --------------------------------------------------------------------
EE = yaml.safe_load((REPO_ROOT / "execution-environment.yml").read_text(encoding="utf-8"))


def test_the_execution_environment_installs_the_tarball_of_galaxy_yml_s_version():
    tarball = "%s-%s-%s.tar.gz" % (GALAXY["namespace"], GALAXY["name"], GALAXY["version"])
    assert [entry["name"] for entry in EE["dependencies"]["galaxy"]["collections"]] == ["collections/" + tarball]
    assert [(entry["src"], entry["dest"]) for entry in EE["additional_build_files"]] == [
        ("build/" + tarball, "collections")]


def test_the_execution_environment_has_the_tested_ansible_core_and_runner():
    dependencies = EE["dependencies"]
    assert dependencies["ansible_core"]["package_pip"] == "ansible-core==%s" % CORE_PIN_TEXT
    assert dependencies["ansible_runner"]["package_pip"] == "ansible-runner==%s" % pinned(REQUIREMENTS_DEV,
                                                                                          "ansible-runner")
