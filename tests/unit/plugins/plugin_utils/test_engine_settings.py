# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine settings rows and what is derived from them: the generic checks, the
flags and argv order, and the role's defaults, argument specs and README table,
which must equal what tools/engine-settings writes from the rows."""

from __future__ import annotations

import copy
import importlib
import subprocess

import pytest
import yaml

from unit_support import REPO_ROOT

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _engine_settings, _engine_settings_files
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_argv import rank_argv
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import (
    MANAGED_FLAGS,
    SETTINGS,
    SETTINGS_BY_NAME,
    Setting,
    expectation,
    setting_problem,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings_files import (
    README_BEGIN,
    README_END,
    SettingsFileError,
    readme_table,
    render_defaults,
    render_files,
    render_readme,
    render_specs,
    settings_file_problems,
    spec_entry,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_validation import engine_config_problems

HOSTS = {"spark%d" % i: {"rank": i - 1, "fabric_address": "192.168.100.%d" % (10 + i)} for i in range(1, 5)}


def _read(path):
    return (REPO_ROOT / path).read_text(encoding="utf-8")


def _row_defaults():
    """The rows' defaults as a cluster would take them, with a pinned image."""
    settings = {setting.name: copy.deepcopy(setting.default) for setting in SETTINGS}
    settings["image"] = "registry.example/vllm@sha256:" + "ab" * 32
    return settings


# --- The files equal what the generator writes --------------------------------------


@pytest.mark.parametrize("path", sorted(_engine_settings_files.RENDERERS))
def test_the_files_equal_what_tools_engine_settings_writes(path):
    text, rendered = render_files(_read)[path]
    assert text == rendered, "%s differs from the rows of plugins/plugin_utils/_engine_settings.py; run tools/engine-settings" % path


def test_the_role_files_agree_with_every_row():
    specs = yaml.safe_load(_read(_engine_settings_files.SPECS_PATH))["argument_specs"]
    defaults = yaml.safe_load(_read(_engine_settings_files.DEFAULTS_PATH))
    assert settings_file_problems(specs, defaults) == []


def test_the_tool_finds_nothing_to_write():
    done = subprocess.run([str(REPO_ROOT / "tools" / "engine-settings"), "--check"], capture_output=True, text=True,
                          check=False)
    assert (done.returncode, done.stdout) == (0, "")


def _broken_row(monkeypatch, name, **changes):
    rows = tuple(row._replace(**changes) if row.name == name else row for row in SETTINGS)
    monkeypatch.setattr(_engine_settings_files, "SETTINGS", rows)


def test_a_default_changed_in_its_row_alone_is_caught(monkeypatch):
    _broken_row(monkeypatch, "max_num_seqs", default=32)
    rendered = render_files(_read)
    assert rendered[_engine_settings_files.DEFAULTS_PATH][0] != rendered[_engine_settings_files.DEFAULTS_PATH][1]
    assert rendered[_engine_settings_files.SPECS_PATH][0] != rendered[_engine_settings_files.SPECS_PATH][1]
    specs = yaml.safe_load(_read(_engine_settings_files.SPECS_PATH))["argument_specs"]
    defaults = yaml.safe_load(_read(_engine_settings_files.DEFAULTS_PATH))
    problems = settings_file_problems(specs, defaults)
    assert ("roles/engine_service/defaults/main.yml: engine_service_max_num_seqs is 16, its row 32; "
            "run tools/engine-settings") in problems
    for entry_point in ("main", "validate", "prepare"):
        assert ("roles/engine_service/meta/argument_specs.yml: engine_service_max_num_seqs (entry point %s) has "
                "default 16, its row 32" % entry_point) in problems


def test_a_spec_edited_by_hand_is_caught():
    specs = yaml.safe_load(_read(_engine_settings_files.SPECS_PATH))["argument_specs"]
    defaults = yaml.safe_load(_read(_engine_settings_files.DEFAULTS_PATH))
    # Outside the generated blocks: an entry point that spells a setting out.
    specs["deploy"]["options"]["engine_service_api_port"] = {"type": "str", "default": 8000, "description": "Port."}
    del specs["prepare"]["options"]["engine_service_block_size"]
    specs["main"]["options"]["engine_service_kv_cache_dtype"] = dict(
        specs["main"]["options"]["engine_service_kv_cache_dtype"], choices=["fp8"])
    del specs["validate"]["options"]["engine_service_moe_backend"]["description"]
    defaults["engine_service_enable_chunked_prefill"] = 1
    problems = "\n".join(settings_file_problems(specs, defaults))
    assert "engine_service_api_port (entry point deploy) has type 'str', its row 'int'" in problems
    assert "engine_service_api_port (entry point deploy) has description ['Port.']" in problems
    assert "entry point prepare does not list engine_service_block_size" in problems
    assert "engine_service_kv_cache_dtype (entry point main) has choices ['fp8'], its row None" in problems
    assert "engine_service_moe_backend (entry point validate) has description None" in problems
    assert "engine_service_enable_chunked_prefill is 1, its row True" in problems


