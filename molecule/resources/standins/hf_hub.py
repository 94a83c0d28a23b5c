# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for the Hugging Face Hub HTTP API, for the test harness only.

Serves ONE directory as a model repository at one fixed commit sha, with the
JSON shapes of the real Hub:

- ``GET /api/models/{repo}/revision/{rev}`` (rev: the sha or ``main``):
  model info with ``sha`` and ``siblings``.
- ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=true``: entries
  ``{type, oid, size, path}``, files at or above ``--lfs-threshold`` bytes or
  named like ``*.safetensors`` also with ``lfs: {oid, size, pointerSize}``;
  pages of ``--page-size`` entries joined by ``Link: <...>; rel="next"``.
- ``GET|HEAD /{repo}/resolve/{rev}/{path}``: files kept in git are served
  directly (``ETag`` the git blob sha1); LFS files answer ``302`` to a
  content URL signed for the file, as the Hub redirects to its CDN
  (``X-Linked-Etag``, ``X-Linked-Size``). Both honour ``Range: bytes=N-[M]``.

Every API and resolve request must carry ``Authorization: Bearer <token>``;
the token is read from the file given with ``--token-file``, never from argv.
Each request is logged as one line (method, path, status, bytes sent, range)
and no header values, so a test can count downloads.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib import parse as urlparse

DEFAULT_SHA = "5d3c2b1a0f9e8d7c6b5a49382716f5e4d3c2b1a0"
LFS_EXTENSIONS = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")
CHUNK = 1024 * 1024


