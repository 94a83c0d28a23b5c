#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: Download a Hugging Face Hub model repository at one revision into a plain directory
version_added: "0.1.0"
description:
  - Resolves O(revision) to a commit on the Hub at O(endpoint), lists the repository's files with their sizes and
    digests (C(GET /api/models/{repo}/tree/{sha}?recursive=true), following C(Link) pagination), keeps those that
    match O(allow_patterns) and none of O(ignore_patterns), and downloads each one that O(path) lacks from
    C(/{repo}/resolve/{sha}/{file}), following redirects.
  - Each file is written to C(.cache/dgxspark/download/<file>.incomplete) under O(path), continued with an HTTP
    Range request after an interruption, and moved into place only once its size and digest match the listing
    (the SHA-256 of an LFS file, the git blob SHA-1 of a file kept in git).
  - A file already in place with the right size and digest is not downloaded again. What was verified is recorded
    in C(.cache/dgxspark/snapshot.json) with each file's size, mtime, ctime and inode, so a rerun over unchanged
    files reads only their metadata; a file whose metadata changed is hashed again.
  - Files in O(path) that the listing does not hold are left alone and named in RV(extra).
  - The token travels in the module arguments, never on a command line, and is sent only to O(endpoint)'s host.
  - O(state=resolved) only asks the Hub which commit O(revision) names (C(GET /api/models/{repo}/revision/{rev})),
    without a listing or O(path), and fails naming the URL when the Hub answers 404, refuses the token or cannot be
    reached (RV(status) is then the HTTP status, or null when unreachable).
author:
  - Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The Hub is asked for the listing and O(path) is compared with it; nothing is downloaded or written.
      O(state=resolved) only reads and runs the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  path:
    description: The directory to download into; created when missing. Required unless O(state=resolved).
    type: path
  repo_id:
    description: The repository, C(namespace/name).
    type: str
  revision:
    description: A branch, tag or commit sha. Pin a commit sha so that every run fetches the same files.
    type: str
    default: main
  endpoint:
    description: The Hub's base URL.
    type: str
    default: https://huggingface.co
  token:
    description:
      - "A Hub access token, sent as C(Authorization: Bearer). Leave empty for a public repository."
    type: str
  allow_patterns:
    description: Shell wildcards; only matching files are fetched. A pattern ending in C(/) matches a whole folder.
    type: list
    elements: str
    default: []
  ignore_patterns:
    description: Shell wildcards of files not to fetch.
    type: list
    elements: str
    default: []
  state:
    description:
      - V(present) downloads what is missing.
      - V(planned) only reports what would be fetched (as check mode does), for a disk-space check before the
        download.
      - V(resolved) only asks the Hub for the commit of O(revision), for a preflight check before anything changes.
    type: str
    choices: [present, planned, resolved]
    default: present
  listing:
    description:
      - RV(commit) and RV(files) of an earlier run, as C({commit, files}). With it the Hub is not asked and only a
        plan is made (O(state=planned)); files of the right size count as present. Lets a node that will receive
        the weights by another way estimate the space it needs.
      - C(files) may also be the C(files) mapping of a manifest written by M(dgxspark.cluster.weights_manifest)
        (each path with its C(size) and C(sha256)), when the Hub was not asked in this run.
    type: dict
  timeout:
    description: Seconds to wait for the Hub to answer before failing.
    type: int
    default: 60
  progress_file:
    description:
      - A file on the node where the download keeps its progress (bytes received of the bytes to fetch), replaced
        atomically about twice per O(progress_interval). The action of this module sets it to a file of its
        temporary directory and shows a line from it at every poll; leave it unset.
      - While it is set, a download that no controller has polled for ten O(progress_interval) (at least two
        minutes) stops, as it would when the connection drops.
    type: path
  progress_interval:
    description:
      - Seconds between the progress lines the action shows while files are downloaded; V(0) runs the module
        without them, as before. Check mode and O(state=planned) never show any.
    type: float
    default: 10
notes:
  - Requests go through the standard library, which honours C(https_proxy) and C(no_proxy) in the environment.
seealso:
  - module: dgxspark.cluster.weights_manifest
  - module: dgxspark.cluster.disk_space
"""

EXAMPLES = r"""
- name: Download the model at a pinned commit
  dgxspark.cluster.hf_snapshot:
    path: /srv/models/DeepSeek-V4-Flash
    repo_id: deepseek-ai/DeepSeek-V4-Flash
    revision: 0123456789abcdef0123456789abcdef01234567
    token: "{{ model_weights_hf_token }}"
    ignore_patterns: ["*.pth", "original/"]

- name: Ask how much is still to be fetched
  dgxspark.cluster.hf_snapshot:
    path: /srv/models/DeepSeek-V4-Flash
    repo_id: deepseek-ai/DeepSeek-V4-Flash
    revision: 0123456789abcdef0123456789abcdef01234567
    state: planned
  register: weights_plan
"""

RETURN = r"""
commit:
  description: The commit the revision resolved to.
  returned: success
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
status:
  description: With O(state=resolved), the Hub's HTTP answer (null when it could not be reached).
  returned: when O(state=resolved)
  type: int
  sample: 200
url:
  description: With O(state=resolved), the URL the Hub was asked.
  returned: when O(state=resolved)
  type: str
  sample: https://huggingface.co/api/models/deepseek-ai/DeepSeek-V4-Flash/revision/main
files:
  description: The selected files of the listing, each with C(path), C(size), C(sha256) (LFS files, else null) and
    C(blob_oid) (the git blob SHA-1).
  returned: success
  type: list
  elements: dict
