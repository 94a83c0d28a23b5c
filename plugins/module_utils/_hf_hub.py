# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Download a snapshot of a Hugging Face Hub model repository into a plain
directory, speaking the Hub's HTTP API as ``huggingface_hub`` does, with the
standard library only (nodes have a plain python3).

The API used:

- ``GET {endpoint}/api/models/{repo}/revision/{revision}`` resolves a branch,
  tag or commit to the commit ``sha``.
- ``GET {endpoint}/api/models/{repo}/tree/{sha}?recursive=true&expand=false``
  lists every file with its ``size``, its git blob ``oid`` and, for files kept
  in LFS, ``lfs: {oid: <sha256>, size, pointerSize}``; long listings continue
  at the URL of the ``Link: <...>; rel="next"`` header.
- ``GET {endpoint}/{repo}/resolve/{sha}/{path}`` serves a file, LFS files
  through a redirect to a content host. ``Range: bytes=N-`` continues a
  partial download.

Every request carries ``Authorization: Bearer <token>`` when a token is set;
the header is dropped when a redirect leaves the endpoint's host, as
``requests`` does, since the content host gets a signed URL instead.

A file is written to ``<dir>/.cache/dgxspark/download/<path>.incomplete`` and
moved into place once its size and digest match the listing: the SHA-256 of
the LFS object, or the git blob SHA-1 of a file kept in git. A rerun continues
an ``.incomplete`` file with a Range request. What was verified is recorded
in ``<dir>/.cache/dgxspark/snapshot.json`` with each file's size, mtime, ctime
and inode, so a rerun over unchanged files reads only their metadata.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import time
from urllib import error as urlerror
from urllib import parse as urlparse
from urllib import request as urlrequest

STATE_DIR = os.path.join(".cache", "dgxspark")
STATE_FILE = os.path.join(STATE_DIR, "snapshot.json")
DOWNLOAD_DIR = os.path.join(STATE_DIR, "download")
INCOMPLETE_SUFFIX = ".incomplete"
STATE_VERSION = 1
CHUNK_BYTES = 4 * 1024 * 1024
USER_AGENT = "dgxspark.cluster-hf_snapshot/1"

_HEX40 = re.compile(r"\A[0-9a-f]{40}\Z")
_HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


class HubError(Exception):
    """Raised with a message that says what was asked, what came back and what to change."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------ HTTP


class _SameHostAuthRedirect(urlrequest.HTTPRedirectHandler):
    """Follow redirects, keeping the Authorization header only on the original host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlparse.urlsplit(newurl).netloc != urlparse.urlsplit(req.full_url).netloc:
            for name in list(new.headers):
                if name.lower() == "authorization":
                    del new.headers[name]
        return new


def build_opener():
    return urlrequest.build_opener(_SameHostAuthRedirect())


