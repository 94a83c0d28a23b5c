# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""One remote call that reads what several tasks would read one round trip each.

A role describes what it needs to know about a node (a *read spec*): installed packages,
the type, mode, owner and content digest of paths, whether systemd units are enabled and
running, the output of read-only commands, the free space under paths, and the GPU as
``nvidia-smi`` reports it. :func:`read_command` turns the spec into one ``sh -c`` command
line for ``ansible.builtin.raw`` (a read needs no module on the node: one SSH exec, where a
module costs an upload and an interpreter start); :func:`parse_read` turns what it printed back into data;
:func:`file_set_pending` says which paths of a ``dgxspark.cluster.file_set`` set differ
from what was read, so a converged node needs no ``file_set`` call at all.

The script only reads (``dpkg-query``, ``stat``, ``sha256sum``, ``readlink``, ``systemctl
is-enabled``/``is-active``, the given commands); file contents never leave the node, only
their SHA-256. Every section starts with a marker line, and paths are named by their
index in the spec, so nothing a path or a command prints can be taken for structure.

Standard library only (and the GPU parser of ``_gpu``), so the logic is unit-tested
without Ansible.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex

from ansible_collections.dgxspark.cluster.plugins.module_utils._gpu import (
    QUERY_FIELDS,
    GpuDriverMismatchError,
    GpuQueryError,
    build_query_argv,
    common_driver_version,
    parse_query_gpu,
)

MARKER = "@@dgxspark-state"
SPEC_KEYS = ("packages", "paths", "units", "commands", "disks", "gpu")
# Where gpu_facts looks for nvidia-smi besides PATH (first, as its get_bin_path does).
NVIDIA_SMI_OPT_DIRS = ("/usr/local/nvidia/bin",)
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")
# The section of the GPU query; no command of a spec may take this name.
GPU_COMMAND = "gpu-query"
# dpkg's status letters (second of db:Status-Abbrev) of a package that is not installed.
NOT_INSTALLED = ("n", "c")

_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.+:@-]*\Z")
_OCTAL_MODE_RE = re.compile(r"\A0?[0-7]{3,4}\Z")

# The functions the script is made of. `mark` starts a section on stdout and, for the
# sections whose errors matter (commands, disks), on stderr too.
_PRELUDE = r"""set -f
M='%(marker)s'
LC_ALL=C; LANGUAGE=C; export LC_ALL LANGUAGE
mark() { printf '%%s %%s\n' "$M" "$*"; }
mark2() { mark "$@"; printf '%%s %%s\n' "$M" "$*" >&2; }
rd_path() {
  mark path "$1"
  if stat -c 'stat %%a %%u %%g %%U %%G %%F' -- "$2" 2>/dev/null; then
    if [ -L "$2" ]; then printf 'link %%s\n' "$(readlink -- "$2")"
    elif [ -f "$2" ]; then printf 'sha256 %%s\n' "$(sha256sum < "$2" | cut -d ' ' -f 1)"; fi
  fi
}
rd_unit() {
  mark unit "$1"
  s=$(systemctl is-enabled -- "$2" 2>/dev/null); r=$?; printf 'enabled %%s %%s\n' "$r" "$(echo $s)"
  s=$(systemctl is-active -- "$2" 2>/dev/null); r=$?; printf 'active %%s %%s\n' "$r" "$(echo $s)"
}
rd_command() {
  n=$1; shift
  mark2 command "$n"
  "$@" </dev/null; r=$?
  printf '\n%%s rc %%s\n' "$M" "$r"
}
rd_disk() {
  mark2 disk "$1"
  p=$2; up=0
  while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname -- "$p"); up=$((up + 1)); done
  printf 'up %%s\n' "$up"
  stat -f -c 'statvfs %%a %%S %%b' -- "$p"
}
"""


class NodeStateError(ValueError):
    """A read spec that cannot be read, or output that is not what the read prints."""


