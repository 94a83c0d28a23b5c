# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles' contracts stay honest.

Ansible validates a role's inputs only for the entry point whose name is
exactly the ``tasks_from`` string (``tasks_from: verify.yml`` looks up a spec
named ``verify.yml`` and, finding none, validates nothing), so:

- every ``include_role``/``import_role`` and every ``roles:`` entry of the
  playbooks, the roles and the Molecule harness names an entry point of that
  role's ``meta/argument_specs.yml`` by its bare name, and the entry point has
  its ``tasks/<name>.yml``;
- every role has a spec with a ``main`` entry that lists each variable of
  ``defaults/main.yml`` with the same default;
- every option of every entry point is either in ``defaults/main.yml``, with
  the same default and not required, or is required (a per-host variable
  such as ``roce_fabric_address``);
- a ``validate`` entry point, where each role checks its inputs before any
  play changes a node, lists every option of ``main`` (but the few whose
  defaults read another role's facts, listed below).

Pure Python and PyYAML: no Ansible run.
"""

from __future__ import annotations

import pytest
import yaml

from unit_support import REPO_ROOT

COLLECTION = "dgxspark.cluster."
INCLUDE_ACTIONS = {
    "include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role",
}
# Options of main that a validate entry point leaves out, and why.
VALIDATE_EXCEPTIONS = {
    ("engine_service", "engine_service_gid_hca"): "its default reads roce_fabric_active_hcas or roce_fabric_hca, "
    "which the preflight play does not have (validating it there would fail on an undefined variable)",
}


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads any local tag (!vault, !unsafe) as its plain value."""


def _any_tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_Loader.add_multi_constructor("!", _any_tag)


def _load(path):
    with open(path, encoding="utf-8") as stream:
        return yaml.load(stream, Loader=_Loader)


def _caller_files(root):
    files = sorted((root / "playbooks").glob("*.yml"))
    files += sorted((root / "roles").glob("*/tasks/**/*.yml"))
    files += sorted((root / "molecule").glob("**/*.yml")) if (root / "molecule").is_dir() else []
    return files


def _walk(data):
    if isinstance(data, dict):
        yield data
        for value in data.values():
            yield from _walk(value)
    elif isinstance(data, list):
        for value in data:
            yield from _walk(value)


def role_calls(root):
    """(caller, role, entry point) for every role a playbook, role or harness calls."""
    calls = []
    for path in _caller_files(root):
        caller = path.relative_to(root).as_posix()
        for node in _walk(_load(path)):
            for action in INCLUDE_ACTIONS & node.keys():
                args = node[action]
                if isinstance(args, dict):
                    calls.append((caller, str(args.get("name", "")), str(args.get("tasks_from", "main"))))
            if "hosts" in node and isinstance(node.get("roles"), list):
                for entry in node["roles"]:
                    name = entry if isinstance(entry, str) else entry.get("role", entry.get("name", ""))
                    calls.append((caller, str(name), "main"))
    return [(caller, name.removeprefix(COLLECTION), entry) for caller, name, entry in calls]


def _same(spec_default, default):
    """Equal as YAML values: booleans only equal booleans, 40 equals 40.0."""
    if isinstance(spec_default, bool) or isinstance(default, bool):
        return type(spec_default) is type(default) and spec_default == default
    if isinstance(spec_default, dict) and isinstance(default, dict):
        return spec_default.keys() == default.keys() and all(_same(spec_default[k], default[k]) for k in default)
    if isinstance(spec_default, list) and isinstance(default, list):
        return len(spec_default) == len(default) and all(_same(a, b) for a, b in zip(spec_default, default))
    if isinstance(spec_default, (int, float)) and isinstance(default, (int, float)):
        return spec_default == default
    return type(spec_default) is type(default) and spec_default == default


def contract_problems(root):
    """Every broken contract under root (a collection: roles/, playbooks/, molecule/), as readable lines."""
    problems = []
    specs, defaults = {}, {}
    for role_dir in sorted(path for path in (root / "roles").iterdir() if path.is_dir()):
        role = role_dir.name
        spec_path = role_dir / "meta" / "argument_specs.yml"
        defaults_path = role_dir / "defaults" / "main.yml"
        defaults[role] = (_load(defaults_path) if defaults_path.is_file() else None) or {}
        if not spec_path.is_file():
            problems.append("roles/%s has no meta/argument_specs.yml" % role)
            continue
        specs[role] = (_load(spec_path) or {}).get("argument_specs") or {}
        for entry in specs[role]:
            if entry.endswith((".yml", ".yaml")):
                problems.append("roles/%s: entry point %r is named like a file; name it %r"
                                % (role, entry, entry.rsplit(".", 1)[0]))
            elif not (role_dir / "tasks" / ("%s.yml" % entry)).is_file():
                problems.append("roles/%s: entry point %r has no tasks/%s.yml" % (role, entry, entry))

    for caller, role, entry in role_calls(root):
        if role not in specs:
            if (root / "roles" / role).is_dir():
                continue  # reported above: the role has no spec at all
            problems.append("%s calls role %r, which is not a role of this collection" % (caller, role))
            continue
        if entry not in specs[role]:
            hint = entry.rsplit(".", 1)[0] if entry.endswith((".yml", ".yaml")) else None
            problems.append(
                "%s calls %s with tasks_from %r, which names no entry point of roles/%s/meta/argument_specs.yml "
                "(entry points: %s), so Ansible validates nothing%s"
                % (caller, role, entry, role, ", ".join(specs[role]),
                   "; call it tasks_from: %s" % hint if hint in specs[role] else "")
            )

    for role, entries in specs.items():
        if "main" not in entries:
            problems.append("roles/%s/meta/argument_specs.yml has no main entry point" % role)
            continue
        main_options = entries["main"].get("options") or {}
        for name in defaults[role]:
            if name not in main_options:
                problems.append("roles/%s: %s is in defaults/main.yml but not an option of the main entry point"
                                % (role, name))
        for entry, spec in entries.items():
            for name, option in (spec.get("options") or {}).items():
                option = option or {}
                if name in defaults[role]:
                    if option.get("required"):
                        problems.append("roles/%s: %s (entry point %s) is required but has a default in defaults/main.yml"
                                        % (role, name, entry))
                    if not _same(option.get("default"), defaults[role][name]):
                        problems.append(
                            "roles/%s: %s (entry point %s) has default %r in the spec but %r in defaults/main.yml"
                            % (role, name, entry, option.get("default"), defaults[role][name])
                        )
                elif not option.get("required"):
                    problems.append(
                        "roles/%s: %s (entry point %s) is neither in defaults/main.yml nor required; give it a "
                        "default there or mark it required" % (role, name, entry)
                    )
        if "validate" in entries:
            validate_options = entries["validate"].get("options") or {}
            for name in main_options:
                excepted = (role, name) in VALIDATE_EXCEPTIONS
                if name not in validate_options and not excepted:
                    problems.append("roles/%s: %s is an option of main but not of validate, which checks every input"
                                    % (role, name))
                if name in validate_options and excepted:
                    problems.append("roles/%s: %s is validated now; drop it from VALIDATE_EXCEPTIONS" % (role, name))
    return problems


def test_the_collection_keeps_its_contracts():
    assert contract_problems(REPO_ROOT) == []


def test_the_playbooks_call_roles_that_have_specs():
    # A sanity check of the walk itself: it finds the calls it must check.
    calls = set(role_calls(REPO_ROOT))
    assert ("playbooks/site.yml", "preflight", "main") in calls
    assert ("playbooks/site.yml", "roce_fabric", "main") in calls
    assert ("playbooks/engine.yml", "roce_fabric", "verify") in calls
    assert ("playbooks/engine.yml", "container_runtime", "gpu_check") in calls
    assert ("playbooks/status.yml", "engine_service", "status") in calls


def test_every_role_has_a_main_entry_point_with_a_task_file():
    for role_dir in sorted(path for path in (REPO_ROOT / "roles").iterdir() if path.is_dir()):
        spec = _load(role_dir / "meta" / "argument_specs.yml")["argument_specs"]
        assert "main" in spec, role_dir.name
        assert (role_dir / "tasks" / "main.yml").is_file(), role_dir.name


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def fake_collection(tmp_path):
    """A collection with one role, demo, whose contract holds."""
    _write(tmp_path / "roles/demo/defaults/main.yml", "---\ndemo_port: 80\ndemo_name: x\n")
    _write(tmp_path / "roles/demo/tasks/main.yml", "---\n[]\n")
    _write(tmp_path / "roles/demo/tasks/check.yml", "---\n[]\n")
    _write(tmp_path / "roles/demo/meta/argument_specs.yml", """---
argument_specs:
  main:
    options:
      demo_port: {type: int, default: 80, description: Port, 1-65535.}
      demo_name: {type: str, default: x, description: Name.}
      demo_host: {type: str, required: true, description: Set per host.}
  check:
    options:
      demo_port: {type: int, default: 80, description: Port, 1-65535.}
""")
    _write(tmp_path / "playbooks/site.yml", """---
- name: Demo
  hosts: all
  roles:
    - role: dgxspark.cluster.demo
  tasks:
    - name: Check
      ansible.builtin.include_role:
        name: dgxspark.cluster.demo
        tasks_from: check
""")
    return tmp_path


def test_a_role_that_keeps_its_contract_passes(fake_collection):
    assert contract_problems(fake_collection) == []


def test_each_broken_contract_is_named(fake_collection):
    root = fake_collection
    # tasks_from with the file's name: Ansible finds tasks/check.yml but no spec.
    playbook = root / "playbooks/site.yml"
    playbook.write_text(playbook.read_text().replace("tasks_from: check", "tasks_from: check.yml"))
    # A default that drifted, a variable the spec forgot, an option nobody sets.
    _write(root / "roles/demo/defaults/main.yml", "---\ndemo_port: 8080\ndemo_name: x\ndemo_forgotten: true\n")
    spec = root / "roles/demo/meta/argument_specs.yml"
    spec.write_text(spec.read_text().replace("      demo_host: {type: str, required: true",
                                             "      demo_host: {type: str"))
    # A role without a spec, and a validate entry point that leaves an input out.
    _write(root / "roles/bare/tasks/main.yml", "---\n[]\n")
    _write(root / "roles/demo/tasks/validate.yml", "---\n[]\n")
    spec.write_text(spec.read_text() + "  validate:\n    options:\n      demo_host: {type: str, required: true}\n")

    problems = "\n".join(contract_problems(root))
    assert "playbooks/site.yml calls demo with tasks_from 'check.yml', which names no entry point" in problems
    assert "call it tasks_from: check" in problems
    assert "demo_port (entry point main) has default 80 in the spec but 8080 in defaults/main.yml" in problems
    assert "demo_port (entry point check) has default 80 in the spec but 8080 in defaults/main.yml" in problems
    assert "demo_forgotten is in defaults/main.yml but not an option of the main entry point" in problems
    assert "demo_host (entry point main) is neither in defaults/main.yml nor required" in problems
    assert "roles/bare has no meta/argument_specs.yml" in problems
    assert "roles/demo: demo_port is an option of main but not of validate" in problems
    assert "roles/demo: demo_name is an option of main but not of validate" in problems


def test_a_boolean_default_is_not_a_number():
    assert not _same(1, True)
    assert not _same("80", 80)
    assert _same(40, 40.0)
    assert _same([{"a": True}], [{"a": True}])
    assert not _same({"a": 0}, {"a": False})
