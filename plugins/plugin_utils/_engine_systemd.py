# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""systemd ExecStart= quoting: an argv as one line that systemd splits back into the
same words, and the parser that checks it the way systemd reads it; and the command
that checks a unit or drop-in with systemd-analyze verify before file_set writes it.
"""

from __future__ import annotations

import posixpath
import shlex

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import EngineConfigError

# systemd unquotes an ExecStart= word with C escapes, then expands "%"
# specifiers, then "$" variables at start; these undo all three.
_SYSTEMD_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "%": "%%",
    "$": "$$",
}

_SYSTEMD_UNESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
                      "\\": "\\", '"': '"', "'": "'", "s": " "}

_SYSTEMD_WHITESPACE = " \t\n\r"

_PROGRAM_PREFIXES = "-@:+!|"


def _systemd_word(argument, position):
    if not isinstance(argument, str):
        raise EngineConfigError("argument %d (%r) is not a string" % (position, argument))
    if "\0" in argument:
        raise EngineConfigError("argument %d contains a NUL character, which no command line can carry" % position)
    try:
        argument.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EngineConfigError("argument %d is not valid UTF-8 text (%s)" % (position, exc)) from exc
    quoted = []
    for char in argument:
        if char in _SYSTEMD_ESCAPES:
            quoted.append(_SYSTEMD_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            quoted.append("\\x%02x" % ord(char))
        else:
            quoted.append(char)
    return '"%s"' % "".join(quoted)


def systemd_exec_line(argv, prefix=""):
    """Quote O(argv) (program first) as the value of a systemd C(ExecStart=) line
    (or any C(Exec*=) line).

    Every argument is double-quoted with C(\\) and C(") backslash-escaped,
    control characters as C escapes, C(%) doubled against specifier expansion
    and C($) doubled against variable expansion, so systemd hands the process
    exactly O(argv). O(prefix) goes before the program, outside its quotes: the
    special executable prefixes of systemd.service(5), such as C(-) (a failure
    is ignored), each at most once.
    """
    if not isinstance(argv, (list, tuple)) or not argv:
        raise EngineConfigError("the command line must be a non-empty list of arguments")
    program = argv[0]
    if not isinstance(program, str) or not posixpath.isabs(program):
        raise EngineConfigError("the program %r is not an absolute path" % (program,))
    if not isinstance(prefix, str) or any(char not in _PROGRAM_PREFIXES for char in prefix) \
            or len(set(prefix)) != len(prefix):
        raise EngineConfigError("the prefix %r is not made of systemd's executable prefixes %s, each at most once"
                                % (prefix, " ".join(_PROGRAM_PREFIXES)))
    return prefix + " ".join(_systemd_word(argument, position) for position, argument in enumerate(argv))


_UNIT_SUFFIXES = (".service", ".socket", ".timer", ".path", ".mount", ".automount", ".swap", ".target",
                  ".slice", ".scope", ".device")

# systemd-analyze verify fails on errors in the unit or in the units it names
# directly (a program that is not there, a BindsTo= or Requires= unit not
# found, a line that leaves the unit without ExecStart=); a warning about a
# line of the file itself (an unknown key, a value systemd ignores) it only
# prints, so the output is read for the file's path too. $1 is the copy of the
# file that file_set made.
_VERIFY = "systemd-analyze verify --man=no --recursive-errors=one"
_VERIFY_TAIL = (
    '[ -z "$out" ] || echo "$out" >&2; [ "$rc" = 0 ] || exit "$rc"; '
    'case "$out" in *"$1:"*) echo "systemd-analyze warned about a line of $1" >&2; exit 1;; esac'
)
_VERIFY_UNIT = 'out=$(%s "$1" 2>&1); rc=$?; %s' % (_VERIFY, _VERIFY_TAIL)
# $2: the instance to verify a template unit through, a link beside it.
_VERIFY_TEMPLATE = ('i="$(dirname "$1")/$2"; ln -s "$(basename "$1")" "$i" || exit; out=$(%s "$i" 2>&1); rc=$?; %s'
                    % (_VERIFY, _VERIFY_TAIL))
# $2: the unit the drop-in extends, verified by name with the directory that
# holds the copy's <unit>.d first on the unit path (the trailing colon keeps
# systemd's own directories after it).
_VERIFY_DROPIN = ('out=$(SYSTEMD_UNIT_PATH="$(dirname "$(dirname "$1")"):" %s "$2" 2>&1); rc=$?; %s'
                  % (_VERIFY, _VERIFY_TAIL))


def systemd_verify_command(path):
    """The file_set C(validate) command that checks the unit or drop-in that goes to
    O(path) with C(systemd-analyze verify), on the copy file_set makes (C(%s)).

    A unit is verified as a file, under its own name (file_set keeps it), with the
    units of its directory beside it. A template unit (C(name@.service)) is verified
    through an instance, a link C(name@check.service) beside it. A drop-in
    (C(<unit>.d/<name>.conf)) cannot be verified alone: the unit it extends is
    verified by name with the copy's directory first on C(SYSTEMD_UNIT_PATH), so
    systemd reads the installed unit with the new drop-in in place of the old one.
    Anything else raises EngineConfigError.
    """
    if not isinstance(path, str) or not posixpath.isabs(path):
        raise EngineConfigError("the path %r is not an absolute path" % (path,))
    directory, name = posixpath.split(posixpath.normpath(path))
    parent = posixpath.basename(directory)
    if parent.endswith(".d") and parent[:-2].endswith(_UNIT_SUFFIXES) and name.endswith(".conf"):
        words = [_VERIFY_DROPIN, parent[:-2].replace("@.", "@check.", 1)]
    elif name.endswith(_UNIT_SUFFIXES) and "@." in name:
        words = [_VERIFY_TEMPLATE, name.replace("@.", "@check.", 1)]
    elif name.endswith(_UNIT_SUFFIXES):
        words = [_VERIFY_UNIT]
    else:
        raise EngineConfigError("%s is neither a unit (%s) nor a drop-in (<unit>.d/<name>.conf)"
                                % (path, " ".join(_UNIT_SUFFIXES)))
    script = words[0]
    return " ".join(shlex.quote(word) for word in ["sh", "-c", script, "sh", "%s"] + words[1:])


def _unescape(line, index):
    """Decode the C escape whose letter is at O(index); return (text, next index)."""
    if index >= len(line):
        raise EngineConfigError("the line ends in a backslash")
    letter = line[index]
    if letter in _SYSTEMD_UNESCAPES:
        return _SYSTEMD_UNESCAPES[letter], index + 1
    digits = {"x": (16, 2), "u": (16, 4), "U": (16, 8)}.get(letter)
    start = index + 1
    if digits is None and letter in "01234567":
        digits, start = (8, 3), index
    if digits is None:
        raise EngineConfigError("unknown escape \\%s at column %d" % (letter, index))
    base, count = digits
    text = line[start:start + count]
    try:
        value = int(text, base) if len(text) == count else -1
    except ValueError:
        value = -1
    if value <= 0 or value > 0x10FFFF:
        raise EngineConfigError("bad escape \\%s%s at column %d" % (letter, text, index))
    return chr(value), start + count


def _expand(word, sign, what):
    """Undo systemd's expansion of O(sign) in O(word): a doubled sign is one literal
    sign; any other use is refused, since systemd would replace it with a O(what)."""
    out = []
    index = 0
    while index < len(word):
        char = word[index]
        if char != sign:
            out.append(char)
            index += 1
        elif word[index + 1:index + 2] == sign:
            out.append(sign)
            index += 2
        else:
            raise EngineConfigError("%r holds a %s systemd would expand" % (word, what))
    return "".join(out)


def parse_systemd_exec_line(line):
    """Split an C(ExecStart=) value the way systemd does, into the argv it runs.

    The inverse of systemd_exec_line(): words split on whitespace, single and
    double quotes, C escapes, C(%%) and C($$). A specifier, a variable, a
    lone C(;) (a command separator) or bad quoting raises EngineConfigError
    rather than being guessed at.
    """
    words = []
    index = 0
    while True:
        while index < len(line) and line[index] in _SYSTEMD_WHITESPACE:
            index += 1
        if index >= len(line):
            break
        rest_end = index + 1
        if line[index] == ";" and (rest_end == len(line) or line[rest_end] in _SYSTEMD_WHITESPACE):
            raise EngineConfigError("a lone ; at column %d separates commands" % index)
        if line.startswith("\\;", index) and (index + 2 == len(line) or line[index + 2] in _SYSTEMD_WHITESPACE):
            words.append(";")
            index += 2
            continue
        word = []
        quote = None
        while index < len(line):
            char = line[index]
            if quote is None and char in _SYSTEMD_WHITESPACE:
                break
            if char == "\\":
                text, index = _unescape(line, index + 1)
                word.append(text)
                continue
            if quote is None and char in "\"'":
                quote = char
            elif char == quote:
                quote = None
            else:
                word.append(char)
            index += 1
        if quote is not None:
            raise EngineConfigError("unbalanced %s quote in the line" % quote)
        words.append("".join(word))
    if not words:
        raise EngineConfigError("the line is empty")
    return [_expand(_expand(word, "%", "specifier"), "$", "variable") for word in words]