def _names(spec, key):
    values = spec.get(key) or []
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise NodeStateError("read spec %s=%r; expected a list of names" % (key, values))
    for value in values:
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise NodeStateError("read spec %s holds %r; expected a package or unit name" % (key, value))
    return list(values)


def _paths(spec, key):
    values = spec.get(key) or []
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise NodeStateError("read spec %s=%r; expected a list of absolute paths" % (key, values))
    what = "cannot measure free space for" if key == "disks" else "cannot read"
    paths = []
    for value in values:
        if not isinstance(value, str) or not value.startswith("/") or "\n" in value or "\0" in value:
            raise NodeStateError("%s %r: expected an absolute path" % (what, value))
        paths.append(posixpath.normpath(value))
    return paths


def check_spec(spec):
    """The spec with its lists checked and paths normalised (V(/a//b/.) is V(/a/b))."""
    if not isinstance(spec, dict):
        raise NodeStateError("read spec %r; expected a dict with some of %s" % (spec, ", ".join(SPEC_KEYS)))
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise NodeStateError("read spec has %s; expected only %s" % (", ".join(unknown), ", ".join(SPEC_KEYS)))
    commands = spec.get("commands") or {}
    if not isinstance(commands, dict):
        raise NodeStateError("read spec commands=%r; expected a dict name -> argv" % (commands,))
    for name, argv in commands.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise NodeStateError("read spec command name %r; expected a word" % (name,))
        if name == GPU_COMMAND:
            raise NodeStateError("read spec command name %r is the GPU query's; choose another" % name)
        if isinstance(argv, (str, bytes)) or not isinstance(argv, (list, tuple)) or not argv:
            raise NodeStateError("read spec command %s=%r; expected a non-empty argv list" % (name, argv))
    return {
        "packages": _names(spec, "packages"),
        "paths": _paths(spec, "paths"),
        "units": _names(spec, "units"),
        "commands": {name: [str(arg) for arg in argv] for name, argv in commands.items()},
        "disks": _paths(spec, "disks"),
        "gpu": _gpu(spec.get("gpu", False)),
    }


def _gpu(value):
    """False, True (nvidia-smi searched as gpu_facts searches it) or the absolute path of nvidia-smi."""
    if isinstance(value, str):
        word = value.strip()
        if word.lower() in ("true", "yes", "1", "false", "no", "0", ""):
            return word.lower() in ("true", "yes", "1")
        if word.startswith("/") and "\n" not in word and "\0" not in word:
            return posixpath.normpath(word)
        raise NodeStateError("read spec gpu=%r; expected true, false or the absolute path of nvidia-smi" % value)
    return bool(value)


def read_script(spec):
    """The POSIX sh script that reads what O(spec) asks for; it always exits 0."""
    spec = check_spec(spec)
    q = shlex.quote
    lines = [_PRELUDE % {"marker": MARKER}]
    if spec["packages"]:
        lines.append("mark packages")
        lines.append(
            "dpkg-query -W -f=%s %s 2>/dev/null"
            % (q("${Package} ${Version} ${db:Status-Abbrev}\\n"), " ".join(q(p) for p in spec["packages"]))
        )
    for index, path in enumerate(spec["paths"]):
        lines.append("rd_path %d %s" % (index, q(path)))
    for index, unit in enumerate(spec["units"]):
        lines.append("rd_unit %d %s" % (index, q(unit)))
    for index, path in enumerate(spec["disks"]):
        lines.append("rd_disk %d %s" % (index, q(path)))
    for name, argv in spec["commands"].items():
        lines.append("rd_command %s %s" % (q(name), " ".join(q(arg) for arg in argv)))
    if spec["gpu"]:
        search = ":".join(NVIDIA_SMI_OPT_DIRS) + ':"$PATH":' + ":".join(SBIN_DIRS)
        query = build_query_argv("nvidia-smi", QUERY_FIELDS)[1:]
        lines.append("mark gpu")
        if spec["gpu"] is True:
            lines.append('s=$(PATH=%s; command -v nvidia-smi) || s=' % search)
        else:
            lines.append("s=%s; [ -x \"$s\" ] || s=" % q(spec["gpu"]))
        lines.append("printf 'nvidia-smi %s\\n' \"$s\"")
        lines.append('[ -z "$s" ] || rd_command %s "$s" %s' % (GPU_COMMAND, " ".join(q(arg) for arg in query)))
    lines.append("mark end")
    return "\n".join(lines) + "\n"


