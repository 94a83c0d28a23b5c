# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The weights directory is the weights' own: the read (run here with sh and GNU find, as
node_read runs it on a node) and its verdict, and the role's wiring of both."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from unit_support import REPO_ROOT, file_tree

from ansible_collections.dgxspark.cluster.plugins.module_utils._manifest import DEFAULT_EXCLUDE, MARKER, is_excluded
from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _weights_dir
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._weights_dir import (
    MARKER_CONTENT,
    WeightsDirError,
    read_argv,
    verdict,
)

ROLE = REPO_ROOT / "roles" / "model_weights"
MODEL = {"config.json": "{}", "model.safetensors": "w" * 64, "tokenizer/tokenizer.json": "{}"}


@pytest.fixture
def weights(tmp_path):
    """(the weights directory, the manifest the node keeps for it), neither created."""
    return tmp_path / "srv" / "models" / "tiny", tmp_path / "state" / "tiny.manifest.json"


def write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def keep_manifest(manifest, files=None):
    files = MODEL if files is None else files
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"version": 1, "files": {rel: {"size": len(text), "sha256": "0" * 64}
                                                            for rel, text in files.items()}}, indent=2))


def judge(directory, manifest, host="spark2"):
    done = subprocess.run(read_argv(str(directory), str(manifest)), capture_output=True, text=True, check=False,
                          env=dict(os.environ, LC_ALL="C"))
    return verdict({"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}, host, str(directory),
                   str(manifest))


def expected(directory, manifest):
    return ("expected the weights' own directory: absent, empty, holding the collection's marker %s/%s, or holding "
            "only files of the manifest this node keeps for it (%s), since the weights sync (rsync --delete) deletes "
            "whatever else it holds" % (directory, MARKER, manifest))


def test_an_absent_directory_passes_and_is_marked_once_made(weights):
    directory, manifest = weights
    found = judge(directory, manifest)
    assert found == {"exists": False, "marked": False, "marker_path": "%s/%s" % (directory, MARKER),
                     "marker_content": MARKER_CONTENT, "problems": []}


def test_an_empty_directory_passes(weights):
    directory, manifest = weights
    (directory / "sub").mkdir(parents=True)
    found = judge(directory, manifest)
    assert (found["exists"], found["marked"], found["problems"]) == (True, False, [])


def test_a_marked_directory_passes_whatever_it_holds(weights):
    directory, manifest = weights
    write(directory, {MARKER: MARKER_CONTENT, "notes.txt": "mine"})
    found = judge(directory, manifest)
    assert (found["exists"], found["marked"], found["problems"]) == (True, True, [])


def test_a_directory_holding_other_data_is_refused_naming_a_few_entries(weights):
    directory, manifest = weights
    write(directory, {"notes.txt": "mine", "data/run-%d.log" % 0: "x", "data/run-1.log": "x", "a.bin": "x",
                      "b.bin": "x", "c.bin": "x", ".cache/huggingface/x.lock": ""})
    before = file_tree(directory)
    found = judge(directory, manifest)
    assert found["problems"] == [
        "spark2: model_weights_dir %s holds 6 entries that are not the collection's (no marker, no manifest): a.bin, "
        "b.bin, c.bin, data/run-0.log, data/run-1.log and 1 more; %s. Point model_weights_dir at a directory of its "
        "own, or, if nothing in it needs keeping, mark it as the weights' own: sudo touch %s/%s."
        % (directory, expected(directory, manifest), directory, MARKER)]
    # The read only reads.
    assert file_tree(directory) == before and not manifest.exists()


def test_a_copy_made_before_the_marker_existed_counts_as_the_weights_own(weights):
    # A node converged before the marker: its directory holds exactly the files of the manifest
    # it keeps (the source's own, or the copy a peer keeps), or fewer of them (a damaged or
    # interrupted copy), beside what the manifest leaves out.
    directory, manifest = weights
    keep_manifest(manifest)
    write(directory, dict(MODEL, **{".cache/huggingface/download/x.lock": "", "model-2.safetensors.incomplete": "p"}))
    assert judge(directory, manifest)["problems"] == []
    (directory / "config.json").unlink()
    assert judge(directory, manifest)["problems"] == []


def test_a_file_no_manifest_lists_is_refused(weights):
    directory, manifest = weights
    keep_manifest(manifest)
    write(directory, dict(MODEL, **{"tokenizer/mine.txt": "x"}))
    (problem,) = judge(directory, manifest, "spark4")["problems"]
    assert problem.startswith("spark4: model_weights_dir %s holds 1 entry that no manifest of this node lists: "
                              "tokenizer/mine.txt; " % directory), problem


def test_a_manifest_that_is_no_manifest_vouches_for_nothing(weights):
    directory, manifest = weights
    manifest.parent.mkdir(parents=True)
    manifest.write_text("not json")
    write(directory, MODEL)
    (problem,) = judge(directory, manifest)["problems"]
    assert "holds 3 entries that are not the collection's (no marker, no manifest): config.json" in problem


def test_a_file_where_the_directory_should_be_is_refused(weights):
    directory, manifest = weights
    directory.parent.mkdir(parents=True)
    directory.write_text("x")
    found = judge(directory, manifest)
    assert found["exists"] is True
    assert found["problems"] == ["spark2: model_weights_dir %s is a regular file, not a directory; %s. Point "
                                 "model_weights_dir at a directory of its own." % (directory, expected(directory, manifest))]


def test_a_link_to_a_directory_is_judged_as_the_directory(weights, tmp_path):
    directory, manifest = weights
    target = tmp_path / "disk" / "tiny"
    write(target, {"notes.txt": "mine"})
    directory.parent.mkdir(parents=True)
    directory.symlink_to(target)
    assert "holds 1 entry that is not the collection's (no marker, no manifest): notes.txt;" in judge(
        directory, manifest)["problems"][0]
    (target / MARKER).write_text(MARKER_CONTENT)
    assert judge(directory, manifest)["marked"] is True


def test_more_entries_than_are_read_are_refused(weights, monkeypatch):
    directory, manifest = weights
    monkeypatch.setattr(_weights_dir, "READ_LIMIT", 3)
    keep_manifest(manifest, {"f%d" % index: "x" for index in range(5)})
    write(directory, {"f%d" % index: "x" for index in range(5)})
    (problem,) = judge(directory, manifest)["problems"]
    # Sorted from what was read: three of the four.
    assert "holds more than 3 entries, more than a model's weights (f" in problem and "...); expected" in problem


def test_a_failed_read_or_unknown_output_is_an_error():
    with pytest.raises(WeightsDirError, match="the read of /srv/models/tiny failed"):
        verdict({"rc": 2, "stdout": "", "stderr": "sh: not found"}, "spark1", "/srv/models/tiny", "/m.json")
    with pytest.raises(WeightsDirError, match="expected absent, other, marked, empty or directory"):
        verdict({"rc": 0, "stdout": "what\n", "stderr": ""}, "spark1", "/srv/models/tiny", "/m.json")
    with pytest.raises(WeightsDirError, match="expected an absolute path"):
        read_argv("srv/models/tiny", "/m.json")


def test_the_marker_is_never_one_of_the_weights():
    assert is_excluded(MARKER, DEFAULT_EXCLUDE) and not is_excluded("sub/" + MARKER, DEFAULT_EXCLUDE)


def _tasks(name):
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def test_the_preflight_reads_and_judges_the_directory_before_anything_changes():
    tasks = _tasks("validate.yml")
    read = [task for task in tasks if "dgxspark.cluster.node_read" in task]
    assert len(read) == 1 and "model_weights_dir_read_argv" in read[0]["dgxspark.cluster.node_read"]["spec"]["commands"][
        "weights_dir"]
    assert read[0]["register"] == "model_weights_dir_read"
    judged, refusal = tasks[tasks.index(read[0]) + 1:]
    # A fact, which a later import of validate.yml whose tasks are all skipped leaves alone
    # (a skipped task's register would not): converge.yml reads it.
    assert "model_weights_dir_verdict" in judged["ansible.builtin.set_fact"]["model_weights_dir_state"]
    assert refusal["ansible.builtin.assert"]["that"] == "model_weights_dir_state.problems | length == 0"
    # main.yml includes validate.yml while model_weights_validated is not defined (one skipped
    # task where a preflight checked it, its tasks tagged always as the include): only the
    # last task may register it.
    assert [task.get("register") for task in tasks if task.get("register") == "model_weights_validated"] == [
        "model_weights_validated"] and refusal["register"] == "model_weights_validated"
    main = _tasks("main.yml")[0]
    assert main["ansible.builtin.include_tasks"] == {"file": "validate.yml", "apply": {"tags": "always"}}
    assert main["when"] == "model_weights_validated is not defined" and main["tags"] == "always"


def test_the_marker_is_written_before_the_download_and_the_sync_and_the_sync_keeps_it():
    tasks = _tasks("converge.yml")
    names = [task["name"] for task in tasks]
    mark = next(index for index, task in enumerate(tasks) if "dgxspark.cluster.file_set" in task)
    assert mark < names.index("Model weights | Download on the source node") < names.index(
        "Model weights | Sync the peers over the fabric")
    assert tasks[mark]["when"] == "not model_weights_dir_state.marked"
    assert tasks[mark]["dgxspark.cluster.file_set"]["files"][0]["path"] == "{{ model_weights_dir_state.marker_path }}"
    sync = (ROLE / "tasks" / "sync.yml").read_text()
    assert "'--delete'" in sync and "'--exclude=/' ~ model_weights_dir_state.marker_path | basename" in sync


def test_the_filters_wrap_the_read_and_the_verdict(weights):
    from ansible.errors import AnsibleFilterError

    from ansible_collections.dgxspark.cluster.plugins.filter.model_weights import FilterModule

    filters = FilterModule().filters()
    directory, manifest = weights
    expected_argv = read_argv(str(directory), str(manifest))
    assert filters["model_weights_dir_read_argv"](str(directory), str(manifest)) == expected_argv
    verdict = filters["model_weights_dir_verdict"]({"rc": 0, "stdout": "marked\n", "stderr": ""}, "spark1",
                                                   str(directory), str(manifest))
    assert verdict["marked"] is True
    with pytest.raises(AnsibleFilterError, match="the read of"):
        filters["model_weights_dir_verdict"]({"rc": 1}, "spark1", str(directory), str(manifest))
