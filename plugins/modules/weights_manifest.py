#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_manifest
short_description: Write or verify the manifest (sizes and SHA-256) of a model weights directory
version_added: "0.1.0"
description:
  - The weights are fetched once and synced to the other nodes; this module proves that a copy is complete
    and intact.
  - With O(state=present), writes the manifest of O(path) to O(manifest_path). The manifest is a JSON object
    with C(version) V(1) and C(files), which maps each file's path (relative to O(path), with C(/) separators)
    to its C(size) in bytes and C(sha256) in lowercase hex; keys are sorted. The file is written to a temporary
    file and moved into place, and only when its content changes.
  - With O(state=verified), compares O(path) with a manifest read from O(manifest_path) or given as O(manifest),
    and fails listing the missing, unexpected and mismatched files. Sizes are compared first, so a file of the
    wrong size is reported without being read; only files of the right size are hashed. A manifest read from
    O(manifest_path) is returned as RV(manifest), so that one call both reads the manifest on the node that keeps
    it and verifies that node's copy.
  - O(origin) names the Hub revision and file selection the weights were downloaded for. With O(state=present) it
    is recorded in the manifest; with O(state=verified) the manifest must record the same origin, else the module
    fails before any file is read. A run that finds the manifest of the pinned revision and a copy that matches it
    need not ask the Hub again.
  - Hashing 150 GB takes minutes, so the SHA-256 of each file is kept in a hash cache, O(cache_path), with the
    file's size, mtime, ctime and inode. A later run takes the SHA-256 of a file from the cache while all four
    are unchanged, so re-verifying unchanged weights reads only their metadata.
    RV(hashed_files) and RV(cached_files) say how many digests were computed and how many came from the cache.
  - The ctime and inode make the cache local to one node. C(rsync -a) restores mtimes, so a cache copied from
    another node along with the weights never vouches for this node's files. A file whose ctime is within two
    seconds of the moment it is hashed is not cached, since a write in the same timestamp tick would leave its
    metadata unchanged.
  - Symlinks are refused unless O(symlinks=record); devices, FIFOs and sockets are always refused.
  - The manifest and its cache are left out of the manifest when they lie inside O(path).
author:
  - Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - With O(state=present) the manifest is computed (files are hashed, the cache is read) and C(changed)
        predicts whether the file would change; nothing is written, neither the manifest nor the cache.
      - With O(state=verified) the comparison runs unchanged; the cache is not updated.
  diff_mode:
    support: full
    details: With O(state=present), the old and new manifest text.
  platform:
    platforms: posix