def test_a_block_edited_by_hand_is_rewritten():
    text = _read(_engine_settings_files.DEFAULTS_PATH)
    edited = text.replace("engine_service_block_size: 256", "engine_service_block_size: 512")
    assert edited != text
    assert render_defaults(edited) == text


def test_the_generated_yaml_reads_back_as_the_rows():
    specs = yaml.safe_load(render_specs(_read(_engine_settings_files.SPECS_PATH)))["argument_specs"]
    for setting in SETTINGS:
        option = specs["main"]["options"]["engine_service_" + setting.name]
        expected = spec_entry(setting)
        expected["description"] = [expected["description"]] if isinstance(expected["description"], str) else expected["description"]
        option["description"] = [option["description"]] if isinstance(option["description"], str) else option["description"]
        assert option == expected, setting.name


def test_the_spec_type_lets_null_pass_only_where_the_row_allows_it():
    types = {setting.name: spec_entry(setting)["type"] for setting in SETTINGS}
    assert types["max_model_len"] == "raw"  # null leaves the flag out, beside a default of 1048576
    assert types["max_num_seqs"] == "int"
    assert types["max_cudagraph_capture_size"] == "int"  # null is the default
    assert types["enable_prefix_caching"] == "raw"
    assert types["allow_small_cudagraph_capture_size"] == "bool"
    assert types["compilation_config"] == "raw"
    assert types["kv_cache_dtype"] == "str"
    assert spec_entry(SETTINGS_BY_NAME["patches"])["elements"] == "dict"


@pytest.mark.parametrize(
    "text, message",
    [
        ("a\n# BEGIN engine settings\nb\n", "roles/engine_service/defaults/main.yml:2 opens an engine settings block that is never closed"),
        ("# END engine settings\n", "roles/engine_service/defaults/main.yml:1 closes an engine settings block that was not opened"),
        ("# BEGIN engine settings\n# BEGIN engine settings\n", "defaults/main.yml:2 opens an engine settings block inside another"),
        ("---\nx: 1\n", "roles/engine_service/defaults/main.yml has no engine settings block"),
    ],
)
def test_broken_blocks_are_refused(text, message):
    with pytest.raises(SettingsFileError, match=message):
        render_defaults(text)


def test_the_readme_table_is_written_between_its_markers_only():
    text = "# Title\n\nBefore.\n\n%s: generated -->\nstale\n%s\n\nAfter.\n" % (README_BEGIN, README_END)
    rendered = render_readme(text)
    assert rendered.startswith("# Title\n\nBefore.\n\n%s: generated -->\n| variable |" % README_BEGIN)
    assert rendered.endswith("\n%s\n\nAfter.\n" % README_END)
    assert "stale" not in rendered
    assert render_readme("# No table\n") == "# No table\n"


def test_the_readme_table_has_a_line_per_row():
    table = readme_table()
    assert len(table) == 2 + len(SETTINGS)
    assert "| `engine_service_max_num_seqs` | `--max-num-seqs` | an integer from 1 to 1024 | `16` | refused |" in table
    assert ("| `engine_service_enable_prefix_caching` | `--[no-]enable-prefix-caching` | true or false | `true` | "
            "vLLM's default |") in table
    assert ("| `engine_service_gpu_memory_utilization` | `--gpu-memory-utilization` | a number above 0 and at most 1 "
            "| `0.85` | omit the option |") in table


# --- The generic checks ------------------------------------------------------------

LEVELS = Setting("levels", "int", 2, minimum=1, maximum=8, unset="to omit the option", doc="x")
RATIO = Setting("ratio", "float", 0.5, above=0, maximum=1, doc="x")
MODE = Setting("mode", "str", "fast", choices=("fast", "slow"), required=True, doc="x")
GRACE = Setting("grace", "int", 10, minimum=0, doc="x")


@pytest.mark.parametrize(
    "setting, value, problem",
    [
        (LEVELS, 1, None),
        (LEVELS, 8, None),
        (LEVELS, None, None),
        (LEVELS, 0, "engine_service_levels 0 is not an integer from 1 to 8; leave it unset to omit the option"),
        (LEVELS, 9, "engine_service_levels 9 is not an integer from 1 to 8; leave it unset to omit the option"),
        (LEVELS, True, "engine_service_levels True is not an integer from 1 to 8; leave it unset to omit the option"),
        (LEVELS, "4", "engine_service_levels '4' is not an integer from 1 to 8; leave it unset to omit the option"),
        (RATIO, 1, None),
        (RATIO, 0.01, None),
        (RATIO, 0, "engine_service_ratio 0 is not a number above 0 and at most 1"),
        (RATIO, 1.01, "engine_service_ratio 1.01 is not a number above 0 and at most 1"),
        (MODE, "slow", None),
        (MODE, None, "engine_service_mode is not set"),
        (MODE, "FAST", "engine_service_mode 'FAST' is not one of fast, slow"),
        (GRACE, 0, None),
        (GRACE, -1, "engine_service_grace -1 is not an integer of 0 or more"),
    ],
)
def test_a_row_checks_its_type_range_and_choices(setting, value, problem):
    assert setting_problem(setting, value) == problem


