# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Manifest of a model directory (each file's size and SHA-256) and its
verification, with a hash cache so that re-verifying unchanged files reads only
their metadata.

A manifest is ``{"version": 1, "files": {relpath: {"size": int, "sha256": hex}}}``;
with ``symlinks="record"`` it also holds ``"symlinks": {relpath: target}`` when the
tree has any. Paths are relative to the model directory, with ``/`` separators.
It may record its ``origin``, ``{"repo_id", "commit", "allow_patterns",
"ignore_patterns"}``: the Hub revision and file selection the directory was
downloaded for, so that a later run can tell, without asking the Hub, that a
directory still matching the manifest holds that pinned revision.

The hash cache maps a relpath to the ``size``, ``mtime_ns``, ``ctime_ns`` and
``ino`` the file had when it was hashed, and the ``sha256`` found. A cached
sha256 is used only while all four are unchanged. ``ctime_ns`` and ``ino`` matter:
``rsync -a`` restores the mtime, so a cache file copied from another node along
with the weights must never vouch for this node's files; ctime cannot be set from
user space, and a file replaced by rename has a new inode.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

MANIFEST_VERSION = 1
CACHE_VERSION = 1

#: The file the model_weights role writes into a weights directory before anything else,
#: saying the directory is the weights' own (the sync, rsync --delete, deletes whatever
#: else it holds); the role's check refuses a directory that holds other entries without it.
MARKER = ".dgxspark-weights"

#: Left out of a manifest unless O(exclude) says otherwise. A pattern without ``/``
#: is matched against every path component (a matching directory is skipped with all
#: it holds); a pattern with ``/`` is matched against the whole relative path.
DEFAULT_EXCLUDE = (
    ".cache",  # huggingface_hub --local-dir: download metadata, locks, *.incomplete
    ".huggingface",  # the same, from huggingface_hub before 0.23
    "*.incomplete",  # a partial huggingface_hub download
    "/" + MARKER,  # the collection's own marker, never one of the weights
)

CHECKSUM_MODES = ("cached", "full", "size")
SYMLINK_MODES = ("refuse", "record")

#: A file whose ctime is this close to the moment its hashing started is not cached:
#: a write in the same timestamp tick would leave its metadata unchanged. Two seconds
#: covers filesystems that keep whole or even seconds.
RACY_WINDOW_NS = 2 * 10**9

CHUNK_BYTES = 8 * 1024 * 1024
LISTED = 5

_HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")


class ManifestError(Exception):
    """Raised with a message that says what was found and what was expected."""


# --------------------------------------------------------------------------- paths


def is_excluded(relpath, patterns):
    """True when O(relpath) (POSIX, relative) matches one of O(patterns)."""
    parts = relpath.split("/")
    for pattern in patterns:
        if "/" in pattern:
            if fnmatch.fnmatchcase(relpath, pattern.strip("/")):
                return True
        elif any(fnmatch.fnmatchcase(part, pattern) for part in parts):
            return True
    return False


def check_relpath(relpath, what="manifest entry"):
    if not isinstance(relpath, str) or not relpath:
        raise ManifestError("%s %r: expected a non-empty relative path" % (what, relpath))
    parts = relpath.split("/")
    if relpath.startswith("/") or any(part in ("", ".", "..") for part in parts) or "\0" in relpath:
        raise ManifestError(
            "%s %r: expected a normalised relative path below the model directory "
            "(no leading /, no empty, . or .. components)" % (what, relpath)
        )
    return relpath


def inside(root, path):
    """O(path) relative to O(root) when it lies below it, else None."""
    if not path:
        return None
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if rel == os.curdir or rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return None
    return rel.replace(os.sep, "/")


# ---------------------------------------------------------------------------- scan