options:
  path:
    description:
      - The model directory, for example V(/srv/models/DeepSeek-V4-Flash).
      - With O(state=verified), a directory that does not exist is reported as every file missing.
    type: path
    required: true
  state:
    description:
      - V(present) writes the manifest of O(path) to O(manifest_path).
      - V(verified) checks O(path) against an existing manifest and fails when anything differs.
    type: str
    choices: [present, verified]
    default: present
  manifest_path:
    description:
      - The manifest file. Required with O(state=present); with O(state=verified), give this or O(manifest).
      - Its directory must exist.
    type: path
  manifest:
    description:
      - The manifest itself, for O(state=verified), for example RV(manifest) registered on the node that
        wrote it, so the other nodes need not have the file.
      - Mutually exclusive with O(manifest_path).
    type: dict
  cache_path:
    description:
      - The hash cache, a JSON file mapping each relpath to the size, mtime_ns, ctime_ns, inode and SHA-256 the
        file had when it was hashed.
      - Defaults to O(manifest_path) with C(.cache) appended. Without O(manifest_path) and O(cache_path) no
        cache is used.
      - A cache that cannot be read, or that was written for another directory, is ignored with a warning and
        rewritten. A cache that cannot be written gives a warning, not a failure.
    type: path
  verify_checksums:
    description:
      - How the SHA-256 of a file is obtained.
      - V(cached) takes it from the hash cache while the file's size, mtime, ctime and inode are unchanged, and
        reads the file otherwise.
      - V(full) ignores the cache and reads every file (the cache is then rewritten with what was read).
        Use it after a suspected disk fault, or to re-check a cache you do not trust.
      - V(size), with O(state=verified) only, compares names and sizes and reads no file; quick, but it does not
        catch a corrupted byte.
    type: str
    choices: [cached, full, size]
    default: cached
  exclude:
    description:
      - Patterns (shell wildcards, case-sensitive) of paths left out of the manifest and of the comparison.
      - A pattern without C(/) is matched against every component of a relative path, so V(.cache) skips a
        C(.cache) directory at any depth with all it holds, and V(*.incomplete) any file with that suffix.
      - A pattern with C(/) is matched against the whole relative path, where C(*) also matches C(/).
      - The default leaves out what C(huggingface_hub) keeps beside a C(--local-dir) download (C(.cache),
        and C(.huggingface) from releases before 0.23), its partial downloads (C(*.incomplete)) and the
        marker the model_weights role writes at the top of the directory (C(/.dgxspark-weights)).
        Setting this option replaces the default list.
      - Use the same list when writing and when verifying.
    type: list
    elements: str
    default: [.cache, .huggingface, "*.incomplete", /.dgxspark-weights]
  origin:
    description:
      - Where the weights come from, as C(repo_id) (the Hub repository), C(commit) (the commit sha) and
        C(allow_patterns) and C(ignore_patterns) (the file selection; their order does not matter).
      - With O(state=present), recorded under C(origin) in the manifest.
      - With O(state=verified), the manifest must record this origin; a key left out or null is not compared (the
        commit of a branch, before the Hub is asked). A manifest that records another origin, or none, fails with
        RV(origin_differences) before any file is read.
    type: dict
  symlinks:
    description:
      - V(refuse) fails on any symlink in O(path) (after O(exclude)), naming them.
      - V(record) records each link's target text under C(symlinks) in the manifest, without following it;
        verifying compares the target text. A recorded link vouches for its target path, not for the content
        behind it, so prefer a directory of real files (C(hf download --local-dir)) to a C(huggingface_hub)
        cache snapshot of links.
    type: str
    choices: [refuse, record]
    default: refuse
  hash_workers:
    description:
      - Files hashed at the same time. SHA-256 of large files releases the interpreter lock, so several
        workers use several cores and the disk's queue depth.
    type: int
    default: 4
notes:
  - Empty directories are not recorded.
  - The module does not create the directory of O(manifest_path) or set its owner or mode; a new manifest gets
    the default mode under the current umask, and an existing one keeps its mode.
seealso:
  - module: dgxspark.cluster.disk_space
"""

EXAMPLES = r"""
- name: Write the manifest of the downloaded weights on the head node
  dgxspark.cluster.weights_manifest:
    path: /srv/models/DeepSeek-V4-Flash
    manifest_path: /srv/models/DeepSeek-V4-Flash.manifest.json
  register: weights_manifest

- name: Verify the synced copy on every other node against the head's manifest
  dgxspark.cluster.weights_manifest:
    path: /srv/models/DeepSeek-V4-Flash
    state: verified
    manifest: "{{ hostvars[groups['dgxspark_cluster'][0]].weights_manifest.manifest }}"
    cache_path: /srv/models/DeepSeek-V4-Flash.manifest.json.cache

- name: Find out what still has to be synced, without failing
  dgxspark.cluster.weights_manifest:
    path: /srv/models/DeepSeek-V4-Flash
    state: verified
    manifest_path: /srv/models/DeepSeek-V4-Flash.manifest.json
    verify_checksums: size
  register: weights_check
  failed_when: false

- name: Re-read every byte after a disk fault, whatever the cache says
  dgxspark.cluster.weights_manifest:
    path: /srv/models/DeepSeek-V4-Flash
    state: verified
    manifest_path: /srv/models/DeepSeek-V4-Flash.manifest.json
    verify_checksums: full
"""

RETURN = r"""
manifest:
  description:
    - The manifest written (or that would be written in check mode), with O(state=present).
    - With O(state=verified), the manifest read from O(manifest_path), also when the copy does not match it.
  returned: O(state=present) and success; O(state=verified) with O(manifest_path) once the manifest was read
  type: dict
  sample:
    version: 1
    origin:
      repo_id: deepseek-ai/DeepSeek-V4-Flash
      commit: 0123456789abcdef0123456789abcdef01234567
      allow_patterns: ["*.json", "*.safetensors"]
      ignore_patterns: []
    files:
      config.json:
        size: 1734
        sha256: 0f8a1c64be1d3e6a9a9d4c35e0b2f8c71d5e4a3b2c1d0e9f8a7b6c5d4e3f2a1b
      model-00001-of-00046.safetensors:
        size: 5368709120
        sha256: 3c9e05e1a6d1f3b9e2c7a4d8f0b1e2c3d4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9
