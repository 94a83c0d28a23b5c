# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Paths shared by the unit tests, and loading of the test harness stand-ins
(molecule/resources/standins is not a package)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib import parse as urlparse

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDINS = REPO_ROOT / "molecule" / "resources" / "standins"
HARNESS_TESTS = REPO_ROOT / "molecule" / "resources" / "tests"
FIXTURES = REPO_ROOT / "tests" / "unit" / "fixtures"


def load_cx7_standin():
    spec = importlib.util.spec_from_file_location("cx7_sysfs_standin", STANDINS / "cx7_sysfs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_collection_install():
    """molecule/resources/tests/collection_install.py: the offline build and install of the collection."""
    spec = importlib.util.spec_from_file_location("collection_install", HARNESS_TESTS / "collection_install.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_result(main, capsys, params):
    """Run a module's O(main) with O(params) as its arguments, as Ansible does: the result it
    printed and its exit code (1 when it failed)."""
    with patch_module_args(params), pytest.raises(SystemExit) as caught:
        main()
    return json.loads(capsys.readouterr().out), caught.value.code


def assert_filter_error_matches(error_type, function_call, filter_call):
    """O(filter_call) fails as O(function_call), the function behind the filter, does: an
    AnsibleFilterError with the message of the function's O(error_type), which it carries.
    Returns the message."""
    with pytest.raises(error_type) as expected:
        function_call()
    with pytest.raises(AnsibleFilterError) as raised:
        filter_call()
    assert raised.value.message == str(expected.value)
    assert isinstance(raised.value.orig_exc, error_type)
    return raised.value.message


def load_hub_standin():
    spec = importlib.util.spec_from_file_location("hf_hub_standin", STANDINS / "hf_hub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def served_hub(root, files, repo, token):
    """The Hub stand-in serving O(files) (relative path -> bytes, written under O(root)) as
    O(repo) on the loopback, two entries per listing page; the server has C(endpoint) and
    C(log_text()) (its request log)."""
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    log = io.StringIO()
    server = load_hub_standin().make_server(str(root), repo, token, port=0, page_size=2, log=log)
    server.endpoint = "http://127.0.0.1:%d" % server.server_address[1]
    server.log_text = log.getvalue
    with serving(server):
        yield server


@contextlib.contextmanager
def serving(server, poll_interval=0.5):
    """O(server) answering on a thread of its own while the block runs, closed after it."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_interval}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


_TEMPLATE_ROLE_VARS = textwrap.dedent(
    """
    import json, sys
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
    _AnsibleCollectionFinder(paths=[sys.argv[1] + "/collections"])._install()
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    loader = DataLoader()
    role = {}
    for part in ("defaults", "vars"):
        role.update(loader.load_from_file(sys.argv[1] + "/roles/%s/%s/main.yml" % (sys.argv[2], part),
                                          trusted_as_template=True))
    # As a play sets them for a role's task: dgxspark.cluster.role_template finds the role's templates.
    role["role_path"] = sys.argv[1] + "/roles/" + sys.argv[2]
    role["ansible_search_path"] = [role["role_path"]]
    results = []
    for variables, expressions in json.loads(sys.stdin.read()):
        templar = Templar(loader=loader, variables=dict(role, **variables))
        out = {}
        for name, expression in expressions.items():
            try:
                out[name] = templar.template(trust_as_template(expression))
            except Exception as exc:
                out[name] = "ERROR %s: %s" % (type(exc).__name__, exc)
        results.append(out)
    print(json.dumps(results))
    """
)


def template_role_vars(role, cases, cwd=None):
    """Template a role's defaults and vars as ansible-core does in a play: for each
    case (variables, {name: expression}) the expressions' values, or "ERROR ..."
    where one fails. One subprocess with the collection loader installed, so the
    role's dgxspark.cluster.* filters resolve; every case in one start (about 1.5 s).
    O(cwd) is the working directory of that process, as ansible-playbook's would be."""
    done = subprocess.run(
        [sys.executable, "-c", _TEMPLATE_ROLE_VARS, str(REPO_ROOT), role], input=json.dumps(cases),
        capture_output=True, text=True, check=False, cwd=cwd,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


REGISTRY_DIGEST_HELD = "sha256:" + "4f1c9a0e7b2d" * 5 + "9a3e"
REGISTRY_TOKEN = "anonymous-pull-token"


class _FakeRegistry(BaseHTTPRequestHandler):
    """``/v2/dgxspark/vllm/manifests/<digest>`` and ``/token``; what it was asked goes to
    ``server.requests``."""

    def log_message(self, *args):
        pass

    def _answer(self, status, headers=None, body=b""):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        server = self.server
        url = urlparse.urlsplit(self.path)
        server.requests.append((self.command, url.path, dict(self.headers)))
        if url.path == "/token":
            query = urlparse.parse_qs(url.query)
            if query != {"service": ["fake-registry"], "scope": ["repository:dgxspark/vllm:pull"]}:
                return self._answer(400)
            return self._answer(200, {"Content-Type": "application/json"}, json.dumps({"token": REGISTRY_TOKEN}).encode())
        if self.command == "HEAD" and server.no_head:
            return self._answer(405)
        if server.auth and self.headers.get("Authorization") != "Bearer " + REGISTRY_TOKEN:
            challenge = 'Bearer realm="%s/token",service="fake-registry",scope="repository:dgxspark/vllm:pull"' % (
                server.base)
            return self._answer(401, {"WWW-Authenticate": challenge})
        if server.fail:
            return self._answer(server.fail)
        prefix = "/v2/dgxspark/vllm/manifests/"
        if url.path == prefix + REGISTRY_DIGEST_HELD:
            return self._answer(200, {"Docker-Content-Digest": REGISTRY_DIGEST_HELD,
                                      "Content-Type": "application/vnd.oci.image.index.v1+json"}, b"{}")
        return self._answer(404, {"Content-Type": "application/json"}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')

    do_GET = do_HEAD = _handle


@contextlib.contextmanager
def served_registry(auth=True, no_head=False, fail=None):
    """A registry on the loopback holding dgxspark/vllm at REGISTRY_DIGEST_HELD only: 401 with a Bearer
    challenge until the anonymous token of its /token comes along (O(auth)), 405 to HEAD (O(no_head)),
    or O(fail) as the status of every manifest request; C(address), C(base) and C(requests)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeRegistry)
    server.auth, server.no_head, server.fail, server.requests = auth, no_head, fail, []
    server.address = "127.0.0.1:%d" % server.server_address[1]
    server.base = "http://" + server.address
    with serving(server, poll_interval=0.05):
        yield server


def file_tree(root):
    """Every path under O(root) with its kind, mode, inode and content (or link target): two
    calls compare equal only when nothing under root was written, replaced or moved."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                seen[path] = ("link", st.st_ino, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                seen[path] = ("dir", stat.S_IMODE(st.st_mode), st.st_ino)
            else:
                with open(path, "rb") as handle:
                    seen[path] = ("file", stat.S_IMODE(st.st_mode), st.st_ino, handle.read())
    return seen