def read_argv(spec):
    """The argv that runs :func:`read_script`."""
    return ["sh", "-c", read_script(spec)]


def read_command(spec):
    """The shell command line of ansible.builtin.raw that runs :func:`read_script`."""
    return shlex.join(read_argv(spec))


def _sections(text):
    """[(kind, name, [line, ...]), ...] of a stream the script printed."""
    sections = []
    current = None
    for line in text.split("\n"):
        if line.startswith(MARKER + " ") or line == MARKER:
            words = line[len(MARKER) + 1:].split(" ", 1)
            current = (words[0], words[1] if len(words) > 1 else "", [])
            sections.append(current)
        elif current is not None:
            current[2].append(line)
    return sections


def _kind(text):
    if text.startswith("regular"):
        return "file"
    return {"directory": "directory", "symbolic link": "link"}.get(text, text or "other")


def _parse_path(path, lines):
    found = {"path": path, "kind": None, "mode": None, "uid": None, "gid": None, "owner": None, "group": None,
             "sha256": None, "link": None}
    for line in lines:
        word, _sep, rest = line.partition(" ")
        if word == "stat":
            parts = rest.split(" ", 5)
            if len(parts) != 6:
                raise NodeStateError("stat of %s printed %r; expected mode uid gid user group type" % (path, line))
            mode, uid, gid, owner, group, kind = parts
            found.update(kind=_kind(kind), mode="%04o" % int(mode, 8), uid=int(uid), gid=int(gid),
                         owner=owner, group=group)
        elif word == "sha256":
            found["sha256"] = rest.strip() or None
        elif word == "link":
            found["link"] = rest
    return found


def _parse_unit(unit, lines):
    found = {"name": unit, "is_enabled": "", "is_active": "", "enabled": False, "active": False}
    for line in lines:
        word, _sep, rest = line.partition(" ")
        rc, _sep, text = rest.partition(" ")
        if word == "enabled":
            # As ansible.builtin.systemd_service judges it: is-enabled answers 0, and not
            # only because the unit is an alias or is pulled in indirectly.
            found.update(is_enabled=text, enabled=rc == "0" and text not in ("", "indirect", "alias"))
        elif word == "active":
            # systemd_service's state=started leaves an active or activating unit alone.
            found.update(is_active=text, active=text in ("active", "activating"))
    return found


def _parse_disk(path, lines, stderr):
    up = None
    statvfs = None
    for line in lines:
        word, _sep, rest = line.partition(" ")
        if word == "up" and rest.isdigit():
            up = int(rest)
        elif word == "statvfs":
            statvfs = rest.split()
    if up is None or not statvfs or len(statvfs) != 3 or not all(p.isdigit() for p in statvfs):
        raise NodeStateError(
            "cannot measure free space for %s: the read printed %r%s" % (
                path, "\n".join(line for line in lines if line), (": " + stderr) if stderr else "")
        )
    checked = path
    for _level in range(up):
        checked = posixpath.dirname(checked)
    avail, frsize, blocks = (int(p) for p in statvfs)
    return {"path": path, "checked_path": checked, "free_bytes": avail * frsize, "total_bytes": blocks * frsize}


def _parse_packages(lines):
    """name -> version of the installed ones; several architectures of one name agree
    on the version (Multi-Arch: same), so the first installed line wins."""
    installed = {}
    for line in lines:
        parts = line.split(" ", 2)
        if len(parts) != 3:
            continue
        name, version, status = parts
        if len(status) >= 2 and status[1] not in NOT_INSTALLED and name not in installed:
            installed[name] = version
    return installed