manifest_path:
  description: The manifest file, or V(null) when O(manifest) was given.
  returned: always
  type: str
  sample: /srv/models/DeepSeek-V4-Flash.manifest.json
cache_path:
  description: The hash cache used, or V(null) when none was.
  returned: always
  type: str
  sample: /srv/models/DeepSeek-V4-Flash.manifest.json.cache
cache_saved:
  description:
    - Whether the hash cache on disk holds what this run found, because it needed no change or was written.
      False when no cache is used, when it could not be written (its directory is missing, for instance), and in
      check mode when it would change.
  returned: success or verification failure
  type: bool
  sample: true
origin_differences:
  description: What differs between the manifest's origin and O(origin).
  returned: O(state=verified) with O(origin), when the origins differ
  type: list
  elements: str
  sample: ["commit is 89abcdef0123456789abcdef0123456789abcdef, expected 0123456789abcdef0123456789abcdef01234567"]
file_count:
  description: Files in the manifest.
  returned: success or verification failure
  type: int
  sample: 52
total_bytes:
  description: Sum of their sizes.
  returned: success or verification failure
  type: int
  sample: 158913789952
symlink_count:
  description: Symlinks in the manifest (only with O(symlinks=record)).
  returned: success or verification failure
  type: int
  sample: 0
hashed_files:
  description: Files read and hashed in this run.
  returned: success or verification failure
  type: int
  sample: 1
hashed_bytes:
  description: Bytes read to hash them.
  returned: success or verification failure
  type: int
  sample: 5368709120
cached_files:
  description: Files whose SHA-256 came from the hash cache without reading them.
  returned: success or verification failure
  type: int
  sample: 51
excluded:
  description: Paths left out by O(exclude); an excluded directory is listed once.
  returned: success or verification failure
  type: list
  elements: str
  sample: [.cache]
missing:
  description: Paths in the manifest that O(path) lacks.
  returned: O(state=verified)
  type: list
  elements: str
  sample: [model-00046-of-00046.safetensors]
unexpected:
  description: Paths in O(path) that the manifest does not list.
  returned: O(state=verified)
  type: list
  elements: str
  sample: [.model-00046-of-00046.safetensors.Xy3kQ9]
mismatched:
  description:
    - Paths whose content differs. RV(mismatched[].reason) is V(size) (compared first, the file was not read),
      V(sha256) or V(symlink) (the link target differs).
  returned: O(state=verified)
  type: list
  elements: dict
  contains:
    path:
      description: The relative path.
      type: str
    reason:
      description: V(size), V(sha256) or V(symlink).
      type: str
    expected:
      description: The manifest's size (int), SHA-256 or link target.
      type: raw
    found:
      description: What O(path) holds.
      type: raw
  sample:
    - path: model-00007-of-00046.safetensors
      reason: size
      expected: 5368709120
      found: 2147483648
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._manifest import (
    DEFAULT_EXCLUDE,
    ManifestError,
    build_manifest,
    describe_problems,
    dump_cache,
    dump_manifest,
    inside,
    load_cache,
    origin_differences,
    parse_manifest,
    verify_tree,
)

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    state=dict(type="str", choices=["present", "verified"], default="present"),
    manifest_path=dict(type="path"),
    manifest=dict(type="dict"),
    cache_path=dict(type="path"),
    verify_checksums=dict(type="str", choices=["cached", "full", "size"], default="cached"),
    exclude=dict(type="list", elements="str", default=list(DEFAULT_EXCLUDE)),
    symlinks=dict(type="str", choices=["refuse", "record"], default="refuse"),
    hash_workers=dict(type="int", default=4),
    origin=dict(type="dict"),
)


