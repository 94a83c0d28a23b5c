# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine settings blocks of the files Ansible and readers need as files, written
from the rows of _engine_settings (tools/engine-settings calls render_files):

- roles/engine_service/defaults/main.yml: every setting's default, its doc as a comment;
- roles/engine_service/meta/argument_specs.yml: every setting's spec (type, choices,
  default, description) under main, anchored, and its alias in every other entry
  point whose block the markers open;
- README.md: the settings table, where the README has the markers.

Each block lies between a BEGIN and an END marker line; the lines outside them are
left as they are. The YAML is written by hand (block style, plain scalars where YAML
reads them back unchanged), so no YAML library is needed to write it.
"""

from __future__ import annotations

import json
import re
import textwrap

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import (
    SETTINGS,
    VARIABLE_PREFIX,
    expectation,
)

BEGIN = "# BEGIN engine settings"

END = "# END engine settings"

README_BEGIN = "<!-- BEGIN engine settings"

README_END = "<!-- END engine settings -->"

SOURCE = "written by tools/engine-settings from plugins/plugin_utils/_engine_settings.py; edit the rows there"

DEFAULTS_PATH = "roles/engine_service/defaults/main.yml"

SPECS_PATH = "roles/engine_service/meta/argument_specs.yml"

README_PATH = "README.md"

_WIDTH = 118

_PLAIN = re.compile(r"^[A-Za-z0-9_/.-][A-Za-z0-9_./+:-]*$")

_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}

_MARKUP = re.compile(r"\b[COVIP]\(([^()]*)\)")


class SettingsFileError(ValueError):
    """Raised when a file has no engine settings block or a broken one."""


def spec_type(setting):
    """The argument spec type of a row: raw where null must pass beside a non-null default.

    A spec cannot say "an integer or null" with a default (Ansible converts
    the null and fails), so such a setting is raw and the row checks its type.
    """
    if setting.kind == "json":
        return "raw"
    if setting.kind == "str" or setting.kind == "list":
        return setting.kind
    if setting.unset is not None and setting.default is not None:
        return "raw"
    return setting.kind


def spec_entry(setting):
    """The argument spec of a row, as Ansible reads it from meta/argument_specs.yml."""
    entry = {"type": spec_type(setting)}
    extra = dict(setting.spec or {})
    if "elements" in extra:
        entry["elements"] = extra.pop("elements")
    if setting.choices:
        entry["choices"] = list(setting.choices)
    if setting.default is not None:
        entry["default"] = setting.default
    entry["description"] = setting.doc
    entry.update(extra)
    return entry


def _scalar(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if not isinstance(value, str):
        raise SettingsFileError("%r is not a YAML scalar" % (value,))
    if (_PLAIN.match(value) and value.lower() not in _YAML_WORDS and value != "-" and not value.endswith(":")
            and not _looks_numeric(value)):
        return value
    return json.dumps(value, ensure_ascii=False)


def _looks_numeric(text):
    try:
        float(text)
    except ValueError:
        return text.startswith(("0x", "0o", "."))
    return True


def _text_lines(key, text, indent):
    """key: text, wrapped; double-quoted so that no character of the text means YAML."""
    quoted = json.dumps(text, ensure_ascii=False)
    lines = textwrap.wrap(quoted, width=_WIDTH - indent - len(key) - 2, break_long_words=False, break_on_hyphens=False)
    pad = " " * (indent + 2)
    return [" " * indent + "%s: %s" % (key, lines[0])] + [pad + line for line in lines[1:]]


def _item_lines(text, indent):
    quoted = json.dumps(text, ensure_ascii=False)
    lines = textwrap.wrap(quoted, width=_WIDTH - indent - 2, break_long_words=False, break_on_hyphens=False)
    pad = " " * (indent + 2)
    return [" " * indent + "- " + lines[0]] + [pad + line for line in lines[1:]]


def _yaml_lines(key, value, indent):
    """Block YAML of O(key): O(value) at O(indent) spaces."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "%s: {}" % key]
        lines = [pad + "%s:" % key]
        for name, item in value.items():
            lines += _yaml_lines(name, item, indent + 2)
        return lines
    if isinstance(value, (list, tuple)):
        if not value:
            return [pad + "%s: []" % key]
        lines = [pad + "%s:" % key]
        for item in value:
            if isinstance(item, (dict, list, tuple)):
                raise SettingsFileError("%s: a list of mappings or lists has no default here" % key)
            lines.append(pad + "  - " + _scalar(item))
        return lines
    return [pad + "%s: %s" % (key, _scalar(value))]


