# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection as users install it, without Galaxy: the tarball that
`ansible-galaxy collection build` makes, installed into an empty collections
path together with every collection it declares (and those declare), taken
from the copies the pinned `ansible` PyPI bundle carries. Used by the Molecule
test that runs the installed collection against the cluster and by the unit
test that installs it without one.

Commands go through the caller's O(run) (``run(*argv) -> stdout``, failing on a
non-zero exit), so each test keeps its own working directory and environment."""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import sys
import tarfile
from pathlib import Path

# Where `pip install ansible` puts the collections it bundles.
BUNDLE = Path(str(importlib.metadata.distribution("ansible").locate_file("ansible_collections")))


def galaxy():
    """The ansible-galaxy of the interpreter running this, where PATH leads elsewhere or nowhere."""
    beside = Path(sys.executable).parent / "ansible-galaxy"
    return str(beside) if beside.is_file() else shutil.which("ansible-galaxy") or "ansible-galaxy"


def isolated_env(collections_path):
    """The environment of a user with no ansible.cfg and no setting of their own, who sees only
    the collections under O(collections_path) (not those of the bundle or of this checkout)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(collections_path), ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return env


def build(root, output_dir, run):
    """Build the collection at O(root) into O(output_dir); the tarball's path."""
    built = run(galaxy(), "collection", "build", "--output-path", str(output_dir), str(root))
    return Path(re.search(r"^Created collection for \S+ at (\S+\.tar\.gz)$", built, re.MULTILINE).group(1))


def collection_info(tarball):
    """The collection_info of a collection tarball's MANIFEST.json."""
    with tarfile.open(tarball) as archive:
        return json.load(archive.extractfile("MANIFEST.json"))["collection_info"]


def bundled(fqcn):
    """The directory of collection O(fqcn) in the `ansible` bundle."""
    namespace, name = fqcn.split(".")
    path = BUNDLE / namespace / name
    if not (path / "MANIFEST.json").is_file():
        raise LookupError("%s is not in the ansible bundle (%s); pin an ansible release that carries it in "
                          "requirements-dev.txt" % (fqcn, BUNDLE))
    return path


def dependency_closure(dependencies):
    """The collections O(dependencies) (name -> version range) name, with theirs in turn, as the
    bundle's copies declare them; sorted."""
    found, pending = set(), list(dependencies)
    while pending:
        fqcn = pending.pop()
        if fqcn in found:
            continue
        found.add(fqcn)
        manifest = json.loads((bundled(fqcn) / "MANIFEST.json").read_text(encoding="utf-8"))
        pending.extend(manifest["collection_info"]["dependencies"])
    return sorted(found)


def pack_bundled(fqcn, output_dir):
    """Pack the bundle's copy of O(fqcn) into a collection tarball in O(output_dir); its path.

    The bundle leaves out the files its FILES.json lists for tests and CI, and ansible-galaxy
    refuses a tarball that lacks a listed file; the tarball lists what it holds (with the
    checksums it has), and its MANIFEST.json the checksum of that list."""
    root = bundled(fqcn)
    manifest = json.loads((root / "MANIFEST.json").read_text(encoding="utf-8"))
    listing = json.loads((root / "FILES.json").read_text(encoding="utf-8"))

    def present(entry):
        path = root / entry["name"]
        return path.is_dir() if entry["ftype"] == "dir" else path.is_file()

    kept = [entry for entry in listing["files"] if present(entry)]
    for entry in kept:
        if entry["ftype"] == "file":
            entry["chksum_sha256"] = hashlib.sha256((root / entry["name"]).read_bytes()).hexdigest()
    files_json = json.dumps(dict(listing, files=kept), indent=4).encode()
    manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(files_json).hexdigest()
    info = manifest["collection_info"]
    tarball = Path(output_dir) / ("%s-%s-%s.tar.gz" % (info["namespace"], info["name"], info["version"]))
    with tarfile.open(tarball, "w:gz") as archive:
        for name, data in (("MANIFEST.json", json.dumps(manifest, indent=4).encode()), ("FILES.json", files_json)):
            member = tarfile.TarInfo(name)
            member.size, member.mode = len(data), 0o644
            archive.addfile(member, io.BytesIO(data))
        for entry in kept:
            if entry["name"] != ".":
                archive.add(root / entry["name"], entry["name"], recursive=False)
    return tarball


def install_offline(tarball, collections_path, run):
    """Install O(tarball) with the collections it depends on (from the bundle) into
    O(collections_path), without Galaxy; the names of those collections."""
    dependencies = dependency_closure(collection_info(tarball)["dependencies"])
    packed_dir = Path(collections_path).parent / "dependency-tarballs"
    packed_dir.mkdir(exist_ok=True)
    packed = [str(pack_bundled(fqcn, packed_dir)) for fqcn in dependencies]
    run(galaxy(), "collection", "install", "--offline", "-p", str(collections_path), str(tarball), *packed)
    return dependencies


def visible_collections(run):
    """What `ansible-galaxy collection list` shows: {collections path: [namespace.name, ...]},
    ansible-core's own ansible.builtin left out."""
    visible, path = {}, None
    for line in run(galaxy(), "collection", "list").splitlines():
        heading = re.match(r"^# (\S+)", line)
        if heading:
            path = heading.group(1)
            if "/ansible/_internal/" not in path:
                visible[path] = []
        elif path in visible and re.match(r"^[a-z0-9_]+\.[a-z0-9_]+\s", line):
            visible[path].append(line.split()[0])
    return visible
