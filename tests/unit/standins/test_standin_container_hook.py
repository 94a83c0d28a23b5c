# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The nvidia-container-runtime-hook stand-in and the apt fixture builder of the simulation."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import json
import shutil
import subprocess

import pytest

from unit_support import REPO_ROOT

FIXTURE = REPO_ROOT / "molecule" / "resources" / "apt_fixture"


def load(path, name):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture
def hook(tmp_path, monkeypatch):
    module = load(FIXTURE / "files" / "nvidia-container-runtime-hook", "standin_container_hook")
    host = tmp_path / "host"
    (host / "bin").mkdir(parents=True)
    (host / "bin" / "nvidia-smi").write_text("#!/bin/sh\necho stand-in\n")
    (host / "bin" / "nvidia-smi").chmod(0o755)
    monkeypatch.setattr(module, "COPIES", (
        (str(host / "bin" / "nvidia-smi"), "usr/bin/nvidia-smi"),
        (str(host / "gpu.json"), "etc/dgxspark-standin/gpu.json"),
    ))
    return module, host


def bundle_with_root(tmp_path, root):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": root}}))
    return bundle


@pytest.mark.parametrize("relative", [True, False])
def test_prestart_copies_nvidia_smi_into_the_rootfs(hook, tmp_path, monkeypatch, relative):
    module, _host = hook
    rootfs = tmp_path / "bundle" / "rootfs"
    bundle = bundle_with_root(tmp_path, "rootfs" if relative else str(rootfs))
    rootfs.mkdir()
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"bundle": str(bundle), "pid": 1})))
    assert module.main(["prestart"]) == 0
    copied = rootfs / "usr" / "bin" / "nvidia-smi"
    assert copied.read_text() == "#!/bin/sh\necho stand-in\n"
    assert copied.stat().st_mode & 0o111
    assert not (rootfs / "etc" / "dgxspark-standin").exists()


def test_prestart_copies_the_gpu_description_when_the_host_has_one(hook, tmp_path, monkeypatch):
    module, host = hook
    (host / "gpu.json").write_text('{"gpu": {"driver_version": "580.82.07"}}')
    bundle = bundle_with_root(tmp_path, "rootfs")
    (bundle / "rootfs").mkdir()
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"bundle": str(bundle)})))
    assert module.main(["prestart"]) == 0
    assert "580.82.07" in (bundle / "rootfs" / "etc" / "dgxspark-standin" / "gpu.json").read_text()


def test_other_hook_stages_do_nothing_and_unknown_arguments_fail(hook):
    module, _host = hook
    assert module.main(["poststop"]) == 0
    assert module.main(["--version"]) == 2


@pytest.mark.skipif(not all(shutil.which(t) for t in ("dpkg-deb", "dpkg-scanpackages", "gpg")),
                    reason="needs dpkg-deb, dpkg-scanpackages and gpg")
def test_fixture_is_built_signed_and_rebuilt_only_when_sources_change(tmp_path):
    def build():
        out = subprocess.run(["python3", str(FIXTURE / "build.py"), str(tmp_path)],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    first = build()
    assert first["changed"] is True
    repo = tmp_path / "repo"
    packages = (repo / "cuda" / "Packages").read_text()
    assert "Version: 580.82.07-0ubuntu1" in packages and "Version: 580.95.05-0ubuntu1" in packages
    assert "Package: nvidia-container-toolkit" in (repo / "libnvidia-container" / "Packages").read_text()
    keyring = tmp_path / "keyring.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "--output", str(keyring), str(repo / "key.asc")],
                   check=True, capture_output=True)
    for name in ("cuda", "libnvidia-container"):
        assert (repo / name / "InRelease").read_text().startswith("-----BEGIN PGP SIGNED MESSAGE-----")
        for signed in (["InRelease"], ["Release.gpg", "Release"]):
            subprocess.run(["gpgv", "--keyring", str(keyring), *[str(repo / name / f) for f in signed]],
                           check=True, capture_output=True)
    assert "PUBLIC KEY BLOCK" in (repo / "key.asc").read_text()
    second = build()
    assert second == dict(first, changed=False)