def git_blob_sha1(data_path, size):
    digest = hashlib.sha1()  # git's object id
    digest.update(b"blob %d\0" % size)
    with open(data_path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_of(data_path):
    digest = hashlib.sha256()
    with open(data_path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def pointer_text(sha256, size):
    return "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha256, size)


class Repo:
    """The served directory, scanned once at start."""

    def __init__(self, root, repo_id, sha, lfs_threshold):
        self.root, self.repo_id, self.sha = os.path.abspath(root), repo_id, sha
        self.files, self.dirs = {}, set()
        for top, dirs, names in os.walk(self.root):
            dirs.sort()
            rel_top = os.path.relpath(top, self.root).replace(os.sep, "/")
            if rel_top != ".":
                self.dirs.add(rel_top)
            for name in sorted(names):
                rel = name if rel_top == "." else rel_top + "/" + name
                full = os.path.join(top, name)
                size = os.path.getsize(full)
                entry = {"type": "file", "size": size, "path": rel}
                if size >= lfs_threshold or rel.endswith(LFS_EXTENSIONS):
                    sha256 = sha256_of(full)
                    pointer = pointer_text(sha256, size).encode()
                    entry["oid"] = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
                    entry["lfs"] = {"oid": sha256, "size": size, "pointerSize": len(pointer)}
                else:
                    entry["oid"] = git_blob_sha1(full, size)
                self.files[rel] = entry

    def tree(self, prefix, recursive):
        entries = []
        for rel in sorted(self.dirs):
            if self._under(rel, prefix, recursive):
                entries.append({"type": "directory", "oid": hashlib.sha1(rel.encode()).hexdigest(), "size": 0,
                                "path": rel})
        for rel, entry in sorted(self.files.items()):
            if self._under(rel, prefix, recursive):
                entries.append(dict(entry))
        entries.sort(key=lambda e: e["path"])
        return entries

    @staticmethod
    def _under(rel, prefix, recursive):
        base = prefix + "/" if prefix else ""
        if not rel.startswith(base) or rel == prefix:
            return False
        return recursive or "/" not in rel[len(base):]


class Handler(BaseHTTPRequestHandler):
    server_version = "hf-hub-standin/1"
    protocol_version = "HTTP/1.1"

    # -- plumbing

    def log_message(self, fmt, *args):  # the default logs to stderr with the client address; keep one line
        pass

    def _log(self, status, sent, note=""):
        line = "%s %s %s %d %s%s\n" % (
            time.strftime("%Y-%m-%dT%H:%M:%S"), self.command,
            urlparse.urlsplit(self.path).path, status, sent, " " + note if note else "")
        with self.server.log_lock:
            self.server.log.write(line)
            self.server.log.flush()

    def _send_json(self, status, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._log(status, len(data) if self.command != "HEAD" else 0)

    def _error(self, status, code, message):
        self._send_json(status, {"error": message}, {"X-Error-Code": code} if code else None)

    def _authorized(self):
        header = self.headers.get("Authorization", "")
        given = header[len("Bearer "):] if header.startswith("Bearer ") else ""
        return bool(given) and hmac.compare_digest(given.encode(), self.server.token.encode())

    # -- routes

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        url = urlparse.urlsplit(self.path)
        path = urlparse.unquote(url.path)
        query = urlparse.parse_qs(url.query)
        repo = self.server.repo
        if path.startswith("/_cdn/"):
            return self._cdn(path[len("/_cdn/"):], query)
        if not self._authorized():
            return self._error(401, "", "Invalid credentials in Authorization header")
        api_prefix = "/api/models/%s/" % repo.repo_id
        if path.startswith(api_prefix):
            rest = path[len(api_prefix):]
            kind, _sep, rest = rest.partition("/")
            rev, _sep, sub = rest.partition("/")
            if rev not in (repo.sha, "main"):
                return self._error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            if kind == "revision":
                return self._info(query)
            if kind == "tree":
                return self._tree(url, sub.strip("/"), query)
            return self._error(404, "", "Sorry, we can't find the page you are looking for.")
        resolve_prefix = "/%s/resolve/" % repo.repo_id
        if path.startswith(resolve_prefix):
            rev, _sep, rel = path[len(resolve_prefix):].partition("/")
            if rev not in (repo.sha, "main"):
                return self._error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            return self._resolve(rel)
        if path.startswith("/api/models/") or "/resolve/" in path:
            return self._error(404, "RepoNotFound", "Repository not found")
        return self._error(404, "", "Sorry, we can't find the page you are looking for.")

    def _info(self, query):
        repo = self.server.repo
        blobs = query.get("blobs", ["false"])[0] in ("true", "1")
        siblings = []
        for rel, entry in sorted(repo.files.items()):
            sibling = {"rfilename": rel}
            if blobs:
                sibling.update(size=entry["size"], blobId=entry["oid"])
                if "lfs" in entry:
                    sibling["lfs"] = {"sha256": entry["lfs"]["oid"], "size": entry["size"],
                                      "pointerSize": entry["lfs"]["pointerSize"]}
            siblings.append(sibling)
        self._send_json(200, {"_id": repo.sha[:24], "id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.sha,
                              "private": True, "gated": False, "disabled": False, "tags": [],
                              "lastModified": "2026-01-01T00:00:00.000Z", "siblings": siblings})

    def _tree(self, url, sub, query):
        repo = self.server.repo
        recursive = query.get("recursive", ["false"])[0] in ("true", "1", "True")
        if sub and sub not in repo.dirs:
            return self._error(404, "EntryNotFound", "%s does not exist on %s" % (sub, repo.sha))
        entries = repo.tree(sub, recursive)
        start = int(query.get("cursor", ["0"])[0] or 0)
        page = entries[start:start + self.server.page_size]
        headers = {}
        if start + self.server.page_size < len(entries):
            params = {k: v[0] for k, v in query.items()}
            params["cursor"] = str(start + self.server.page_size)
            headers["Link"] = '<%s://%s%s?%s>; rel="next"' % (
                "http", self.headers.get("Host", "localhost"), url.path, urlparse.urlencode(params))
        self._send_json(200, page, headers)

    def _resolve(self, rel):
        repo = self.server.repo
        entry = repo.files.get(rel)
        if entry is None:
            return self._error(404, "EntryNotFound", "%s does not exist on %s" % (rel, repo.sha))
        common = {"X-Repo-Commit": repo.sha}
        if "lfs" in entry:
            sha256 = entry["lfs"]["oid"]
            sig = hmac.new(self.server.token.encode(), sha256.encode(), hashlib.sha256).hexdigest()
            location = "/_cdn/%s?%s" % (sha256, urlparse.urlencode({"sig": sig}))
            self.send_response(302)
            for key, value in dict(common, **{"Location": location, "X-Linked-Etag": '"%s"' % sha256,
                                              "X-Linked-Size": str(entry["size"]), "ETag": '"%s"' % entry["oid"],
                                              "Content-Length": "0"}).items():
                self.send_header(key, value)
            self.end_headers()
            return self._log(302, 0)
        return self._serve_file(rel, dict(common, ETag='"%s"' % entry["oid"]))

    def _cdn(self, sha256, query):
        repo = self.server.repo
        rel = next((r for r, e in repo.files.items() if e.get("lfs", {}).get("oid") == sha256), None)
        expected = hmac.new(self.server.token.encode(), sha256.encode(), hashlib.sha256).hexdigest()
        if rel is None or not hmac.compare_digest(query.get("sig", [""])[0], expected):
            return self._error(403, "", "Request signature does not match")
        return self._serve_file(rel, {"ETag": '"%s"' % sha256})

    def _serve_file(self, rel, headers):
        full = os.path.join(self.server.repo.root, *rel.split("/"))
        size = os.path.getsize(full)
        start, end, status = 0, size - 1, 200
        range_header = self.headers.get("Range")
        if range_header:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header.strip())
            if not match or int(match.group(1)) >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return self._log(416, 0, "range=%s" % range_header)
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            status = 206
        length = end - start + 1 if size else 0
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        sent = 0
        if self.command != "HEAD":
            with open(full, "rb") as handle:
                handle.seek(start)
                remaining = length
                try:
                    while remaining > 0:
                        block = handle.read(min(CHUNK, remaining))
                        if not block:
                            break
                        self.wfile.write(block)
                        sent += len(block)
                        remaining -= len(block)
                        if self.server.throttle:
                            time.sleep(len(block) / self.server.throttle)
                except (BrokenPipeError, ConnectionResetError):
                    pass
        self._log(status, sent, "file=%s%s" % (rel, " range=%d-%d" % (start, end) if status == 206 else ""))


def make_server(root, repo_id, token, bind="127.0.0.1", port=8080, sha=DEFAULT_SHA, lfs_threshold=1024 * 1024,
                page_size=50, log=None, throttle=0):
    server = ThreadingHTTPServer((bind, port), Handler)
    server.daemon_threads = True
    server.repo = Repo(root, repo_id, sha, lfs_threshold)
    server.token = token
    server.page_size = page_size
    server.log = log or sys.stdout
    server.log_lock = threading.Lock()
    server.throttle = throttle
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the directory served as the repository")
    parser.add_argument("--repo-id", required=True, help="namespace/name")
    parser.add_argument("--token-file", required=True, help="file holding the one accepted token")
    parser.add_argument("--sha", default=DEFAULT_SHA, help="the fixed commit sha (40 hex)")
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--lfs-threshold", type=int, default=1024 * 1024,
                        help="files of this size or larger are LFS files (besides *.safetensors and the like)")
    parser.add_argument("--page-size", type=int, default=50, help="tree entries per page")
    parser.add_argument("--log-file", help="append the request log here instead of stdout")
    parser.add_argument("--throttle-bytes-per-second", type=int, default=0,
                        help="slow file bodies down, to interrupt a download midway in a test")
    args = parser.parse_args(argv)
    with open(args.token_file, encoding="utf-8") as handle:
        token = handle.read().strip()
    if not token:
        parser.error("the token file %s is empty" % args.token_file)
    log = open(args.log_file, "a", encoding="utf-8") if args.log_file else sys.stdout  # noqa: SIM115
    server = make_server(args.root, args.repo_id, token, args.bind, args.port, args.sha, args.lfs_threshold,
                         args.page_size, log, args.throttle_bytes_per_second)
    log.write("serving %s as %s at %s on %s:%d\n" % (args.root, args.repo_id, args.sha, args.bind, args.port))
    log.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