def absent_gpu_facts():
    """What dgxspark.cluster.gpu_facts returns with required=false where no GPU answers."""
    return {
        "dgxspark_gpus": [],
        "dgxspark_gpu_count": 0,
        "dgxspark_gpu_driver_version": None,
        "dgxspark_gpu_present": False,
    }


def gpu_facts_from(nvidia_smi, command):
    """The facts and warning dgxspark.cluster.gpu_facts (required=false) gives for this
    nvidia-smi (its path, or '' when none was found) and its command result."""
    if not nvidia_smi or command is None:
        return {"facts": absent_gpu_facts(), "warning": None}
    if command["rc"] != 0:
        return {
            "facts": absent_gpu_facts(),
            "warning": "%s exited %d; expected 0 and one CSV line per GPU (is the NVIDIA driver loaded?): %s"
            % (nvidia_smi, command["rc"], (command["stderr"] or command["stdout"]).strip()),
        }
    try:
        gpus = parse_query_gpu(command["stdout"], QUERY_FIELDS)
    except GpuQueryError as exc:
        raise NodeStateError("nvidia-smi printed what the query did not ask for: %s" % exc) from None
    try:
        driver_version = common_driver_version(gpus)
    except GpuDriverMismatchError as exc:
        raise NodeStateError("%s; expected one driver version on all GPUs of a host" % exc) from None
    except GpuQueryError as exc:
        raise NodeStateError(str(exc)) from None
    if not gpus:
        return {"facts": absent_gpu_facts(), "warning": None}
    return {
        "facts": {
            "dgxspark_gpus": gpus,
            "dgxspark_gpu_count": len(gpus),
            "dgxspark_gpu_driver_version": driver_version,
            "dgxspark_gpu_present": True,
        },
        "warning": None,
    }


def parse_read(result, spec):
    """What the script of O(spec) printed, as data.

    O(result) is the registered result of the command (its C(stdout) and C(stderr)), or the
    stdout text alone. Returns a dict:

    - C(packages): name -> version of each installed package of the spec (absent ones missing);
    - C(paths): path -> C(kind) (V(file), V(directory), V(link), another type, or V(None) when
      missing), C(mode) (V('0644')), C(uid), C(gid), C(owner), C(group), C(sha256) (files)
      and C(link) (symlink target);
    - C(units): name -> C(enabled), C(active) (booleans as systemd_service judges them) and
      C(is_enabled), C(is_active) (what systemctl answered);
    - C(commands): name -> C(rc), C(stdout), C(stderr);
    - C(disks): one dict per path, as dgxspark.cluster.disk_space returns (C(path),
      C(checked_path), C(free_bytes), C(total_bytes));
    - C(gpu): C(nvidia_smi) (path or V('')), C(facts) (as gpu_facts with required=false
      sets them) and C(warning) (nvidia-smi exists but failed), when the spec asks for it.
    """
    spec = check_spec(spec)
    if isinstance(result, dict):
        stdout, stderr = result.get("stdout") or "", result.get("stderr") or ""
    else:
        stdout, stderr = str(result or ""), ""
    out = _sections(stdout)
    if not out or out[-1][0] != "end":
        raise NodeStateError(
            "the node state read stopped before its end (printed %d characters); expected it to end with %r%s"
            % (len(stdout), MARKER + " end", (": " + stderr.strip()) if stderr.strip() else "")
        )
    errors = {}
    for kind, name, lines in _sections(stderr):
        errors[(kind, name)] = "\n".join(lines).strip()

    state = {"packages": {}, "paths": {}, "units": {}, "commands": {}, "disks": []}
    disks = {}
    gpu_path = None
    previous = None
    for kind, name, lines in out:
        if kind == "packages":
            state["packages"] = _parse_packages(lines)
        elif kind == "path":
            path = spec["paths"][int(name)]
            state["paths"][path] = _parse_path(path, lines)
        elif kind == "unit":
            unit = spec["units"][int(name)]
            state["units"][unit] = _parse_unit(unit, lines)
        elif kind == "disk":
            disks[int(name)] = _parse_disk(spec["disks"][int(name)], lines, errors.get(("disk", name), ""))
        elif kind == "command":
            previous = state["commands"][name] = {
                "rc": None, "stdout": "\n".join(lines), "stderr": errors.get(("command", name), ""),
            }
        elif kind == "rc" and previous is not None:
            previous["rc"] = int(name)
            previous = None
        elif kind == "gpu":
            gpu_path = ""
            for line in lines:
                if line.startswith("nvidia-smi "):
                    gpu_path = line[len("nvidia-smi "):]
    missing = [path for path in spec["paths"] if path not in state["paths"]]
    missing += [unit for unit in spec["units"] if unit not in state["units"]]
    missing += [spec["disks"][i] for i in range(len(spec["disks"])) if i not in disks]
    missing += [name for name in spec["commands"] if name not in state["commands"]]
    if missing:
        raise NodeStateError("the node state read printed nothing for %s" % ", ".join(missing))
    state["disks"] = [disks[i] for i in range(len(spec["disks"]))]
    if spec["gpu"]:
        command = state["commands"].pop(GPU_COMMAND, None)
        found = gpu_facts_from(gpu_path, command)
        state["gpu"] = dict(found, nvidia_smi=gpu_path or "")
    return state