class HubClient:
    """The few Hub calls a snapshot download needs."""

    def __init__(self, endpoint, token=None, timeout=60, opener=None):
        self.endpoint = endpoint.rstrip("/")
        self._token = token or None
        self.timeout = timeout
        self._opener = opener or build_opener()

    def _headers(self, extra=None):
        headers = {"User-Agent": USER_AGENT}
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        headers.update(extra or {})
        return headers

    def open(self, url, headers=None, what=None):
        """The response to a GET of O(url); HTTP errors become HubError naming O(what)."""
        req = urlrequest.Request(url, headers=self._headers(headers), method="GET")
        try:
            return self._opener.open(req, timeout=self.timeout)
        except urlerror.HTTPError as exc:
            status = exc.code
            code = exc.headers.get("X-Error-Code", "") if exc.headers else ""
            try:
                body = exc.read(2000).decode("utf-8", "replace")
            except OSError:
                body = ""
            exc.close()
            raise HubError(_http_message(what or url, status, code, body, bool(self._token)), status) from None
        except (urlerror.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise HubError("cannot reach %s for %s: %s; check model_weights_hf_endpoint and the node's route "
                           "to it" % (self.endpoint, what or url, reason)) from None

    def get_json(self, url, what):
        with self.open(url, {"Accept": "application/json"}, what) as resp:
            raw = resp.read()
            link = resp.headers.get("Link", "")
        try:
            return json.loads(raw.decode("utf-8")), link
        except ValueError:
            raise HubError("%s: the answer from %s is not JSON" % (what, url)) from None

    def url(self, *parts, query=None):
        path = "/".join(parts)
        return self.endpoint + "/" + path + ("?" + urlparse.urlencode(query) if query else "")

    def revision_url(self, repo_id, revision):
        return self.url("api", "models", repo_id, "revision", quote(revision))

    def resolve_revision(self, repo_id, revision):
        """The commit sha that O(revision) (branch, tag or sha) names."""
        url = self.revision_url(repo_id, revision)
        data, _link = self.get_json(url, "revision %s of %s" % (revision, repo_id))
        sha = data.get("sha") if isinstance(data, dict) else None
        if not isinstance(sha, str) or not _HEX40.match(sha):
            raise HubError("revision %s of %s: the Hub answered no commit sha (got %r)" % (revision, repo_id, sha))
        return sha

    def list_files(self, repo_id, sha):
        """Every file of the repository at commit O(sha), following the Link pagination."""
        url = self.url("api", "models", repo_id, "tree", quote(sha),
                       query={"recursive": "true", "expand": "false"})
        files, pages = [], 0
        while url:
            pages += 1
            if pages > 10000:
                raise HubError("the tree listing of %s did not end after 10000 pages" % repo_id)
            data, link = self.get_json(url, "the file list of %s at %s" % (repo_id, sha))
            if not isinstance(data, list):
                raise HubError("the file list of %s is a %s; expected a JSON array" % (repo_id, type(data).__name__))
            files.extend(parse_tree_entry(entry) for entry in data if isinstance(entry, dict)
                         and entry.get("type") == "file")
            url = next_link(link, url)
        return sorted(files, key=lambda f: f["path"])

    def file_url(self, repo_id, sha, relpath):
        return self.url(repo_id, "resolve", quote(sha), quote(relpath, safe="/"))


def quote(text, safe=""):
    return urlparse.quote(text, safe=safe)


def next_link(header, current):
    """The absolute URL of the ``rel="next"`` entry of a Link header, or None."""
    for part in (header or "").split(","):
        match = _LINK_NEXT.search(part)
        if match:
            return urlparse.urljoin(current, match.group(1))
    return None


def _http_message(what, status, code, body, has_token):
    detail = ""
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            detail = parsed["error"]
    except ValueError:
        detail = body.strip().splitlines()[0][:200] if body.strip() else ""
    text = "%s: HTTP %d%s%s" % (what, status, " " + code if code else "", " (%s)" % detail if detail else "")
    if status in (401, 403):
        text += ("; the token in model_weights_hf_token was refused or lacks access to this repository"
                 if has_token else "; the repository needs a token: set model_weights_hf_token (vault-encrypted)")
    elif status == 404:
        text += "; check model_weights_hf_repo_id and model_weights_hf_revision"
    return text


def parse_tree_entry(entry):
    """``{path, size, lfs_sha256 or None, blob_oid}`` of one file entry of the tree listing."""
    path = entry.get("path")
    size = entry.get("size")
    if not isinstance(path, str) or not path or not _is_int(size) or size < 0:
        raise HubError("the Hub listed a file entry without a path and size: %r" % (entry,))
    check_relpath(path)
    lfs = entry.get("lfs") or None
    sha256 = None
    if lfs is not None:
        sha256 = lfs.get("oid") if isinstance(lfs, dict) else None
        if not isinstance(sha256, str) or not _HEX64.match(sha256):
            raise HubError("the Hub listed %s as an LFS file without a sha256 oid: %r" % (path, lfs))
        if _is_int(lfs.get("size")):
            size = lfs["size"]
    oid = entry.get("oid")
    return {"path": path, "size": size, "sha256": sha256,
            "blob_oid": oid if isinstance(oid, str) and _HEX40.match(oid) else None}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_relpath(relpath):
    parts = relpath.split("/")
    if relpath.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in relpath:
        raise HubError("the Hub listed the path %r, which would leave the weights directory" % relpath)


def listing_files(files):
    """The files of a listing, from RV(files) of an earlier snapshot (a list, returned as it is) or from the
    ``files`` of a weights manifest (a mapping of path to ``{size, sha256}``, as written by weights_manifest),
    each then ``{path, size, sha256, blob_oid: None}``."""
    if isinstance(files, list):
        return files
    if not isinstance(files, dict):
        raise HubError("the listing's files are a %s; expected the list of an earlier hf_snapshot run or the "
                       "files mapping of a weights manifest" % type(files).__name__)
    listed = []
    for path, entry in sorted(files.items()):
        size = entry.get("size") if isinstance(entry, dict) else None
        if not isinstance(path, str) or not path or not _is_int(size) or size < 0:
            raise HubError("the listing's entry %r is %r; expected a path with a size" % (path, entry))
        check_relpath(path)
        sha256 = entry.get("sha256")
        listed.append({"path": path, "size": size,
                       "sha256": sha256 if isinstance(sha256, str) and _HEX64.match(sha256) else None,
                       "blob_oid": None})
    return listed


# -------------------------------------------------------------------- selection


def _expand(pattern):
    # A trailing "/" means the whole folder, as in huggingface_hub's filter_repo_objects.
    return pattern + "*" if pattern.endswith("/") else pattern


def select(files, allow_patterns=None, ignore_patterns=None):
    """The files matching one of O(allow_patterns) (all when empty) and none of O(ignore_patterns)."""
    allow = [_expand(p) for p in allow_patterns or []]
    ignore = [_expand(p) for p in ignore_patterns or []]
    return [
        f for f in files
        if (not allow or any(fnmatch.fnmatch(f["path"], p) for p in allow))
        and not any(fnmatch.fnmatch(f["path"], p) for p in ignore)
    ]


# ------------------------------------------------------------------------ digests


def expected_digest(entry):
    """``(kind, hex)`` that a downloaded file must match, or ``(None, None)``."""
    if entry.get("sha256"):
        return "sha256", entry["sha256"]
    if entry.get("blob_oid"):
        return "git-sha1", entry["blob_oid"]
    return None, None


def new_hasher(kind, size):
    if kind == "sha256":
        return hashlib.sha256()
    if kind == "git-sha1":
        hasher = hashlib.sha1()  # git's object id, not a security measure
        hasher.update(b"blob %d\0" % size)
        return hasher
    return None


def _feed(hasher, path, chunk_bytes):
    """Hash the whole file at O(path) into O(hasher)."""
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk_bytes)
            if not block:
                break
            hasher.update(block)