def _description_lines(doc, indent):
    if isinstance(doc, str):
        return _text_lines("description", doc, indent)
    lines = [" " * indent + "description:"]
    for paragraph in doc:
        lines += _item_lines(paragraph, indent + 2)
    return lines


def _spec_lines(key, entry, indent):
    """One option of a spec: the keys in Ansible's usual order, nested options too."""
    lines = []
    for name, value in entry.items():
        if name == "description":
            lines += _description_lines(value, indent)
        elif name == "options":
            lines.append(" " * indent + "options:")
            for option, option_entry in value.items():
                lines.append(" " * (indent + 2) + "%s:" % option)
                lines += _spec_lines(option, option_entry, indent + 4)
        else:
            lines += _yaml_lines(name, value, indent)
    return lines


def _plain(text):
    """A doc without its markup: C(--flag) is --flag."""
    return _MARKUP.sub(r"\1", text)


def _paragraphs(doc):
    return [doc] if isinstance(doc, str) else list(doc)


def defaults_block():
    """The lines of defaults/main.yml between the markers: each default under its doc."""
    lines = []
    for setting in SETTINGS:
        if lines:
            lines.append("")
        for paragraph in _paragraphs(setting.doc):
            lines += ["# " + line for line in textwrap.wrap(_plain(paragraph), width=_WIDTH - 2, break_on_hyphens=False)]
        lines += _yaml_lines(VARIABLE_PREFIX + setting.name, setting.default, 0)
    return lines


def spec_definitions_block(indent):
    """The options of main between the markers: each spec, anchored by its variable."""
    lines = []
    for setting in SETTINGS:
        name = VARIABLE_PREFIX + setting.name
        lines.append(" " * indent + "%s: &%s" % (name, name))
        lines += _spec_lines(name, spec_entry(setting), indent + 2)
    return lines


def spec_aliases_block(indent):
    """The options of another entry point between the markers: each spec by its anchor."""
    return [" " * indent + "%s: *%s" % (VARIABLE_PREFIX + s.name, VARIABLE_PREFIX + s.name) for s in SETTINGS]


def _cell(text):
    return text.replace("|", "\\|")


def readme_table():
    """The README's settings table: variable, flag, what it takes, default, what null does."""
    lines = ["| variable | vLLM flag | takes | default | null |", "| --- | --- | --- | --- | --- |"]
    for setting in SETTINGS:
        flag = "`%s`" % setting.flag if setting.flag else ""
        if setting.render == "switch":
            flag = "`--[no-]%s`" % setting.flag[2:]
        if setting.default is None:
            default = "null"
        elif isinstance(setting.default, str):
            default = "`%s`" % setting.default
        else:
            default = "`%s`" % json.dumps(setting.default, separators=(", ", ": "))
        if setting.required:
            null = "refused"
        elif setting.unset:
            null = setting.unset.removeprefix("to ").removeprefix("for ")
        else:
            null = ""
        lines.append("| `%s%s` | %s | %s | %s | %s |" % (
            VARIABLE_PREFIX, setting.name, flag, _cell(expectation(setting)), _cell(default), _cell(null)))
    return lines


def _blocks(lines, begin, end, path):
    """(begin index, end index) of every block of O(lines), the markers' own lines."""
    blocks, start = [], None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(begin):
            if start is not None:
                raise SettingsFileError("%s:%d opens an engine settings block inside another" % (path, index + 1))
            start = index
        elif stripped.startswith(end):
            if start is None:
                raise SettingsFileError("%s:%d closes an engine settings block that was not opened" % (path, index + 1))
            blocks.append((start, index))
            start = None
    if start is not None:
        raise SettingsFileError("%s:%d opens an engine settings block that is never closed" % (path, start + 1))
    return blocks