def _owner_differs(wanted, name, number):
    if wanted is None:
        return False
    wanted = str(wanted)
    if wanted.isdigit():
        return number != int(wanted)
    return name != wanted


def _attributes(entry, found):
    reasons = []
    mode = entry.get("mode")
    if not isinstance(mode, str) or not _OCTAL_MODE_RE.match(mode) or int(mode, 8) != int(found["mode"], 8):
        reasons.append("mode")
    if _owner_differs(entry.get("owner"), found["owner"], found["uid"]):
        reasons.append("owner")
    if _owner_differs(entry.get("group"), found["group"], found["gid"]):
        reasons.append("group")
    return reasons


def file_set_pending(file_set, state):
    """Paths of a dgxspark.cluster.file_set set that differ from what the read found.

    O(file_set) holds C(directories), C(files) and C(links) as the module takes them;
    O(state) is what :func:`parse_read` returned for a spec listing each of those paths.
    Returns path -> reasons (V(created), V(content), V(mode), V(owner), V(group), V(link),
    or V(type) where something of another kind is there, which file_set then refuses).
    An empty dict means file_set would change nothing. Whatever is not plainly the same
    (a mode that is not an octal string, content that is not text) counts as pending,
    so file_set itself judges it.

    A file listed without C(content) is judged on its type, mode, owner and group only (a
    file some other task writes, such as a downloaded key).
    """
    if not isinstance(file_set, dict):
        raise NodeStateError("file set %r; expected a dict with directories, files and links" % (file_set,))
    read = state.get("paths", {}) if isinstance(state, dict) else {}
    pending = {}
    groups = (("directory", "directories"), ("file", "files"), ("link", "links"))
    for kind, key in groups:
        for entry in file_set.get(key) or []:
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise NodeStateError("file set %s holds %r; expected a dict with a path" % (key, entry))
            path = posixpath.normpath(entry["path"])
            if path not in read:
                raise NodeStateError("file set path %s was not read; add it to the read spec's paths" % path)
            found = read[path]
            if found["kind"] is None:
                reasons = ["created"]
            elif found["kind"] != kind:
                reasons = ["type"]
            elif kind == "link":
                reasons = [] if found["link"] == entry.get("src") else ["link"]
            else:
                reasons = []
                if kind == "file" and "content" in entry:
                    content = entry["content"]
                    try:
                        digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
                    except (AttributeError, UnicodeEncodeError):
                        digest = None
                    if digest is None or digest != found["sha256"]:
                        reasons.append("content")
                reasons += _attributes(entry, found)
            if reasons:
                pending[path] = reasons
    return pending
