# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""README.md against the repository: the "Layout" tree lists what the repository holds, and the
table of contents links to headings that exist.

The "## Layout" section holds exactly one fenced code block, a tree of the repository:

    top-level-file              what it is
    top-level-dir/              what it is
    ├── child-file              what it is
    └── child-dir/              what it is
        └── grandchild          what it is

- Each line is an indent, one name and a description. The indent is empty at the top level and,
  one level down each, made of four-character units: ``│   `` or four spaces for the levels
  above, then ``├── `` or ``└── `` before the name. The name is one path segment, with a
  trailing ``/`` for a directory; the description follows after at least two spaces.
- Every entry listed must be in the repository (``git ls-files``), a directory as a directory.
- Every top-level entry of the repository is listed, and so is every child of a directory the
  tree expands (lists children of). ``roles/``, ``playbooks/``, ``plugins/`` and ``tools/`` must
  be expanded, so every role, playbook, plugins/ directory and tools/ entry is listed.

The "## Contents" list links every ``##`` and ``###`` heading that follows it, in order, by the
anchor GitHub gives it; every ``(#anchor)`` link of the README must name an existing heading.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from unit_support import REPO_ROOT

README = REPO_ROOT / "README.md"
# Directories whose every entry the tree must list.
EXPANDED = ("roles/", "playbooks/", "plugins/", "tools/")
FENCE = re.compile(r"^\s*(```|~~~)")
TREE_LINE = re.compile(
    r"^(?P<indent>(?:(?:│   |    )*(?:├── |└── ))?)(?P<name>[^\s│├└]\S*?)(?P<gap> {2,})(?P<what>\S.*)$")


class LayoutError(ValueError):
    """The Layout section is not in the format the module docstring describes."""


def markdown_lines(text):
    """(line number, line, inside a fenced code block) for every line of O(text)."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            yield number, line, True
            continue
        yield number, line, fenced


def section(text, heading):
    """The lines (number, text) of the level-2 section O(heading), fences included."""
    lines, inside = [], False
    for number, line, fenced in markdown_lines(text):
        if not fenced and line.startswith("## "):
            if inside:
                break
            inside = line == "## " + heading
            continue
        if inside:
            lines.append((number, line))
    if not inside and not lines:
        raise LayoutError("README.md has no '## %s' heading" % heading)
    return lines


def layout_tree(text):
    """The entries of the Layout section's tree: a list of (path, line number), directories
    ending in /, paths relative to the repository root."""
    lines = section(text, "Layout")
    fences = [index for index, (_number, line) in enumerate(lines) if FENCE.match(line)]
    if len(fences) != 2:
        raise LayoutError("the Layout section must hold exactly one fenced code block (found %d fence lines)"
                          % len(fences))
    entries, parents = [], []  # parents[d]: the directory a line of depth d + 1 sits in
    for number, line in lines[fences[0] + 1:fences[1]]:
        if not line.strip():
            continue
        match = TREE_LINE.match(line)
        if not match:
            raise LayoutError("README.md line %d: %r is not '<indent><name>  <what it is>' (the name, then at least "
                              "two spaces and a description)" % (number, line))
        name, depth = match.group("name"), len(match.group("indent")) // 4
        if name.rstrip("/").count("/") or name.rstrip("/") in (".", ".."):
            raise LayoutError("README.md line %d: %r is not one path segment (a directory ends in /)" % (number, name))
        if depth > len(parents):
            raise LayoutError("README.md line %d: %s is indented under no directory" % (number, name))
        del parents[depth:]
        parent = parents[-1] if parents else ""
        if parent is None:
            raise LayoutError("README.md line %d: %s is indented under a file" % (number, name))
        path = parent + name
        entries.append((path, number))
        # A file is no parent: nothing may be indented under it.
        parents.append(path if name.endswith("/") else None)
    return entries


def repository_entries(files):
    """Every directory (ending in /) and file of the tracked O(files)."""
    entries = set(files)
    for path in files:
        parts = path.split("/")
        entries.update("/".join(parts[:index]) + "/" for index in range(1, len(parts)))
    return entries


def children(entries, directory):
    """The direct children of O(directory) ("" for the root) among O(entries)."""
    return {entry for entry in entries if entry.startswith(directory) and entry != directory
            and "/" not in entry[len(directory):].rstrip("/")}


def layout_problems(listed, files):
    """What the tree O(listed) (path, line) gets wrong about the tracked O(files): one message each."""
    present = repository_entries(files)
    problems, seen = [], {}
    for path, number in listed:
        if path in seen:
            problems.append("line %d lists %s again (first on line %d); remove one" % (number, path, seen[path]))
            continue
        seen[path] = number
        other_kind = path[:-1] if path.endswith("/") else path + "/"
        if path not in present:
            problems.append("line %d lists %s, which %s; fix the name or remove the line" % (
                number, path, ("is a %s in the repository" % ("file" if path.endswith("/") else "directory"))
                if other_kind in present else "is not in the repository"))
    # The root, the directories that must be expanded and every directory the tree lists children of.
    expanded = {""} | set(EXPANDED) | {path.rstrip("/").rsplit("/", 1)[0] + "/" for path, _number in listed
                                       if "/" in path.rstrip("/")}
    for directory in sorted(expanded):
        if directory and directory not in present:
            continue
        for entry in sorted(children(present, directory) - set(seen)):
            problems.append("%s is in the repository but not listed; add a line for it%s" % (
                entry, " under " + directory if directory else " at the top level"))
    return problems


def tracked_files():
    listed = subprocess.run(["git", "ls-files", "-z", "--cached"], cwd=REPO_ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no list of the repository's files to compare with")
    names = listed.stdout.decode("utf-8").split("\0")
    # A file deleted from the work tree but not from the index is gone for this purpose.
    return {name for name in names if name and os.path.lexists(REPO_ROOT / name)}


def github_anchor(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def headings(text):
    """(level, text, anchor) of every heading outside code blocks, duplicates numbered as GitHub does."""
    found, counts = [], {}
    for _number, line, fenced in markdown_lines(text):
        match = None if fenced else re.match(r"^(#{1,6}) (.+?)\s*#*\s*$", line)
        if match:
            anchor = github_anchor(match.group(2))
            count = counts.get(anchor, 0)
            counts[anchor] = count + 1
            found.append((len(match.group(1)), match.group(2), anchor if not count else "%s-%d" % (anchor, count)))
    return found


def contents_problems(text):
    """What the Contents list and the README's in-page links get wrong, one message each."""
    every = headings(text)
    anchors = {anchor for _level, _text, anchor in every}
    links = [(number, anchor) for number, line, fenced in markdown_lines(text) if not fenced
             for anchor in re.findall(r"\]\(#([^)\s]+)\)", line)]
    problems = ["line %d links #%s, which no heading has" % (number, anchor)
                for number, anchor in links if anchor not in anchors]
    titles = [title for _level, title, _anchor in every]
    if "Contents" not in titles:
        return problems + ["README.md has no '## Contents' heading"]
    after = every[titles.index("Contents") + 1:]
    wanted = [anchor for level, _text, anchor in after if level in (2, 3)]
    listed = [anchor for _number, line in section(text, "Contents")
              for anchor in re.findall(r"\]\(#([^)\s]+)\)", line)]
    problems += ["the Contents list lacks #%s; add it in its place" % anchor for anchor in wanted if anchor not in listed]
    problems += ["the Contents list links #%s, which is no ## or ### heading after it; remove it" % anchor
                 for anchor in listed if anchor not in wanted]
    in_both = [anchor for anchor in listed if anchor in wanted]
    if in_both != [anchor for anchor in wanted if anchor in listed]:
        problems.append("the Contents list is out of order: the headings come as %s" % wanted)
    return problems


def test_readme_layout_lists_the_repository_as_it_is():
    problems = layout_problems(layout_tree(README.read_text(encoding="utf-8")), tracked_files())
    assert not problems, "README.md, section Layout:\n" + "\n".join(problems)


def test_readme_contents_link_every_section_in_order():
    problems = contents_problems(README.read_text(encoding="utf-8"))
    assert not problems, "README.md:\n" + "\n".join(problems)


# The checks themselves, on a small repository and README of their own.
FILES = {"README.md", "galaxy.yml", "playbooks/site.yml", "playbooks/status.yml", "plugins/filter/a.py",
         "roles/preflight/tasks/main.yml", "tools/test", "tests/unit/test_x.py", "tests/sanity/ignore.txt"}
TREE = """\
README.md           this file
galaxy.yml          metadata
playbooks/          what an operator runs
├── site.yml        bare nodes to a cluster
└── status.yml      whether it serves
plugins/            plugins
└── filter/         filters
roles/              roles
└── preflight/      checks
tests/              tests
├── sanity/         sanity
└── unit/           unit
tools/              tools
└── test            every test
"""


def readme(tree):
    return "# t\n\n## Layout\n\nThe tree:\n\n```text\n%s```\n\nMore text.\n\n## License\n\nGPL\n" % tree


def problems_of(tree, files=None):
    return layout_problems(layout_tree(readme(tree)), FILES if files is None else files)


def test_a_complete_tree_has_no_problem():
    assert problems_of(TREE) == []
    assert layout_tree(readme(TREE))[:5] == [
        ("README.md", 1 + 7), ("galaxy.yml", 2 + 7), ("playbooks/", 3 + 7), ("playbooks/site.yml", 4 + 7),
        ("playbooks/status.yml", 5 + 7)]


@pytest.mark.parametrize(("added", "named"), [
    ("roles/engine_service/tasks/main.yml", "roles/engine_service/ is in the repository but not listed; add a line "
                                            "for it under roles/"),
    ("playbooks/inventory_check.yml", "playbooks/inventory_check.yml is in the repository but not listed"),
    ("plugins/cache/x.py", "plugins/cache/ is in the repository but not listed"),
    ("tools/sim-check", "tools/sim-check is in the repository but not listed"),
    ("changelogs/changelog.yaml", "changelogs/ is in the repository but not listed; add a line for it at the top "
                                  "level"),
    ("LICENSE", "LICENSE is in the repository but not listed"),
    # tests/ is expanded, so its every child must be there too.
    ("tests/integration/x.yml", "tests/integration/ is in the repository but not listed; add a line for it under "
                                "tests/"),
])
def test_an_entry_missing_from_the_tree_is_named(added, named):
    problems = problems_of(TREE, FILES | {added})
    assert len(problems) == 1 and problems[0].startswith(named), problems


@pytest.mark.parametrize(("removed", "named"), [
    ("playbooks/status.yml", "line 12 lists playbooks/status.yml, which is not in the repository"),
    ("roles/preflight/tasks/main.yml", "line 16 lists roles/preflight/, which is not in the repository"),
    ("tools/test", "line 21 lists tools/test, which is not in the repository"),
])
def test_an_entry_listed_but_absent_is_named(removed, named):
    problems = problems_of(TREE, FILES - {removed})
    assert [problem for problem in problems if problem.startswith(named)], problems


def test_a_file_listed_as_a_directory_is_named():
    problems = problems_of(TREE.replace("galaxy.yml ", "galaxy.yml/"))
    assert problems[0] == "line 9 lists galaxy.yml/, which is a file in the repository; fix the name or remove the line"
    assert "galaxy.yml is in the repository but not listed; add a line for it at the top level" in problems


def test_the_required_directories_must_be_expanded():
    tree = TREE.replace("└── preflight/      checks\n", "")
    assert problems_of(tree) == ["roles/preflight/ is in the repository but not listed; add a line for it under roles/"]


def test_a_directory_left_unexpanded_needs_no_children():
    tree = TREE.replace("├── sanity/         sanity\n└── unit/           unit\n", "")
    assert problems_of(tree) == []


def test_a_repeated_entry_is_named():
    problems = problems_of(TREE.replace("galaxy.yml          metadata\n", "galaxy.yml          metadata\ngalaxy.yml          again\n"))
    assert problems == ["line 10 lists galaxy.yml again (first on line 9); remove one"]


@pytest.mark.parametrize(("tree", "message"), [
    ("README.md this file\n", "line 8: 'README.md this file' is not '<indent><name>  <what it is>'"),
    ("README.md\n", "line 8: 'README.md' is not"),
    ("├── README.md  indented under nothing\n", "line 8: README.md is indented under no directory"),
    ("galaxy.yml  metadata\n└── x  under a file\n", "line 9: x is indented under a file"),
    ("roles/preflight/  a nested path\n", "line 8: 'roles/preflight/' is not one path segment"),
])
def test_a_malformed_tree_is_refused_with_its_line(tree, message):
    with pytest.raises(LayoutError, match=re.escape(message)):
        layout_tree(readme(tree))


def test_the_section_needs_exactly_one_code_block():
    with pytest.raises(LayoutError, match="exactly one fenced code block"):
        layout_tree("## Layout\n\nno tree here\n\n## License\n")
    with pytest.raises(LayoutError, match="exactly one fenced code block"):
        layout_tree(readme(TREE).replace("More text.", "```\nREADME.md  again\n```"))
    with pytest.raises(LayoutError, match="no '## Layout' heading"):
        layout_tree("# t\n\n## License\n")


def test_a_heading_inside_a_code_block_does_not_end_the_section():
    text = readme(TREE).replace("The tree:", "```sh\n## not a heading\n```\n")
    with pytest.raises(LayoutError, match=r"exactly one fenced code block \(found 4"):
        layout_tree(text)


def test_github_anchors():
    assert github_anchor("restart.yml: upgrades and rollback") == "restartyml-upgrades-and-rollback"
    assert github_anchor("Layouts: one TP=4 lane or a 2xTP=2 fleet") == "layouts-one-tp4-lane-or-a-2xtp2-fleet"
    assert github_anchor("Faults: what it does, what you do") == "faults-what-it-does-what-you-do"
    assert github_anchor("`site.yml` and engine_service") == "siteyml-and-engine_service"


CONTENTS = """# t

## Contents

- [One](#one)
  - [Two: b](#two-b)

## One

### Two: b

#### Deeper, not listed

```sh
## not a heading
```
"""


def test_contents_that_match_the_headings_have_no_problem():
    assert contents_problems(CONTENTS) == []


def test_contents_missing_a_heading_or_out_of_order_are_named():
    missing = CONTENTS.replace("  - [Two: b](#two-b)\n", "")
    assert contents_problems(missing) == ["the Contents list lacks #two-b; add it in its place"]
    swapped = CONTENTS.replace("- [One](#one)\n  - [Two: b](#two-b)", "- [Two: b](#two-b)\n- [One](#one)")
    assert contents_problems(swapped) == ["the Contents list is out of order: the headings come as ['one', 'two-b']"]
    deeper = CONTENTS.replace("  - [Two: b](#two-b)", "  - [Two: b](#two-b)\n  - [Deeper](#deeper-not-listed)")
    assert contents_problems(deeper) == [
        "the Contents list links #deeper-not-listed, which is no ## or ### heading after it; remove it"]


def test_a_link_to_no_heading_is_named():
    broken = CONTENTS.replace("(#two-b)", "(#two)")
    assert "line 6 links #two, which no heading has" in contents_problems(broken)