def scan_tree(root, exclude=DEFAULT_EXCLUDE, symlinks="refuse", skip=()):
    """Walk O(root) without following links.

    Returns ``{"files": {relpath: os.stat_result}, "symlinks": {relpath: target},
    "excluded": [relpath, ...]}``. An excluded directory is listed once and not
    entered. O(skip) are relpaths left out silently (the manifest and its cache when
    they lie inside O(root)). Raises ManifestError on a symlink when O(symlinks) is
    V(refuse), on a device, FIFO or socket, and on a file name that is not UTF-8.
    """
    if symlinks not in SYMLINK_MODES:
        raise ManifestError("symlinks=%r: expected one of %s" % (symlinks, ", ".join(SYMLINK_MODES)))
    if not os.path.isdir(root):
        raise ManifestError("%s is not a directory" % root)
    skip = set(skip)
    files, links, excluded, refused, special = {}, {}, [], [], []
    pending = [""]
    while pending:
        prefix = pending.pop()
        directory = os.path.join(root, prefix) if prefix else root
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel = prefix + entry.name
                try:
                    rel.encode("utf-8")
                except UnicodeEncodeError:
                    raise ManifestError(
                        "file name %r in %s is not UTF-8; a manifest records UTF-8 names only"
                        % (entry.name, directory)
                    ) from None
                if rel in skip:
                    continue
                if is_excluded(rel, exclude):
                    excluded.append(rel)
                    continue
                if entry.is_symlink():
                    if symlinks == "record":
                        links[rel] = os.readlink(entry.path)
                    else:
                        refused.append(rel)
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(rel + "/")
                elif entry.is_file(follow_symlinks=False):
                    files[rel] = entry.stat(follow_symlinks=False)
                else:
                    special.append(rel)
    if special:
        raise ManifestError(
            "%s holds %d entries that are neither files, directories nor symlinks: %s"
            % (root, len(special), listed(sorted(special)))
        )
    if refused:
        raise ManifestError(
            "%s holds %d symlinks, which are refused (symlinks=refuse): %s; copy the files they point "
            "to into the directory, exclude them, or record the links with symlinks=record"
            % (root, len(refused), listed(sorted(refused)))
        )
    return {"files": files, "symlinks": links, "excluded": sorted(excluded)}


def listed(items, limit=LISTED):
    items = list(items)
    text = ", ".join(str(item) for item in items[:limit])
    if len(items) > limit:
        text += " and %d more" % (len(items) - limit)
    return text


# ---------------------------------------------------------------------- hash cache


def stat_key(st):
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}


def load_cache(text, root):
    """The cache entries in O(text) that belong to O(root).

    Returns ``(entries, reason)``: a cache that cannot be used gives ``{}`` and a reason
    (it is rebuilt, never trusted in part); an absent cache (O(text) is None) gives no reason.
    """
    if text is None:
        return {}, None
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {}, "the hash cache is not JSON (%s); every file is hashed" % exc
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("files"), dict):
        return {}, "the hash cache is not a version %d cache; every file is hashed" % CACHE_VERSION
    if data.get("root") != os.path.abspath(root):
        return {}, "the hash cache was written for %s, not %s; every file is hashed" % (data.get("root"), root)
    entries = {}
    for rel, entry in data["files"].items():
        if (
            isinstance(entry, dict)
            and all(_is_int(entry.get(key)) for key in ("size", "mtime_ns", "ctime_ns", "ino"))
            and isinstance(entry.get("sha256"), str)
            and _HEX64.match(entry["sha256"])
        ):
            entries[rel] = {key: entry[key] for key in ("size", "mtime_ns", "ctime_ns", "ino", "sha256")}
    return entries, None


def dump_cache(entries, root):
    return json.dumps(
        {"version": CACHE_VERSION, "root": os.path.abspath(root), "files": entries}, indent=1, sort_keys=True
    ) + "\n"


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------------- hashing


def hash_file(path, expected_stat, now_ns=time.time_ns, chunk_bytes=CHUNK_BYTES):
    """``(sha256 hex, cache entry or None)`` of the file at O(path).

    Fails when the file is not the one that was scanned or changes while it is read.
    The cache entry is None when the file's ctime is within RACY_WINDOW_NS of the start.
    """
    started = now_ns()
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ManifestError("%s became a symlink after the directory was scanned" % path) from None
        raise ManifestError("cannot read %s: %s" % (path, exc.strerror)) from None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb", buffering=0) as handle:
        before = stat_key(os.fstat(fd))
        if before != stat_key(expected_stat):
            raise ManifestError(
                "%s changed after the directory was scanned (%s, then %s); is a download or sync still running?"
                % (path, _short_stat(stat_key(expected_stat)), _short_stat(before))
            )
        buffer = bytearray(chunk_bytes)
        view = memoryview(buffer)
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
        after = stat_key(os.fstat(fd))
    if after != before:
        raise ManifestError(
            "%s changed while it was hashed (%s, then %s); is a download or sync still running?"
            % (path, _short_stat(before), _short_stat(after))
        )
    sha = digest.hexdigest()
    entry = None
    if before["ctime_ns"] < started - RACY_WINDOW_NS:
        entry = dict(before, sha256=sha)
    return sha, entry