def read_text(path):
    """The file's text, or None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_atomically(module, path, text):
    directory = os.path.dirname(path) or "."
    fd, temp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        os.unlink(temp)
        raise
    module.atomic_move(temp, path)


def write_cache(module, cache_path, text):
    """The cache is an optimisation: a failure to write it is a warning. True once written."""
    directory = os.path.dirname(cache_path) or "."
    try:
        fd, temp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(cache_path) + ".", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, cache_path)
    except OSError as exc:
        module.warn("cannot write the hash cache %s: %s; the next run hashes every file again" % (cache_path, exc))
        return False
    return True


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ("manifest_path",)), ("state", "verified", ("manifest_path", "manifest"), True)],
        mutually_exclusive=[("manifest_path", "manifest")],
        supports_check_mode=True,
    )
    p = module.params
    root, state, manifest_path = p["path"], p["state"], p["manifest_path"]
    cache_path = p["cache_path"] or (manifest_path + ".cache" if manifest_path else None)
    result = dict(changed=False, manifest_path=manifest_path, cache_path=cache_path)
    if p["hash_workers"] < 1:
        module.fail_json(msg="hash_workers is %d; expected 1 or more" % p["hash_workers"], **result)
    if state == "present" and p["verify_checksums"] == "size":
        module.fail_json(
            msg="verify_checksums=size reads no file, but writing a manifest needs every file's sha256; "
            "use cached or full with state=present",
            **result
        )
    if manifest_path and not os.path.isdir(os.path.dirname(manifest_path) or "."):
        module.fail_json(
            msg="the directory %s for manifest_path does not exist; create it first" % os.path.dirname(manifest_path),
            **result
        )
    skip = [rel for rel in (inside(root, manifest_path), inside(root, cache_path)) if rel]

    cache_text = None
    if cache_path:
        try:
            cache_text = read_text(cache_path)
        except (OSError, UnicodeDecodeError) as exc:
            module.warn("cannot read the hash cache %s: %s; every file is hashed" % (cache_path, exc))
    cache, reason = load_cache(cache_text, root)
    if reason:
        module.warn("%s: %s" % (cache_path, reason))
    options = dict(exclude=p["exclude"], symlinks=p["symlinks"], cache=cache, checksums=p["verify_checksums"],
                   workers=p["hash_workers"], skip=skip)

    if state == "present":
        try:
            outcome = build_manifest(root, origin=p["origin"], **options)
        except (ManifestError, OSError) as exc:
            module.fail_json(msg="cannot write the manifest of %s: %s" % (root, exc), **result)
        try:
            old_text = read_text(manifest_path)
        except (OSError, UnicodeDecodeError) as exc:
            module.fail_json(msg="cannot read the existing manifest %s: %s" % (manifest_path, exc), **result)
        try:
            old = parse_manifest(old_text) if old_text is not None else None
        except ManifestError:
            old = None  # an invalid manifest is replaced
        new_text = dump_manifest(outcome["manifest"])
        result["changed"] = old != outcome["manifest"]
        if result["changed"] and module._diff:
            result["diff"] = dict(before=old_text or "", after=new_text,
                                  before_header=manifest_path, after_header=manifest_path)
        if result["changed"] and not module.check_mode:
            try:
                write_atomically(module, manifest_path, new_text)
            except OSError as exc:
                module.fail_json(msg="cannot write the manifest %s: %s" % (manifest_path, exc), **result)
    else:
        source = manifest_path
        manifest = p["manifest"]
        if manifest_path:
            try:
                manifest = read_text(manifest_path)
            except (OSError, UnicodeDecodeError) as exc:
                module.fail_json(msg="cannot read the manifest %s: %s" % (manifest_path, exc), **result)
            if manifest is None:
                module.fail_json(
                    msg="the manifest %s does not exist; write it with state=present on the node that holds "
                    "the weights" % manifest_path,
                    **result
                )
        else:
            source = "the given manifest"
        try:
            manifest = parse_manifest(manifest)
            if manifest_path:
                result["manifest"] = manifest
            if p["origin"] is not None:
                differences = origin_differences(manifest.get("origin"), p["origin"])
                if differences:
                    result["origin_differences"] = differences
                    module.fail_json(
                        msg="%s is not the manifest of the expected origin: %s; write it again with state=present "
                        "after the download" % (source, "; ".join(differences)),
                        **result
                    )
            outcome = verify_tree(root, manifest, **options)
        except (ManifestError, OSError) as exc:
            module.fail_json(msg="cannot verify %s against %s: %s" % (root, source, exc), **result)

    result["cache_saved"] = False
    if cache_path:
        if outcome["cache"] == cache and not reason:
            result["cache_saved"] = True
        elif not module.check_mode:
            result["cache_saved"] = write_cache(module, cache_path, dump_cache(outcome["cache"], root))
    keys = ["file_count", "total_bytes", "symlink_count", "hashed_files", "hashed_bytes", "cached_files", "excluded"]
    keys += ["manifest"] if state == "present" else ["missing", "unexpected", "mismatched"]
    result.update((key, outcome[key]) for key in keys)
    if state == "verified" and not outcome["ok"]:
        module.fail_json(msg=describe_problems(root, source, outcome), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