def file_digest(path, kind, size, chunk_bytes=CHUNK_BYTES):
    hasher = new_hasher(kind, size)
    if hasher is None:
        return None
    _feed(hasher, path, chunk_bytes)
    return hasher.hexdigest()


# ---------------------------------------------------------------------- state


def stat_key(st):
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}


def load_state(root):
    try:
        with open(os.path.join(root, STATE_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def save_state(root, files, repo_id, sha):
    path = os.path.join(root, STATE_FILE)
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    temp = path + ".tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump({"version": STATE_VERSION, "repo_id": repo_id, "commit": sha, "files": files}, handle,
                  indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(temp, path)


# ----------------------------------------------------------------------- plan


def incomplete_path(root, relpath):
    return os.path.join(root, DOWNLOAD_DIR, *relpath.split("/")) + INCOMPLETE_SUFFIX


def plan(root, files, state=None, hash_unknown=True, hash_fn=file_digest):
    """Which of O(files) must be fetched into O(root).

    A file is present when its size matches and, for a file with a known
    digest, the digest matches: taken from O(state) while size, mtime, ctime
    and inode are unchanged, computed otherwise (unless O(hash_unknown) is
    false, then a right-sized file counts as present, as for a space estimate).

    Returns ``{"present": [...], "fetch": [...], "state": new state entries,
    "bytes_to_fetch", "resume_bytes", "hashed_bytes"}``; each fetch entry gets
    ``reason`` (missing, size, digest) and ``partial`` (bytes already in its
    ``.incomplete`` file).
    """
    state = state or {}
    present, fetch, new_state = [], [], {}
    hashed = resume = 0
    for entry in files:
        rel = entry["path"]
        local = os.path.join(root, *rel.split("/"))
        kind, want = expected_digest(entry)
        reason = None
        try:
            st = os.stat(local)
        except FileNotFoundError:
            reason = "missing"
        else:
            if not os.path.isfile(local):
                raise HubError("%s is not a regular file; remove it so that %s can be downloaded" % (local, rel))
            if st.st_size != entry["size"]:
                reason = "size"
            elif kind:
                known = state.get(rel)
                if known and known.get("digest") == want and {k: known.get(k) for k in stat_key(st)} == stat_key(st):
                    new_state[rel] = known
                elif hash_unknown:
                    hashed += st.st_size
                    if hash_fn(local, kind, st.st_size) == want:
                        new_state[rel] = dict(stat_key(st), digest=want)
                    else:
                        reason = "digest"
        if reason is None:
            present.append(rel)
            continue
        partial = 0
        try:
            partial = os.stat(incomplete_path(root, rel)).st_size
        except FileNotFoundError:
            pass
        if partial > entry["size"]:
            partial = 0  # a leftover of another revision; it is restarted
        resume += partial
        fetch.append(dict(entry, reason=reason, partial=partial))
    return {
        "present": present,
        "fetch": fetch,
        "state": new_state,
        "bytes_to_fetch": sum(f["size"] - f["partial"] for f in fetch),
        "resume_bytes": resume,
        "hashed_bytes": hashed,
    }


# -------------------------------------------------------------------- download


def download_file(client, repo_id, sha, root, entry, chunk_bytes=CHUNK_BYTES, progress=None):
    """Fetch one file into its ``.incomplete`` path (continuing what is there), verify it, move it into place.

    Returns ``{"path", "bytes_received", "resumed_from", "stat"}``.
    """
    rel, size = entry["path"], entry["size"]
    kind, want = expected_digest(entry)
    temp = incomplete_path(root, rel)
    final = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(temp), mode=0o755, exist_ok=True)
    offset = 0
    if os.path.exists(temp):
        offset = os.path.getsize(temp)
        if offset > size:
            os.unlink(temp)
            offset = 0
    hasher = new_hasher(kind, size)
    if offset and hasher is not None:
        _feed(hasher, temp, chunk_bytes)
    received = 0
    resumed_from = offset
    if offset < size or size == 0:
        headers = {"Range": "bytes=%d-" % offset} if offset else {}
        url = client.file_url(repo_id, sha, rel)
        try:
            resp = client.open(url, headers, "%s of %s at %s" % (rel, repo_id, sha))
        except HubError as exc:
            if exc.status == 416 and offset:
                resp = None  # the partial file already holds everything
            else:
                raise
        if resp is not None:
            with resp:
                status = getattr(resp, "status", None) or resp.getcode()
                mode = "ab"
                if offset and status != 206:
                    # The server ignored the Range: start over.
                    mode, resumed_from, hasher = "wb", 0, new_hasher(kind, size)
                with open(temp, mode) as out:
                    while True:
                        block = resp.read(chunk_bytes)
                        if not block:
                            break
                        out.write(block)
                        received += len(block)
                        if hasher is not None:
                            hasher.update(block)
                        if progress:
                            progress(rel, received)
                    out.flush()
                    os.fsync(out.fileno())
    got = os.path.getsize(temp)
    if got != size:
        raise HubError("%s: downloaded %d bytes, the Hub listed %d; the partial file %s is kept and the next run "
                       "continues it" % (rel, got, size, temp))
    if hasher is not None and hasher.hexdigest() != want:
        os.unlink(temp)
        raise HubError("%s: %s %s of the download, the Hub listed %s; the download was removed, run again to fetch "
                       "it anew" % (rel, kind, hasher.hexdigest(), want))
    os.makedirs(os.path.dirname(final) or root, mode=0o755, exist_ok=True)
    os.chmod(temp, 0o644)
    os.replace(temp, final)
    return {"path": rel, "bytes_received": received, "resumed_from": resumed_from,
            "stat": dict(stat_key(os.stat(final)), digest=want) if want else None}


def snapshot(client, repo_id, revision, root, allow_patterns=None, ignore_patterns=None, check_mode=False,
             listing=None, now=time.time, progress=None):
    """Plan, and unless O(check_mode) fetch, the snapshot of O(repo_id) at O(revision) into O(root).

    O(listing) (``{"commit", "files"}`` from an earlier call) skips the Hub: only a plan is made.
    O(progress) (a ``_progress.ProgressFile``) is told the bytes to fetch and the bytes received so far.
    """
    if listing is None:
        sha = client.resolve_revision(repo_id, revision)
        files = select(client.list_files(repo_id, sha), allow_patterns, ignore_patterns)
        if not files:
            raise HubError("no file of %s at %s matches model_weights_allow_patterns %s and "
                           "model_weights_ignore_patterns %s"
                           % (repo_id, sha, allow_patterns or [], ignore_patterns or []))
    else:
        sha, files = listing["commit"], listing_files(listing["files"])
    state = load_state(root)
    planned = plan(root, files, state, hash_unknown=listing is None)
    result = {
        "commit": sha,
        "files": files,
        "file_count": len(files),
        "total_bytes": sum(f["size"] for f in files),
        "to_fetch": [f["path"] for f in planned["fetch"]],
        "bytes_to_fetch": planned["bytes_to_fetch"],
        "resume_bytes": planned["resume_bytes"],
        "hashed_bytes": planned["hashed_bytes"],
        "fetched": [],
        "bytes_received": 0,
        "changed": bool(planned["fetch"]),
    }
    if check_mode or listing is not None:
        return result
    new_state = dict(planned["state"])
    started = now()
    report = None
    if progress is not None:
        # The rate counts from the first byte asked for, not from the plan's hashing.
        progress.total, progress.started = planned["bytes_to_fetch"], progress.clock()
        progress.update(done=0, force=True)

        def report(_rel, received):
            progress.update(done=result["bytes_received"] + received)
    try:
        for entry in planned["fetch"]:
            done = download_file(client, repo_id, sha, root, entry, progress=report)
            result["fetched"].append({"path": done["path"], "bytes_received": done["bytes_received"],
                                      "resumed_from": done["resumed_from"]})
            result["bytes_received"] += done["bytes_received"]
            if done["stat"]:
                new_state[done["path"]] = done["stat"]
        if progress is not None:
            progress.finish(done=result["bytes_received"])
    finally:
        if planned["fetch"] or new_state != state:
            save_state(root, new_state, repo_id, sha)
    result["seconds"] = round(now() - started, 3)
    return result
