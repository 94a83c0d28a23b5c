# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ask an image registry whether it holds a digest, over the OCI distribution API, with the
standard library only (a node may not have Docker yet when the preflight asks).

- ``HEAD {base}/v2/{name}/manifests/{digest}`` with the manifest and index media types in
  ``Accept``: 200 means the registry holds the digest, 404 that it does not.
- A 401 with ``WWW-Authenticate: Bearer realm="...",service="...",scope="..."`` is answered as
  ``docker pull`` does without credentials: ``GET {realm}?service=...&scope=...`` for an
  anonymous token (``token`` or ``access_token`` of the JSON answer), then the same HEAD with
  ``Authorization: Bearer <token>``.
- A registry that answers HEAD with 405 is asked with GET instead.

Which scheme a registry speaks follows the Docker daemon: HTTPS, except for a registry listed
in the daemon's ``insecure-registries`` (a host[:port] or a CIDR of its address) and for
loopback addresses, which are asked over HTTPS without certificate checks first and over
plain HTTP when that fails. A reference without a registry is Docker Hub's
(``registry-1.docker.io``, one-component names under ``library/``).
"""

from __future__ import annotations

import ipaddress
import json
import re
import ssl
from urllib import error as urlerror
from urllib import parse as urlparse
from urllib import request as urlrequest

from ansible_collections.dgxspark.cluster.plugins.module_utils._image import mirror_ref, parse_ref

DOCKER_HUB = "registry-1.docker.io"
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
USER_AGENT = "dgxspark.cluster-engine_image/1"
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(Exception):
    """Raised with a message naming the URL asked and what came back; O(status) is None when the
    registry could not be reached at all."""

    def __init__(self, message, url, status=None):
        super().__init__(message)
        self.url = url
        self.status = status


def _host_of(registry):
    return registry.partition(":")[0]


def is_insecure(registry, insecure_registries=()):
    """True when the Docker daemon would accept plain HTTP from O(registry) (host[:port])."""
    host = _host_of(registry)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if host == "localhost" or (address is not None and address.is_loopback):
        return True
    for entry in insecure_registries or ():
        entry = str(entry).strip().rstrip("/")
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        if entry in (registry, host):
            return True
        if address is not None and "/" in entry:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


def manifest_location(ref, mirror=None):
    """``(registry, repository name, digest)`` that a pull of O(ref) (through O(mirror)) asks."""
    parts = parse_ref(mirror_ref(ref, mirror))
    registry, name = parts["registry"], parts["path"]
    if registry is None or registry in ("docker.io", "index.docker.io"):
        registry = DOCKER_HUB
        if "/" not in name:
            name = "library/" + name
    return registry, name, parts["digest"]


def parse_challenge(header):
    """``{realm, service, scope}`` of a ``Bearer`` challenge, or None for any other scheme."""
    scheme, _sep, params = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return dict(_CHALLENGE_PARAM.findall(params))


class RegistryClient:
    """HEAD/GET of one manifest, with Docker's anonymous token dance."""

    def __init__(self, timeout=30, opener=None, insecure_opener=None):
        self.timeout = timeout
        self._opener = opener or urlrequest.build_opener()
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        self._insecure_opener = insecure_opener or urlrequest.build_opener(urlrequest.HTTPSHandler(context=unverified))

    def _request(self, url, method, headers, insecure):
        req = urlrequest.Request(url, headers=dict(headers, **{"User-Agent": USER_AGENT}), method=method)
        opener = self._insecure_opener if insecure else self._opener
        try:
            with opener.open(req, timeout=self.timeout) as resp:
                return resp.status, resp.headers, resp.read(65536) if method == "GET" else b""
        except urlerror.HTTPError as exc:
            body = b""
            try:
                body = exc.read(2000)
            except OSError:
                pass
            exc.close()
            return exc.code, exc.headers, body

    def _token(self, challenge, url, insecure):
        realm = challenge.get("realm")
        if not realm:
            raise RegistryError("%s asked for a token without naming its realm" % url, url, 401)
        query = {key: challenge[key] for key in ("service", "scope") if challenge.get(key)}
        token_url = realm + ("&" if "?" in realm else "?") + urlparse.urlencode(query) if query else realm
        try:
            status, _headers, body = self._request(token_url, "GET", {"Accept": "application/json"}, insecure)
        except (urlerror.URLError, OSError) as exc:
            raise RegistryError("cannot reach the token service %s: %s" % (token_url, getattr(exc, "reason", exc)),
                                token_url) from None
        if status != 200:
            raise RegistryError("the token service %s answered HTTP %d to an anonymous request; the repository "
                                "is private or the registry needs credentials (docker login on the node)"
                                % (token_url, status), token_url, status)
        try:
            data = json.loads(body.decode("utf-8"))
        except ValueError:
            data = None
        token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError("the token service %s answered no token" % token_url, token_url, status)
        return token

    def _ask(self, url, insecure):
        headers = {"Accept": ", ".join(MANIFEST_TYPES)}
        status, answer, _body = self._request(url, "HEAD", headers, insecure)
        if status == 405:
            status, answer, _body = self._request(url, "GET", headers, insecure)
        if status == 401:
            challenge = parse_challenge(answer.get("WWW-Authenticate", "") if answer else "")
            if challenge is None:
                raise RegistryError("%s answered HTTP 401 without a Bearer challenge; the registry needs credentials "
                                    "(docker login on the node)" % url, url, 401)
            headers["Authorization"] = "Bearer " + self._token(challenge, url, insecure)
            status, answer, _body = self._request(url, "HEAD", headers, insecure)
            if status == 405:
                status, answer, _body = self._request(url, "GET", headers, insecure)
        return status

    def manifest_exists(self, ref, mirror=None, insecure_registries=()):
        """``{url, status, exists}`` for the manifest a pull of O(ref) fetches; RegistryError when the
        registry cannot be reached or answers neither 200 nor 404."""
        registry, name, digest = manifest_location(ref, mirror)
        path = "/v2/%s/manifests/%s" % (name, digest)
        insecure = is_insecure(registry, insecure_registries)
        schemes = ["https", "http"] if insecure else ["https"]
        failures = []
        for scheme in schemes:
            url = "%s://%s%s" % (scheme, registry, path)
            try:
                status = self._ask(url, insecure)
            except (urlerror.URLError, OSError) as exc:
                failures.append("%s: %s" % (url, getattr(exc, "reason", exc)))
                continue
            if status in (200, 404):
                return {"url": url, "status": status, "exists": status == 200}
            raise RegistryError("%s answered HTTP %d; expected 200 (the registry holds the digest) or 404"
                                % (url, status), url, status)
        raise RegistryError("cannot reach the registry %s (%s)" % (registry, "; ".join(failures)),
                            "%s://%s%s" % (schemes[-1], registry, path))