def _replace_blocks(text, path, begin, end, content, required=True):
    lines = text.split("\n")
    blocks = _blocks(lines, begin, end, path)
    if not blocks and required:
        raise SettingsFileError("%s has no engine settings block (a %r line and a %r line)" % (path, begin, end))
    for start, stop in reversed(blocks):
        indent = len(lines[start]) - len(lines[start].lstrip())
        lines[start + 1:stop] = content(lines[:start], indent)
    return "\n".join(lines)


def _entry_point(preceding):
    """The entry point of argument_specs.yml whose options the next line belongs to."""
    for line in reversed(preceding):
        match = re.match(r"^  ([A-Za-z0-9_]+):\s*$", line)
        if match:
            return match.group(1)
    return None


def render_defaults(text):
    return _replace_blocks(text, DEFAULTS_PATH, BEGIN, END, lambda preceding, indent: defaults_block())


def render_specs(text):
    def content(preceding, indent):
        if _entry_point(preceding) == "main":
            return spec_definitions_block(indent)
        return spec_aliases_block(indent)

    return _replace_blocks(text, SPECS_PATH, BEGIN, END, content)


def render_readme(text):
    return _replace_blocks(text, README_PATH, README_BEGIN, README_END, lambda preceding, indent: readme_table(),
                           required=False)


RENDERERS = {DEFAULTS_PATH: render_defaults, SPECS_PATH: render_specs, README_PATH: render_readme}


def render_files(read):
    """{path: (text, rendered text)} for every file with an engine settings block; O(read) reads a path."""
    return {path: (read(path), render(read(path))) for path, render in RENDERERS.items()}


# The entry points that compute the settings map, so list every setting.
ENTRY_POINTS_WITH_EVERY_SETTING = ("main", "validate", "prepare")


def _same(left, right):
    """Equal as YAML values: booleans only equal booleans, 40 equals 40.0, None only None."""
    if isinstance(left, bool) or isinstance(right, bool) or left is None or right is None:
        return type(left) is type(right) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right))
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    return type(left) is type(right) and left == right


def _spec_problems(entry_point, name, found, expected):
    if not isinstance(found, dict):
        return ["%s: %s (entry point %s) is not a mapping" % (SPECS_PATH, name, entry_point)]
    problems = []
    for key in sorted(set(found) | set(expected)):
        have, want = found.get(key), expected.get(key)
        if key == "description":
            have = [have] if isinstance(have, str) else have
            want = _paragraphs(want)
        if not _same(have, want):
            problems.append("%s: %s (entry point %s) has %s %r, its row %r" % (SPECS_PATH, name, entry_point, key, have, want))
    return problems


def settings_file_problems(specs, defaults):
    """Where the role's files disagree with the rows, as readable lines (empty when they agree).

    O(specs) is the loaded C(argument_specs) mapping of meta/argument_specs.yml,
    O(defaults) the loaded defaults/main.yml. Every setting must have its
    row's default in the defaults and, in every entry point that lists it, its
    row's spec (type, elements, choices, default, description, options); the
    entry points that compute the settings map must list every setting.
    """
    problems = []
    for setting in SETTINGS:
        name = VARIABLE_PREFIX + setting.name
        if name not in defaults:
            problems.append("%s: %s is missing; run tools/engine-settings" % (DEFAULTS_PATH, name))
        elif not _same(defaults[name], setting.default):
            problems.append("%s: %s is %r, its row %r; run tools/engine-settings"
                            % (DEFAULTS_PATH, name, defaults[name], setting.default))
    for entry_point, entry in specs.items():
        options = (entry or {}).get("options") or {}
        for setting in SETTINGS:
            name = VARIABLE_PREFIX + setting.name
            if name in options:
                problems.extend(_spec_problems(entry_point, name, options[name], spec_entry(setting)))
            elif entry_point in ENTRY_POINTS_WITH_EVERY_SETTING:
                problems.append("%s: entry point %s does not list %s; run tools/engine-settings"
                                % (SPECS_PATH, entry_point, name))
    return problems
