# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a node's weights directory is the weights' own, before the first download or sync
writes into it.

The sync of the weights runs rsync with --delete: whatever else the directory holds is
deleted on every peer. The inventory check refuses a path that names a shared directory
(_inventory_values.py weights_dir_problems); this is the node's side: the directory the
path names must be absent, empty, hold the collection's marker (MARKER, which the
model_weights role writes before anything else goes in), or hold only files of the
manifest the node keeps for it (a copy made before the marker existed). Anything else is
refused, naming a few of the entries found.

read_argv is the read-only command that dgxspark.cluster.node_read runs on the node (one
raw call, in check mode too); verdict judges what it printed, on the controller. Standard
library only (and the manifest's exclude rules), so it is unit-tested without Ansible,
running the command itself on local directories.
"""

from __future__ import annotations

import json
import shlex

from ansible_collections.dgxspark.cluster.plugins.module_utils._manifest import (
    DEFAULT_EXCLUDE,
    MARKER,
    is_excluded,
    listed,
)

MARKER_CONTENT = (
    "This directory holds the model weights that the dgxspark.cluster collection fetches and syncs\n"
    "(model_weights_dir). The sync (rsync --delete) deletes whatever else the directory holds.\n"
)

# The most entries read from a directory without the marker: a model has some hundreds of
# files at most, so a directory with more holds something else.
READ_LIMIT = 10000

_SECTION = "@@dgxspark-weights-dir"

# $1 the directory, $2 the manifest the node keeps for it, $3 the marker's name, $4 the
# most entries to print. Only reads; always exits 0. The first line is the state: absent,
# other <type> (not a directory), marked, empty, or directory followed by the entries
# (paths below the directory, one per line, directories left out) and the manifest.
_SCRIPT = r"""d=$1 m=$2 k=$3 n=$4
if [ ! -e "$d" ] && [ ! -L "$d" ]; then echo absent; exit 0; fi
if [ ! -d "$d" ]; then printf 'other %%s\n' "$(stat -c %%F -- "$d" 2>/dev/null)"; exit 0; fi
if [ -f "$d/$k" ]; then echo marked; exit 0; fi
e=$(find "$d/" -mindepth 1 \( %(prune)s \) -prune -o ! -type d -printf '%%P\n' 2>/dev/null | head -n "$n")
if [ -z "$e" ]; then echo empty; exit 0; fi
echo directory
echo '%(section)s entries'
printf '%%s\n' "$e"
if [ -f "$m" ]; then echo '%(section)s manifest'; cat -- "$m"; fi
exit 0
"""


class WeightsDirError(ValueError):
    """What the read printed is not what its script prints."""


def _prune_expression():
    # The manifest's exclusions that are names (.cache, .huggingface, *.incomplete): not read.
    names = [pattern for pattern in DEFAULT_EXCLUDE if "/" not in pattern]
    return " -o ".join("-name %s" % shlex.quote(name) for name in names)


def read_argv(path, manifest_path):
    """The argv of the read-only command that reads the weights directory O(path) and the
    manifest O(manifest_path) the node keeps for it (a node_read spec's command)."""
    for name, value in (("path", path), ("manifest_path", manifest_path)):
        if not isinstance(value, str) or not value.startswith("/") or "\n" in value or "\0" in value:
            raise WeightsDirError("%s %r: expected an absolute path" % (name, value))
    script = _SCRIPT % {"prune": _prune_expression(), "section": _SECTION}
    return ["sh", "-c", script, "sh", path, manifest_path, MARKER, str(READ_LIMIT + 1)]


def _manifest_paths(text):
    try:
        manifest = json.loads(text)
    except ValueError:
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None
    paths = set(manifest["files"])
    if isinstance(manifest.get("symlinks"), dict):
        paths.update(manifest["symlinks"])
    return paths


def _entries(count):
    return "%d entr%s" % (count, "y" if count == 1 else "ies")


def verdict(command, host, path, manifest_path):
    """What the read (O(command): node_read's C(rc), C(stdout), C(stderr) of read_argv) found in
    O(host)'s weights directory O(path): C(exists), C(marked) (the marker is there),
    C(marker_path), C(marker_content) (what the role writes) and C(problems), the refusals,
    each naming the host, the variable, the path, a few of the entries found and the fix."""
    if not isinstance(command, dict) or command.get("rc") != 0:
        raise WeightsDirError("%s: the read of %s failed: %r" % (host, path, command))
    lines = (command.get("stdout") or "").split("\n")
    state, _space, kind = lines[0].strip().partition(" ")
    result = {"exists": state != "absent", "marked": state == "marked", "marker_path": path.rstrip("/") + "/" + MARKER,
              "marker_content": MARKER_CONTENT, "problems": []}
    expected = ("expected the weights' own directory: absent, empty, holding the collection's marker %s, or holding "
                "only files of the manifest this node keeps for it (%s), since the weights sync (rsync --delete) deletes "
                "whatever else it holds" % (result["marker_path"], manifest_path))
    if state in ("absent", "marked", "empty"):
        return result
    if state == "other":
        result["problems"].append(
            "%s: model_weights_dir %s is a %s, not a directory; %s. Point model_weights_dir at a directory of its own."
            % (host, path, kind or "file", expected))
        return result
    if state != "directory":
        raise WeightsDirError("%s: the read of %s printed %r; expected absent, other, marked, empty or directory"
                              % (host, path, lines[0]))
    entries, manifest, section = [], [], None
    for line in lines[1:]:
        if line.startswith(_SECTION + " "):
            section = line[len(_SECTION) + 1:]
        elif section == "entries" and line:
            entries.append(line)
        elif section == "manifest":
            manifest.append(line)
    more = len(entries) > READ_LIMIT
    entries = entries[:READ_LIMIT]
    known = _manifest_paths("\n".join(manifest)) if manifest else None
    foreign = sorted(entry for entry in entries if not is_excluded(entry, DEFAULT_EXCLUDE)
                     and (known is None or entry not in known))
    if not foreign and not more:
        # Only files the node's manifest lists (a copy made before the marker existed, or
        # what an interrupted download left of it): the weights' own.
        return result
    if more:
        found = "more than %d entries, more than a model's weights (%s...)" % (READ_LIMIT, ", ".join(sorted(entries)[:3]))
    else:
        found = "%s that %s: %s" % (
            _entries(len(foreign)), "no manifest of this node lists" if known is not None
            else "%s not the collection's (no marker, no manifest)" % ("is" if len(foreign) == 1 else "are"),
            listed(foreign))
    result["problems"].append(
        "%s: model_weights_dir %s holds %s; %s. Point model_weights_dir at a directory of its own, or, if nothing in "
        "it needs keeping, mark it as the weights' own: sudo touch %s." % (host, path, found, expected,
                                                                           result["marker_path"]))
    return result