def test_a_choice_of_another_type_is_refused():
    flags = Setting("flags", "int", 1, choices=(1, 2), doc="x")
    assert setting_problem(flags, True) == "engine_service_flags True is not one of 1, 2"
    assert setting_problem(flags, 2) is None


def test_every_row_default_passes_its_own_check():
    assert engine_config_problems({"hosts": HOSTS, "settings": _row_defaults()}) == []


@pytest.mark.parametrize(
    "name, value, problem",
    [
        ("max_num_seqs", 1025, "engine_service_max_num_seqs 1025 is not an integer from 1 to 1024"),
        ("master_port", 0, "engine_service_master_port 0 is not an integer from 1 to 65535"),
        ("start_timeout", 0, "engine_service_start_timeout 0 is not an integer of 300 or more"),
        ("start_timeout", 299, "engine_service_start_timeout 299 is not an integer of 300 or more"),
        ("stop_timeout", -5, "engine_service_stop_timeout -5 is not an integer of 0 or more"),
        ("kv_cache_dtype", " ", "engine_service_kv_cache_dtype ' ' is not a non-empty string; leave it unset to omit the option"),
        ("async_scheduling", "yes", "engine_service_async_scheduling 'yes' is not true or false; leave it unset for vLLM's default"),
        ("model", 7, "engine_service_model 7 is not a non-empty string"),
        ("tensor_parallel_size", None, "engine_service_tensor_parallel_size is not set"),
    ],
)
def test_the_preflight_refuses_by_the_row(name, value, problem):
    settings = _row_defaults()
    settings[name] = value
    assert engine_config_problems({"hosts": HOSTS, "settings": settings}) == [problem]


def test_expectations_read_as_sentences():
    assert expectation(SETTINGS_BY_NAME["gpu_memory_utilization"]) == "a number above 0 and at most 1"
    assert expectation(SETTINGS_BY_NAME["api_port"]) == "an integer from 1 to 65535"
    assert expectation(SETTINGS_BY_NAME["block_size"]) == "a positive integer"
    assert expectation(SETTINGS_BY_NAME["compilation_config"]) == "a mapping"


# --- Flags and argv from the rows ---------------------------------------------------


def test_every_row_flag_and_alias_is_managed_by_its_setting():
    for setting in SETTINGS:
        for flag in ((setting.flag,) if setting.flag else ()) + setting.aliases:
            assert MANAGED_FLAGS[flag] == setting.name
        if setting.render == "switch":
            assert MANAGED_FLAGS["--no-" + setting.flag[2:]] == setting.name


def test_the_tuning_options_render_in_row_order_with_their_flags():
    argv = rank_argv(_row_defaults(), 0, "192.168.100.11")
    rendered = [argument for argument in argv if argument.startswith("--")]
    options = [setting for setting in SETTINGS if setting.render in ("value", "switch", "json")]
    # Every option whose row has a default renders (the capture size always does).
    assert {setting.flag for setting in options if setting.default is not None} <= set(rendered)
    positions = [rendered.index(setting.flag) for setting in options if setting.flag in rendered]
    assert len(positions) > 10 and positions == sorted(positions)
    assert rendered.index("--port") < positions[0]


def test_a_new_row_reaches_the_argv_and_its_checks(monkeypatch):
    row = Setting("example_window", "int", 1, flag="--example-window", render="value", minimum=1,
                  unset="to omit the option", doc="C(--example-window).")
    rows = SETTINGS + (row,)
    for module in ("_engine_settings", "_engine_validation", "_engine_argv"):
        target = importlib.import_module("ansible_collections.dgxspark.cluster.plugins.plugin_utils." + module)
        if hasattr(target, "SETTINGS"):
            monkeypatch.setattr(target, "SETTINGS", rows)
        if hasattr(target, "_TUNING_OPTIONS"):
            monkeypatch.setattr(target, "_TUNING_OPTIONS", _engine_settings._TUNING_OPTIONS + (row,))
    monkeypatch.setitem(_engine_settings.SETTINGS_BY_NAME, row.name, row)
    settings = dict(_row_defaults(), example_window=4)
    argv = rank_argv(settings, 0, "192.168.100.11")
    assert argv[argv.index("--example-window") + 1] == "4"
    assert argv.index("--example-window") > argv.index("--enable-chunked-prefill")
    settings["example_window"] = 0
    assert engine_config_problems({"hosts": HOSTS, "settings": settings}) == [
        "engine_service_example_window 0 is not a positive integer; leave it unset to omit the option"]
