# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's licence: the LICENSE file, galaxy.yml and the SPDX lines agree,
and the built collection carries the file."""

from __future__ import annotations

import fnmatch
import re
import subprocess

import yaml

from unit_support import REPO_ROOT

LICENSE = REPO_ROOT / "LICENSE"
# A licence line as the files here write it, at the start of a line.
SPDX_LINE = re.compile(r"^\s*(?:#|//|--|;)\s*SPDX-License-Identifier:\s*(?P<id>\S.*?)\s*$")


def test_license_is_the_gnu_gpl_version_3():
    text = LICENSE.read_text(encoding="utf-8")
    assert text.split("\n", 2)[:2] == [" " * 20 + "GNU GENERAL PUBLIC LICENSE", " " * 23 + "Version 3, 29 June 2007"]
    assert "END OF TERMS AND CONDITIONS" in text and "How to Apply These Terms to Your New Programs" in text


def test_galaxy_yml_names_the_same_licence_and_builds_the_file_in():
    galaxy = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text(encoding="utf-8"))
    # license and license_file are exclusive; the SPDX identifier is what Galaxy shows.
    assert galaxy["license"] == ["GPL-3.0-or-later"] and "license_file" not in galaxy
    assert not [pattern for pattern in galaxy.get("build_ignore", []) if fnmatch.fnmatch("LICENSE", pattern)]


def test_every_spdx_line_names_the_licence_of_galaxy_yml():
    listed = subprocess.run(["git", "grep", "-I", "-h", "-E", "SPDX-License-Identifier:"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=False)
    if listed.returncode not in (0, 1):  # not a git checkout: nothing to compare
        return
    found = {match.group("id") for match in map(SPDX_LINE.match, listed.stdout.splitlines()) if match}
    assert found == {"GPL-3.0-or-later"}, found