def _entry_key(entry):
    return {key: entry.get(key) for key in ("size", "mtime_ns", "ctime_ns", "ino")}


def _short_stat(key):
    return "size %d, mtime_ns %d, inode %d" % (key["size"], key["mtime_ns"], key["ino"])


def digests(root, files, cache=None, checksums="cached", workers=4, now_ns=time.time_ns):
    """SHA-256 of each file in O(files) (relpath -> os.stat_result).

    With O(checksums) V(cached), a cache entry whose size, mtime_ns, ctime_ns and inode all
    match gives the digest without reading the file; V(full) reads every file. Returns
    ``{"sha256": {relpath: hex}, "cache": entries, "hashed_files", "hashed_bytes",
    "cached_files"}``: the new cache keeps the old entries that still match and adds the
    fresh ones.
    """
    if checksums not in ("cached", "full"):
        raise ManifestError("checksums=%r: expected cached or full" % (checksums,))
    if not _is_int(workers) or workers < 1:
        raise ManifestError("workers=%r: expected a positive integer" % (workers,))
    cache = cache or {}
    found, new_cache, to_hash = {}, {}, []
    for rel, st in files.items():
        entry = cache.get(rel)
        if entry is not None and _entry_key(entry) == stat_key(st):
            new_cache[rel] = entry
            if checksums == "cached":
                found[rel] = entry["sha256"]
                continue
        to_hash.append(rel)
    cached_files = len(found)
    # Largest first, so that one big shard does not start last.
    to_hash.sort(key=lambda rel: (-files[rel].st_size, rel))

    def one(rel):
        return rel, hash_file(os.path.join(root, *rel.split("/")), files[rel], now_ns=now_ns)

    if workers == 1 or len(to_hash) < 2:
        results = [one(rel) for rel in to_hash]
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(to_hash))) as pool:
            results = list(pool.map(one, to_hash))
    for rel, (sha, entry) in results:
        found[rel] = sha
        if entry is None:
            new_cache.pop(rel, None)
        else:
            new_cache[rel] = entry
    return {
        "sha256": found,
        "cache": new_cache,
        "hashed_files": len(to_hash),
        "hashed_bytes": sum(files[rel].st_size for rel in to_hash),
        "cached_files": cached_files,
    }


# ------------------------------------------------------------------------ manifest