file_count:
  description: Selected files.
  returned: success
  type: int
  sample: 52
total_bytes:
  description: Their size in bytes.
  returned: success
  type: int
  sample: 158913789952
to_fetch:
  description: Files that were (or would be) downloaded.
  returned: success
  type: list
  elements: str
bytes_to_fetch:
  description: Bytes still to download, not counting what C(.incomplete) files already hold.
  returned: success
  type: int
resume_bytes:
  description: Bytes already held by C(.incomplete) files of the files to fetch.
  returned: success
  type: int
hashed_bytes:
  description: Bytes read to check files already in place.
  returned: success
  type: int
fetched:
  description: Each downloaded file with C(bytes_received) and C(resumed_from) (the offset a Range request
    continued at, 0 for a fresh download).
  returned: success
  type: list
  elements: dict
bytes_received:
  description: Bytes downloaded in this run.
  returned: success
  type: int
extra:
  description: Files in O(path) that the listing does not hold (outside C(.cache), and not the model_weights role's
    marker C(.dgxspark-weights) at the top).
  returned: success
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._hf_hub import (
    HubClient,
    HubError,
    snapshot,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils._manifest import MARKER
from ansible_collections.dgxspark.cluster.plugins.module_utils._progress import (
    ProgressAbandoned,
    ProgressFile,
    abandon_after,
    writer_interval,
)

ARGUMENT_SPEC = dict(
    path=dict(type="path"),
    repo_id=dict(type="str"),
    revision=dict(type="str", default="main"),
    endpoint=dict(type="str", default="https://huggingface.co"),
    token=dict(type="str", no_log=True),
    allow_patterns=dict(type="list", elements="str", default=[]),
    ignore_patterns=dict(type="list", elements="str", default=[]),
    state=dict(type="str", choices=["present", "planned", "resolved"], default="present"),
    listing=dict(type="dict"),
    timeout=dict(type="int", default=60),
    progress_file=dict(type="path"),
    progress_interval=dict(type="float", default=10),
)


def extra_files(root, listed):
    wanted = set(listed)
    found = []
    for top, dirs, names in os.walk(root):
        rel_top = os.path.relpath(top, root)
        if rel_top == ".":
            dirs[:] = [d for d in dirs if d != ".cache"]
            names = [name for name in names if name != MARKER]
        for name in names:
            rel = name if rel_top == "." else rel_top.replace(os.sep, "/") + "/" + name
            if rel not in wanted:
                found.append(rel)
    return sorted(found)


def resolved(module, p):
    """O(state=resolved): the commit O(revision) names, or a failure naming the URL and the Hub's answer."""
    if not p["endpoint"].startswith(("https://", "http://")):
        module.fail_json(msg="endpoint is %r; expected an http(s) URL such as https://huggingface.co" % p["endpoint"])
    client = HubClient(p["endpoint"], p["token"], timeout=p["timeout"])
    url = client.revision_url(p["repo_id"], p["revision"])
    try:
        sha = client.resolve_revision(p["repo_id"], p["revision"])
    except HubError as exc:
        module.fail_json(msg="%s: %s" % (url, exc), url=url, status=exc.status)
    module.exit_json(changed=False, commit=sha, url=url, status=200)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ("repo_id", "path")), ("state", "planned", ("path",)),
                     ("state", "resolved", ("repo_id",))],
        required_one_of=[("repo_id", "listing")],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "resolved":
        resolved(module, p)
    root = p["path"]
    if p["listing"] is not None and p["state"] != "planned":
        module.fail_json(msg="listing is given, so the Hub is not asked and nothing can be downloaded; "
                         "use state=planned with listing, or leave listing out")
    if not os.path.isabs(root):
        module.fail_json(msg="path is %r; expected an absolute directory" % root)
    if os.path.lexists(root) and not os.path.isdir(root):
        module.fail_json(msg="%s exists and is not a directory; expected the model directory" % root)
    if not p["endpoint"].startswith(("https://", "http://")):
        module.fail_json(msg="endpoint is %r; expected an http(s) URL such as https://huggingface.co" % p["endpoint"])
    listing = p["listing"]
    if listing is not None and (not isinstance(listing.get("files"), (list, dict)) or not listing.get("commit")):
        module.fail_json(msg="listing must hold commit and files, as returned by an earlier hf_snapshot run "
                         "(or the files of a weights manifest)")
    client = HubClient(p["endpoint"], p["token"], timeout=p["timeout"])
    dry = module.check_mode or p["state"] == "planned"
    progress = None
    if p["progress_file"] and not dry:
        progress = ProgressFile(p["progress_file"], "weights", every=writer_interval(p["progress_interval"]),
                                abandon_after=abandon_after(p["progress_interval"]))
    try:
        if not dry:
            os.makedirs(root, mode=0o755, exist_ok=True)
        result = snapshot(client, p["repo_id"], p["revision"], root, p["allow_patterns"], p["ignore_patterns"],
                          check_mode=dry, listing=listing, progress=progress)
    except ProgressAbandoned as exc:
        module.fail_json(msg="the download into %s: %s" % (root, exc))
    except HubError as exc:
        module.fail_json(msg="%s: %s" % (p["repo_id"] or root, exc))
    except OSError as exc:
        module.fail_json(msg="cannot write the weights under %s: %s" % (root, exc))
    if p["state"] == "planned":
        result["changed"] = False
    result["extra"] = extra_files(root, [f["path"] for f in result["files"]]) if os.path.isdir(root) else []
    module.exit_json(**result)


if __name__ == "__main__":
    main()
