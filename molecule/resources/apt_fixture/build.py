# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test harness only: build a signed apt repository of stand-in NVIDIA packages.

The simulated nodes have no GPU and no access to NVIDIA's repositories. This script builds
stand-ins for the packages the nvidia_driver and container_runtime roles install, in two
flat repositories shaped like NVIDIA's two (Packages, Release, InRelease, Release.gpg),
signed with a throwaway key made for this build only (its secret half is deleted after):

  cuda/                  nvidia-driver-580-open 580.82.07-0ubuntu1 (nvidia-smi stand-in
                         reporting 580.82.07) and 580.95.05-0ubuntu1 (reporting 580.95.05)
  libnvidia-container/   nvidia-container-toolkit 1.17.8-1 (hook and runtime stand-ins)

Usage: python3 build.py OUTPUT_DIR   (the project uses .cache/simulation/apt)

OUTPUT_DIR/repo holds both repositories and key.asc, their public key; OUTPUT_DIR/stamp holds a
hash of this script and of every source file, and the repository is rebuilt only when it
changes. Prints one JSON line: {"changed": bool, "repo": path, "key": path, "hash": str}.
Needs dpkg-deb, dpkg-scanpackages and gpg on the controller.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from email.utils import formatdate
from pathlib import Path

HERE = Path(__file__).resolve().parent
STANDINS = HERE.parent / "standins"
FILES = HERE / "files"
MAINTAINER = "dgxspark.cluster simulation <simulation@dgxspark.invalid>"
KEY_UID = "dgxspark.cluster simulated apt repository (test stand-in, throwaway) <simulation@dgxspark.invalid>"

# Each package: the repository it goes to, control fields, and files as
# (path in the package, source file, mode).
PACKAGES = (
    {
        "repo": "cuda",
        "Package": "nvidia-driver-580-open",
        "Version": "580.82.07-0ubuntu1",
        "Depends": "python3",
        "Description": "Test stand-in for the NVIDIA 580 open kernel driver (older release)\n"
        " Not NVIDIA's driver: installs the nvidia-smi stand-in of the simulated cluster,\n"
        " told to report driver 580.82.07.",
        "files": (
            ("usr/bin/nvidia-smi", STANDINS / "nvidia-smi", 0o755),
            ("etc/dgxspark-standin/gpu.json", FILES / "gpu-580.82.07.json", 0o644),
        ),
    },
    {
        "repo": "cuda",
        "Package": "nvidia-driver-580-open",
        "Version": "580.95.05-0ubuntu1",
        "Depends": "python3",
        "Description": "Test stand-in for the NVIDIA 580 open kernel driver\n"
        " Not NVIDIA's driver: installs the nvidia-smi stand-in of the simulated cluster,\n"
        " which reports driver 580.95.05.",
        "files": (("usr/bin/nvidia-smi", STANDINS / "nvidia-smi", 0o755),),
    },
    {
        "repo": "libnvidia-container",
        "Package": "nvidia-container-toolkit",
        "Version": "1.17.8-1",
        "Depends": "python3",
        "Description": "Test stand-in for the NVIDIA Container Toolkit\n"
        " Not NVIDIA's toolkit: a prestart hook that copies the nvidia-smi stand-in into\n"
        " containers started with --gpus, and a runtime that hands over to runc.",
        "files": (
            ("usr/bin/nvidia-container-runtime-hook", FILES / "nvidia-container-runtime-hook", 0o755),
            ("usr/bin/nvidia-container-runtime", FILES / "nvidia-container-runtime", 0o755),
        ),
    },
)


def source_hash():
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for package in PACKAGES:
        digest.update(("%s/%s %s\n" % (package["repo"], package["Package"], package["Version"])).encode())
        for target, source, mode in package["files"]:
            digest.update(("%s %o\n" % (target, mode)).encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()


def build_deb(package, workdir, repo):
    root = workdir / "src" / ("%s_%s" % (package["Package"], package["Version"]))
    (root / "DEBIAN").mkdir(parents=True)
    size = 0
    for target, source, mode in package["files"]:
        dest = root / target
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
        dest.chmod(mode)
        size += dest.stat().st_size
    control = [
        "Package: %s" % package["Package"],
        "Version: %s" % package["Version"],
        "Architecture: all",
        "Maintainer: %s" % MAINTAINER,
        "Installed-Size: %d" % max(1, size // 1024),
        "Depends: %s" % package["Depends"],
        "Section: non-free/libs",
        "Priority: optional",
        "Description: %s" % package["Description"],
    ]
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    deb = repo / ("%s_%s_all.deb" % (package["Package"], package["Version"]))
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
                   check=True, capture_output=True)


def write_release(repo):
    lines = [
        "Origin: dgxspark-simulation",
        "Label: dgxspark simulated NVIDIA repository (test stand-in)",
        "Date: %s" % formatdate(usegmt=True),
    ]
    names = ("Packages", "Packages.gz")
    for field, algorithm in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append("%s:" % field)
        for name in names:
            data = (repo / name).read_bytes()
            lines.append(" %s %d %s" % (hashlib.new(algorithm, data).hexdigest(), len(data), name))
    (repo / "Release").write_text("\n".join(lines) + "\n")


def sign(out, repos):
    home = tempfile.mkdtemp(prefix="dgxspark-apt-gpg-")
    gpg = ["gpg", "--homedir", home, "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        subprocess.run(gpg + ["--quick-gen-key", KEY_UID, "ed25519", "sign", "never"], check=True, capture_output=True)
        subprocess.run(gpg + ["--armor", "--output", str(out / "key.asc"), "--export", KEY_UID],
                       check=True, capture_output=True)
        for repo in repos:
            subprocess.run(gpg + ["--clearsign", "--output", str(repo / "InRelease"), str(repo / "Release")],
                           check=True, capture_output=True)
            subprocess.run(gpg + ["--armor", "--detach-sign", "--output", str(repo / "Release.gpg"),
                                  str(repo / "Release")], check=True, capture_output=True)
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def build(out, workdir):
    out.mkdir()
    repos = []
    for name in sorted({package["repo"] for package in PACKAGES}):
        repo = out / name
        repo.mkdir()
        for package in PACKAGES:
            if package["repo"] == name:
                build_deb(package, workdir, repo)
        packages = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=repo,
                                  check=True, capture_output=True).stdout
        (repo / "Packages").write_bytes(packages)
        (repo / "Packages.gz").write_bytes(gzip.compress(packages, mtime=0))
        write_release(repo)
        repos.append(repo)
    sign(out, repos)
    for path in [out, *out.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: build.py OUTPUT_DIR\n")
        return 2
    out = Path(argv[0]).resolve()
    repo, stamp = out / "repo", out / "stamp"
    wanted = source_hash()
    if stamp.exists() and stamp.read_text().strip() == wanted and (repo / "key.asc").exists():
        changed = False
    else:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".build-", dir=out) as tmp:
            fresh = Path(tmp) / "repo"
            build(fresh, Path(tmp))
            if stamp.exists():
                stamp.unlink()
            if repo.exists():
                shutil.rmtree(repo)
            os.replace(fresh, repo)
        stamp.write_text(wanted + "\n")
        changed = True
    print(json.dumps({"changed": changed, "repo": str(repo), "key": str(repo / "key.asc"), "hash": wanted}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