def parse_manifest(data):
    """Validate a manifest given as JSON text or as a mapping; returns a plain dict."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except ValueError as exc:
            raise ManifestError("the manifest is not JSON: %s" % exc) from None
    if not isinstance(data, dict):
        raise ManifestError("the manifest is a %s; expected a mapping" % type(data).__name__)
    version = data.get("version")
    if version != MANIFEST_VERSION or isinstance(version, bool):
        raise ManifestError("manifest version %r is not supported; expected %d" % (version, MANIFEST_VERSION))
    unknown = sorted(set(data) - {"version", "files", "symlinks", "origin"})
    if unknown:
        raise ManifestError(
            "the manifest has unknown keys %s; expected version, files, symlinks and origin" % ", ".join(unknown)
        )
    files = data.get("files")
    if not isinstance(files, dict) or not files:
        raise ManifestError("the manifest lists no files; expected a non-empty mapping under 'files'")
    parsed = {}
    for rel, entry in files.items():
        check_relpath(rel)
        if not isinstance(entry, dict) or set(entry) != {"size", "sha256"}:
            raise ManifestError("manifest entry %r is %r; expected exactly size and sha256" % (rel, entry))
        if not _is_int(entry["size"]) or entry["size"] < 0:
            raise ManifestError("manifest entry %r: size %r; expected a non-negative integer" % (rel, entry["size"]))
        if not isinstance(entry["sha256"], str) or not _HEX64.match(entry["sha256"]):
            raise ManifestError(
                "manifest entry %r: sha256 %r; expected 64 lowercase hex digits" % (rel, entry["sha256"])
            )
        parsed[rel] = {"size": entry["size"], "sha256": entry["sha256"]}
    manifest = {"version": MANIFEST_VERSION, "files": parsed}
    if "symlinks" in data:
        links = data["symlinks"]
        if not isinstance(links, dict):
            raise ManifestError("the manifest's symlinks are %r; expected a mapping of path to target" % (links,))
        for rel, target in links.items():
            check_relpath(rel, "manifest symlink")
            if rel in parsed:
                raise ManifestError("manifest path %r is listed both as a file and as a symlink" % rel)
            if not isinstance(target, str) or not target:
                raise ManifestError("manifest symlink %r: target %r; expected a non-empty string" % (rel, target))
        manifest["symlinks"] = dict(links)
    if "origin" in data:
        manifest["origin"] = parse_origin(data["origin"])
    return manifest


# -------------------------------------------------------------------------- origin


ORIGIN_KEYS = ("repo_id", "commit", "allow_patterns", "ignore_patterns")


def parse_origin(origin, partial=False, what="the manifest's origin"):
    """Validate an origin; returns it with sorted, de-duplicated pattern lists.

    An origin names the Hub repository, the commit and the file selection
    (``allow_patterns``, ``ignore_patterns``; the order of patterns does not change
    the selection). With O(partial), a key that is absent or null is left out: it is
    not compared (the commit of a branch is not known before the Hub is asked).
    """
    if not isinstance(origin, dict):
        raise ManifestError("%s is %r; expected a mapping of %s" % (what, origin, ", ".join(ORIGIN_KEYS)))
    unknown = sorted(set(origin) - set(ORIGIN_KEYS))
    if unknown:
        raise ManifestError("%s has unknown keys %s; expected %s" % (what, ", ".join(unknown), ", ".join(ORIGIN_KEYS)))
    parsed = {}
    for key in ORIGIN_KEYS:
        value = origin.get(key)
        if value is None and partial:
            continue
        if key in ("repo_id", "commit"):
            if not isinstance(value, str) or not value:
                raise ManifestError("%s: %s is %r; expected a non-empty string" % (what, key, value))
            parsed[key] = value
        else:
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ManifestError("%s: %s is %r; expected a list of strings" % (what, key, value))
            parsed[key] = sorted(set(value))
    return parsed


def origin_differences(recorded, expected):
    """What differs between a manifest's recorded origin and the O(expected) one.

    O(expected) is partial (see parse_origin): only the keys it holds are compared.
    Returns a list of texts, empty when the origin matches; a manifest without an
    origin (written before origins were recorded) never matches.
    """
    expected = parse_origin(expected, partial=True, what="the expected origin")
    if recorded is None:
        return ["the manifest records no origin (it was written before origins were recorded)"]
    recorded = parse_origin(recorded)
    return [
        "%s is %s, expected %s" % (key, _origin_value(recorded[key]), _origin_value(expected[key]))
        for key in ORIGIN_KEYS
        if key in expected and recorded[key] != expected[key]
    ]


def _origin_value(value):
    return "[%s]" % ", ".join(value) if isinstance(value, list) else value


def dump_manifest(manifest):
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def build_manifest(root, exclude=DEFAULT_EXCLUDE, symlinks="refuse", cache=None, checksums="cached", workers=4,
                   skip=(), now_ns=time.time_ns, origin=None):
    """The manifest of O(root), with the hashing counts and the new cache entries.

    O(origin), when given, is recorded in the manifest (see parse_origin)."""
    if checksums == "size":
        raise ManifestError("checksums=size cannot write a manifest, which needs every file's sha256")
    if origin is not None:
        origin = parse_origin(origin, what="origin")
    tree = scan_tree(root, exclude, symlinks, skip)
    if not tree["files"]:
        raise ManifestError(
            "%s holds no files%s; a manifest of nothing would verify an empty directory"
            % (root, " outside the excluded %s" % listed(tree["excluded"]) if tree["excluded"] else "")
        )
    hashed = digests(root, tree["files"], cache, checksums, workers, now_ns)
    manifest = {
        "version": MANIFEST_VERSION,
        "files": {
            rel: {"size": st.st_size, "sha256": hashed["sha256"][rel]} for rel, st in sorted(tree["files"].items())
        },
    }
    if tree["symlinks"]:
        manifest["symlinks"] = dict(sorted(tree["symlinks"].items()))
    if origin is not None:
        manifest["origin"] = origin
    return _result(manifest, tree, hashed, manifest=manifest)


def _result(listed, tree, hashed, **fields):
    """O(fields) with what building and verifying both report: the excluded paths of
    O(tree), the cache entries and hashing counts of O(hashed), and the summary of the
    manifest O(listed)."""
    return dict(
        fields,
        excluded=tree["excluded"],
        cache=hashed["cache"],
        hashed_files=hashed["hashed_files"],
        hashed_bytes=hashed["hashed_bytes"],
        cached_files=hashed["cached_files"],
        **summary(listed)
    )


def summary(manifest):
    return {
        "file_count": len(manifest["files"]),
        "total_bytes": sum(entry["size"] for entry in manifest["files"].values()),
        "symlink_count": len(manifest.get("symlinks", {})),
    }


def verify_tree(root, manifest, exclude=DEFAULT_EXCLUDE, symlinks="refuse", cache=None, checksums="cached",
                workers=4, skip=(), now_ns=time.time_ns):
    """Compare O(root) with O(manifest).

    Sizes are compared first; only files of the right size are hashed (not at all with
    O(checksums) V(size)). A missing O(root) is an empty tree: every file is missing.
    Returns the problem lists ``missing``, ``unexpected`` and ``mismatched`` (each
    mismatch ``{"path", "reason": size|sha256|symlink, "expected", "found"}``), ``ok``,
    the counts and the new cache entries.
    """
    if checksums not in CHECKSUM_MODES:
        raise ManifestError("checksums=%r: expected one of %s" % (checksums, ", ".join(CHECKSUM_MODES)))
    manifest = parse_manifest(manifest)
    exists = os.path.isdir(root)
    if exists:
        tree = scan_tree(root, exclude, symlinks, skip)
    elif os.path.lexists(root):
        raise ManifestError("%s exists but is not a directory" % root)
    else:
        tree = {"files": {}, "symlinks": {}, "excluded": []}
    expected, found = manifest["files"], tree["files"]
    expected_links, found_links = manifest.get("symlinks", {}), tree["symlinks"]

    missing = sorted(set(expected) - set(found)) + sorted(set(expected_links) - set(found_links))
    unexpected = sorted(set(found) - set(expected)) + sorted(set(found_links) - set(expected_links))
    mismatched, same_size = [], {}
    for rel in sorted(set(expected) & set(found)):
        if found[rel].st_size != expected[rel]["size"]:
            mismatched.append(
                {"path": rel, "reason": "size", "expected": expected[rel]["size"], "found": found[rel].st_size}
            )
        else:
            same_size[rel] = found[rel]
    for rel in sorted(set(expected_links) & set(found_links)):
        if found_links[rel] != expected_links[rel]:
            mismatched.append(
                {"path": rel, "reason": "symlink", "expected": expected_links[rel], "found": found_links[rel]}
            )

    # Entries of files that are not hashed now stay while they still match the file.
    kept = {
        rel: entry for rel, entry in (cache or {}).items()
        if rel in found and rel not in same_size and _entry_key(entry) == stat_key(found[rel])
    }
    if checksums == "size":
        kept.update(
            (rel, entry) for rel, entry in (cache or {}).items()
            if rel in same_size and _entry_key(entry) == stat_key(found[rel])
        )
        hashed = {"sha256": {}, "cache": kept, "hashed_files": 0, "hashed_bytes": 0, "cached_files": 0}
    else:
        hashed = digests(root, same_size, cache, checksums, workers, now_ns)
        for rel in sorted(same_size):
            if hashed["sha256"][rel] != expected[rel]["sha256"]:
                mismatched.append(
                    {"path": rel, "reason": "sha256", "expected": expected[rel]["sha256"], "found": hashed["sha256"][rel]}
                )
        kept.update(hashed["cache"])
        hashed["cache"] = kept
    mismatched.sort(key=lambda item: item["path"])
    return _result(
        manifest, tree, hashed,
        ok=not (missing or unexpected or mismatched),
        path_exists=exists,
        missing=missing,
        unexpected=unexpected,
        mismatched=mismatched,
    )


def describe_problems(root, source, result):
    """One line naming what does not match, for fail_json."""
    parts = []
    if not result["path_exists"]:
        return "%s does not exist; %s lists %d files (%d bytes), all missing" % (
            root, source, result["file_count"], result["total_bytes"])
    if result["missing"]:
        parts.append("%d missing (%s)" % (len(result["missing"]), listed(result["missing"])))
    if result["unexpected"]:
        parts.append("%d unexpected (%s)" % (len(result["unexpected"]), listed(result["unexpected"])))
    if result["mismatched"]:
        parts.append("%d mismatched (%s)" % (
            len(result["mismatched"]), listed(_mismatch_text(item) for item in result["mismatched"])))
    return "%s does not match %s: %s" % (root, source, "; ".join(parts))


def _mismatch_text(item):
    if item["reason"] == "size":
        return "%s: %d bytes, expected %d" % (item["path"], item["found"], item["expected"])
    if item["reason"] == "sha256":
        return "%s: sha256 %s, expected %s" % (item["path"], item["found"], item["expected"])
    return "%s: symlink to %s, expected %s" % (item["path"], item["found"], item["expected"])
