# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""A set of directories, files and symlinks converged in one pass.

:func:`plan_file_set` compares the desired set with what ``lstat`` and reading
find on disk. It writes nothing, and it refuses a set that cannot be applied as
given (a relative or repeated path, a mode that is not an octal string, an
unknown owner, a file where a directory is expected...) with one
:class:`FileSetError` naming every path at fault, so nothing is written unless
the whole set can be. :func:`apply_file_set` carries a plan out: directories
first (shallowest first), then files, then links.

A file is written only when its content differs, and atomically: a temporary
file beside it gets the bytes, its owner and its mode and is flushed to disk
before it is renamed over the path. A symlink pointing elsewhere is replaced the
same way, by a temporary link renamed over it. An existing file or directory
whose content is right but whose mode or owner is not is fixed in place.

A file may name a ``validate`` command (``%s`` for the file): :func:`validate_file_set`
runs it on the new content of each file created or changed, in a private temporary
directory, before :func:`apply_file_set` replaces anything, and returns the failures.

The content of a file is never put into a message or a step's report here:
messages name paths, kinds, modes and owners only, and :func:`diff_entries`
leaves secret files out.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import secrets
import shlex
import shutil
import stat
import tempfile

#: Why a path changes, in the order they are reported for one path.
REASONS = ("created", "content", "mode", "owner", "group", "link")

KINDS = ("directory", "file", "link")

_OCTAL_MODE = re.compile(r"\A0?[0-7]{3,4}\Z")


class FileSetError(Exception):
    """The set cannot be applied as given. ``problems`` holds one message per
    fault, each naming the path, what was found and what is expected."""

    def __init__(self, problems):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class ApplyError(Exception):
    """Writing one path failed; ``done`` lists the paths converged before it."""

    def __init__(self, step, error, done):
        self.step = step
        self.error = error
        self.done = list(done)
        super().__init__(
            "cannot converge %s %s (%s): %s" % (step.kind, step.path, ", ".join(step.reasons), error)
        )


class Step:
    """One path of the set and what converging it takes.

    ``reasons`` is empty when the path is already as desired. ``data`` holds a
    file's bytes and ``before`` the existing bytes of a non-secret file whose
    content changes (for a diff); neither is ever put into a message."""

    __slots__ = ("kind", "path", "index", "mode", "uid", "gid", "owner", "group", "data", "secret", "src",
                 "reasons", "implicit", "current_uid", "current_gid", "before", "validate")

    def __init__(self, kind, path, index, mode=None, uid=None, gid=None, owner=None, group=None, data=None,
                 secret=False, src=None, implicit=False, validate=None):
        self.kind = kind
        self.path = path
        self.index = index
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.owner = owner
        self.group = group
        self.data = data
        self.secret = secret
        self.src = src
        self.reasons = []
        self.implicit = implicit
        self.current_uid = None
        self.current_gid = None
        self.before = None
        self.validate = validate

    def __repr__(self):
        # never the content
        return "Step(%s %s, reasons=%r)" % (self.kind, self.path, self.reasons)


# --------------------------------------------------------------------------- lookups


def _named_or_numeric_id(name, id_of_name):
    try:
        return id_of_name(name)
    except KeyError:
        if name.isdigit():
            return int(name)
        raise


def lookup_uid(name):
    """The uid of user O(name); a name that no user has but is all digits is taken as a uid."""
    return _named_or_numeric_id(name, lambda user: pwd.getpwnam(user).pw_uid)


def lookup_gid(name):
    """The gid of group O(name); a name that no group has but is all digits is taken as a gid."""
    return _named_or_numeric_id(name, lambda group: grp.getgrnam(group).gr_gid)


# --------------------------------------------------------------------------- validation


def parse_mode(value):
    """The permission bits of an octal mode string, or a ValueError saying what was found."""
    if isinstance(value, bool) or value is None:
        raise ValueError("mode is %s; expected an octal string such as '0644'" % ("missing" if value is None else value))
    if isinstance(value, int):
        raise ValueError(
            "mode is %d, a number (YAML reads an unquoted 0644 as the decimal number 420); "
            "expected an octal string in quotes such as '0644'" % value
        )
    if not isinstance(value, str) or not _OCTAL_MODE.match(value):
        raise ValueError(
            "mode is %r; expected an octal string of 3 or 4 digits such as '0644' or '2775' "
            "(symbolic modes are not supported)" % (value if isinstance(value, str) else type(value).__name__,)
        )
    return int(value, 8)


def _type_name(value):
    return {dict: "a dict", list: "a list", int: "a number", float: "a number", bool: "a boolean"}.get(
        type(value), "a %s" % type(value).__name__
    )


def _entry(kind, index, item, problems, uid_of, gid_of):
    """A Step for one entry of the input, or None (with problems recorded) when it is malformed."""
    if not isinstance(item, dict):
        problems.append("%s entry %d is %s; expected a dict with a path" % (kind, index + 1, _type_name(item)))
        return None
    path = item.get("path")
    if not isinstance(path, str) or not path:
        problems.append("%s entry %d has no path; expected an absolute path" % (kind, index + 1))
        return None
    if "\0" in path:
        problems.append("%s %r: the path holds a NUL byte; expected an absolute path" % (kind, path))
        return None
    if not os.path.isabs(path):
        problems.append("%s %s: the path is relative; expected an absolute path" % (kind, path))
        return None
    path = os.path.normpath(path)
    step = Step(kind, path, index)
    bad = False
    if kind in ("directory", "file"):
        try:
            step.mode = parse_mode(item.get("mode"))
        except ValueError as exc:
            problems.append("%s %s: %s" % (kind, path, exc))
            bad = True
        for key, lookup, attr in (("owner", uid_of, "uid"), ("group", gid_of, "gid")):
            name = item.get(key)
            if name is None:
                continue
            if not isinstance(name, str) or not name:
                problems.append("%s %s: %s is %s; expected a name or a numeric id" % (kind, path, key, _type_name(name)))
                bad = True
                continue
            try:
                setattr(step, attr, lookup(name))
            except KeyError:
                problems.append(
                    "%s %s: %s %r does not exist on this node; expected an existing %s name or a numeric id"
                    % (kind, path, key, name, "user" if key == "owner" else "group")
                )
                bad = True
                continue
            setattr(step, key, name)
    if kind == "file":
        content = item.get("content")
        step.secret = bool(item.get("secret", False))
        if not isinstance(content, str):
            # the value itself is never named: it may be a secret
            problems.append(
                "file %s: content is %s; expected text (a string; render structured data with to_json or "
                "to_nice_yaml)" % (path, "missing" if content is None else _type_name(content))
            )
            bad = True
        else:
            try:
                step.data = content.encode("utf-8")
            except UnicodeEncodeError as exc:
                problems.append(
                    "file %s: content holds a character that UTF-8 cannot encode at position %d; expected text"
                    % (path, exc.start)
                )
                bad = True
    if kind == "file" and item.get("validate") is not None:
        validate = item.get("validate")
        if not isinstance(validate, str) or "%s" not in validate:
            problems.append(
                "file %s: validate is %s; expected a command holding %%s, the path of the file to check"
                % (path, repr(validate) if isinstance(validate, str) else _type_name(validate))
            )
            bad = True
        else:
            try:
                validation_argv(validate, "/x")
            except ValueError as exc:
                problems.append("file %s: validate %r cannot be split into words (%s); expected a command"
                                % (path, validate, exc))
                bad = True
            else:
                step.validate = validate
    if kind == "link":
        src = item.get("src")
        if not isinstance(src, str) or not src:
            problems.append("link %s: src is %s; expected the path the link points to" % (
                path, "missing" if src is None or src == "" else _type_name(src)))
            bad = True
        elif "\0" in src:
            problems.append("link %s: src holds a NUL byte; expected a path" % path)
            bad = True
        else:
            step.src = src
    return None if bad else step


def _ancestors(path):
    """The ancestors of an absolute normalised path, deepest first, up to the root."""
    result = []
    current = os.path.dirname(path)
    while True:
        result.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            return result
        current = parent


def _check_layout(steps, problems):
    """Repeated paths, and entries that cannot coexist: anything beneath a listed file,
    or a path that passes through a listed link."""
    seen = {}
    for step in steps:
        first = seen.get(step.path)
        if first is not None:
            problems.append(
                "path %s is listed twice (as a %s and as a %s); expected each path once"
                % (step.path, first.kind, step.kind)
            )
        else:
            seen[step.path] = step
    for step in steps:
        for ancestor in _ancestors(step.path):
            holder = seen.get(ancestor)
            if holder is None or holder.kind == "directory":
                continue
            if holder.kind == "file":
                problems.append(
                    "%s %s: its ancestor %s is listed as a file; expected a directory there"
                    % (step.kind, step.path, ancestor)
                )
            else:
                problems.append(
                    "%s %s: the path passes through %s, which is listed as a link; expected the path of the "
                    "link's target instead" % (step.kind, step.path, ancestor)
                )
            break


# --------------------------------------------------------------------------- disk


def _lstat(path):
    """The lstat of O(path), or None when nothing is there (also when an ancestor is not a directory)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def describe(st, path):
    """What an lstat result is, in words (a symlink with its target)."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISLNK(mode):
        try:
            return "a symlink to %s" % os.readlink(path)
        except OSError:
            return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "something of type %o" % stat.S_IFMT(mode)


def _directory_problem(path):
    """None when O(path) exists and is a directory (or a symlink to one); a description of
    what is there otherwise; "missing" when nothing is."""
    st = _lstat(path)
    if st is None:
        return "missing"
    if stat.S_ISDIR(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            if stat.S_ISDIR(os.stat(path).st_mode):
                return None
        except (FileNotFoundError, NotADirectoryError):
            return "%s, which does not exist" % describe(st, path)
    return describe(st, path)


def _compare_attributes(step, st):
    if stat.S_IMODE(st.st_mode) != step.mode:
        step.reasons.append("mode")
    if step.uid is not None and st.st_uid != step.uid:
        step.reasons.append("owner")
    if step.gid is not None and st.st_gid != step.gid:
        step.reasons.append("group")


def _same_content(path, st, data):
    if st.st_size != len(data):
        return False
    with open(path, "rb") as handle:
        return handle.read(len(data) + 1) == data


def _plan_directories(steps, problems, will_exist, implicit):
    # shallowest first, so a listed parent claims its own missing ancestors
    for step in sorted((s for s in steps if s.kind == "directory"), key=lambda s: (s.path.count("/"), s.index)):
        st = _lstat(step.path)
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                _compare_attributes(step, st)
            else:
                problems.append(
                    "directory %s: found %s; expected a directory (or nothing)" % (step.path, describe(st, step.path))
                )
            continue
        missing = []
        for ancestor in _ancestors(step.path):
            if ancestor in will_exist:
                break
            found = _directory_problem(ancestor)
            if found is None:
                break
            if found != "missing":
                problems.append(
                    "directory %s: found %s at %s; expected a directory there" % (step.path, found, ancestor)
                )
                missing = None
                break
            missing.append(ancestor)
        if missing is None:
            continue
        step.reasons.append("created")
        will_exist.add(step.path)
        for ancestor in reversed(missing):
            if ancestor in will_exist:
                continue
            parent = Step("directory", ancestor, step.index, mode=step.mode, uid=step.uid, gid=step.gid,
                          owner=step.owner, group=step.group, implicit=True)
            parent.reasons.append("created")
            implicit.setdefault(id(step), []).append(parent)
            will_exist.add(ancestor)


def _parent_problem(step, will_exist):
    parent = os.path.dirname(step.path)
    if parent in will_exist:
        return None
    found = _directory_problem(parent)
    if found is None:
        return None
    if found == "missing":
        for ancestor in _ancestors(parent):
            if ancestor in will_exist:
                break
            blocker = _directory_problem(ancestor)
            if blocker is None:
                break
            if blocker != "missing":
                return "%s %s: found %s at %s; expected a directory there" % (step.kind, step.path, blocker, ancestor)
        return "%s %s: its directory %s does not exist; expected it to exist or to be listed in directories" % (
            step.kind, step.path, parent)
    return "%s %s: found %s at %s; expected a directory there" % (step.kind, step.path, found, parent)


def _plan_creation(step, problems, will_exist):
    """A file or link that does not exist yet: created, unless its directory cannot hold it."""
    problem = _parent_problem(step, will_exist)
    if problem:
        problems.append(problem)
    else:
        step.reasons.append("created")


def _existing(step, problems, will_exist, is_kind, expected):
    """What a file or link step finds at its path when that is of its kind; None when there is
    nothing to compare (the step is planned as a creation, or a problem is noted)."""
    st = _lstat(step.path)
    if st is None:
        _plan_creation(step, problems, will_exist)
        return None
    if not is_kind(st.st_mode):
        found = describe(st, step.path)
        problems.append("%s %s: found %s; expected %s (or nothing)" % (step.kind, step.path, found, expected))
        return None
    return st


def _plan_file(step, problems, will_exist):
    st = _existing(step, problems, will_exist, stat.S_ISREG, "a regular file")
    if st is None:
        return
    step.current_uid, step.current_gid = st.st_uid, st.st_gid
    if not _same_content(step.path, st, step.data):
        step.reasons.append("content")
        if not step.secret:
            with open(step.path, "rb") as handle:
                step.before = handle.read()
    _compare_attributes(step, st)


def _plan_link(step, problems, will_exist):
    if _existing(step, problems, will_exist, stat.S_ISLNK, "a symlink") is None:
        return
    if os.readlink(step.path) != step.src:
        step.reasons.append("link")


def plan_file_set(directories=(), files=(), links=(), uid_of=lookup_uid, gid_of=lookup_gid):
    """The steps that converge the set, in input order (directories, then files, then links;
    a parent directory created for a listed one comes just before it). A step with no
    ``reasons`` is already as desired. Reads the disk, writes nothing.

    Each directory is ``{path, mode, owner?, group?}``, each file ``{path, content, mode,
    owner?, group?, secret?, validate?}``, each link ``{path, src}``; ``mode`` is an octal
    string, ``validate`` a command holding ``%s`` (see :func:`validate_file_set`).
    Raises FileSetError naming every problem found."""
    problems = []
    steps = []
    for kind, items in (("directory", directories), ("file", files), ("link", links)):
        for index, item in enumerate(items or ()):
            step = _entry(kind, index, item, problems, uid_of, gid_of)
            if step is not None:
                step.index = len(steps)
                steps.append(step)
    _check_layout(steps, problems)
    if problems:
        raise FileSetError(problems)

    will_exist = set()
    implicit = {}
    try:
        _plan_directories(steps, problems, will_exist, implicit)
        for step in steps:
            if step.kind == "file":
                _plan_file(step, problems, will_exist)
            elif step.kind == "link":
                _plan_link(step, problems, will_exist)
    except OSError as exc:
        problems.append("cannot inspect %s: %s" % (exc.filename or "a path", exc.strerror or exc))
    if problems:
        raise FileSetError(problems)

    ordered = []
    for step in steps:
        ordered.extend(implicit.get(id(step), ()))
        ordered.append(step)
    return ordered


# --------------------------------------------------------------------------- reports


def changed_steps(steps):
    return [step for step in steps if step.reasons]


def report(steps):
    """``changed_paths`` (in plan order) and ``reasons`` (path -> list of reasons) of a plan."""
    changes = changed_steps(steps)
    return {
        "changed_paths": [step.path for step in changes],
        "reasons": {step.path: list(step.reasons) for step in changes},
    }


def diff_entries(steps):
    """Before/after text of each non-secret file whose content is created or changed.
    A secret file, or one whose old bytes are not UTF-8 text, has no entry."""
    entries = []
    for step in steps:
        if step.kind != "file" or step.secret or not ({"created", "content"} & set(step.reasons)):
            continue
        if step.before is None:
            before = ""
        else:
            try:
                before = step.before.decode("utf-8")
            except UnicodeDecodeError:
                continue
        entries.append({
            "before_header": step.path,
            "after_header": step.path,
            "before": before,
            "after": step.data.decode("utf-8"),
        })
    return entries


# --------------------------------------------------------------------------- validation


_PLACEHOLDER = re.compile(r"%[%s]")


def validation_argv(command, path):
    """The argv of a validate O(command) for the file at O(path): the command split into
    words as a shell would (no shell runs it), then in each word C(%s) replaced by O(path)
    and C(%%) by C(%). Raises ValueError for a command that cannot be split (an unbalanced
    quote) or holds no word."""
    words = shlex.split(command)
    if not words:
        raise ValueError("no command")
    return [_PLACEHOLDER.sub(lambda match: "%" if match.group() == "%%" else path, word) for word in words]


def _validation_layout(steps, root):
    """Where each file with a validate goes under the temporary directory O(root): the
    files of one directory side by side in C(<root>/<n>/<name of that directory>/), each
    under its own name, so a unit finds another unit of its directory beside it and a
    drop-in sits in a directory named C(<unit>.d)."""
    places = {}
    directories = {}
    for step in steps:
        if step.kind != "file" or step.validate is None:
            continue
        directory, base = os.path.split(step.path)
        if directory not in directories:
            directories[directory] = os.path.join(root, str(len(directories)), os.path.basename(directory) or "root")
        places[step.path] = os.path.join(directories[directory], base)
    return places


def validate_file_set(steps, run, temp_root=None):
    """Run the validate command of every file created or changed, on its new content,
    before anything is replaced. Returns one dict per failure (path, validate, rc,
    stdout, stderr); an empty list when every command succeeded or none was to run.

    The new text of every file with a validate (changed or not: a unit may name another
    of its directory) is written to a private temporary directory (see
    :func:`_validation_layout`), with the mode it will have; O(run) is called with the
    argv for each changed file and returns (rc, stdout, stderr). The temporary
    directory is removed before returning. Nothing under the set's paths is touched."""
    checked = [s for s in steps if s.kind == "file" and s.validate is not None and {"created", "content"} & set(s.reasons)]
    if not checked:
        return []
    root = tempfile.mkdtemp(prefix="dgxspark-file-set.", dir=temp_root)
    try:
        places = _validation_layout(steps, root)
        for step in steps:
            place = places.get(step.path)
            if place is None:
                continue
            os.makedirs(os.path.dirname(place), mode=0o700, exist_ok=True)
            fd = os.open(place, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(step.data)
                os.fchmod(handle.fileno(), step.mode)
        failures = []
        for step in checked:
            rc, out, err = run(validation_argv(step.validate, places[step.path]))
            if rc != 0:
                failures.append({"path": step.path, "validate": step.validate, "rc": rc, "stdout": out, "stderr": err})
        return failures
    finally:
        shutil.rmtree(root, ignore_errors=True)


def validation_message(failures):
    """One sentence per failed validation: the file, the command, its rc and what it said."""
    parts = []
    for failure in failures:
        said = (failure["stderr"] or failure["stdout"] or "").strip()
        parts.append("file %s: validate %r exited %s%s" % (
            failure["path"], failure["validate"], failure["rc"], (": " + said) if said else " and said nothing"))
    return "; ".join(parts)


# --------------------------------------------------------------------------- writing


def _fsync_directory(directory):
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot sync a directory; the rename is done all the same
    finally:
        os.close(fd)


def write_atomically(path, data, mode, uid=None, gid=None):
    """Replace O(path) with O(data): a temporary file in the same directory gets the bytes,
    the owner (O(uid)/O(gid) where given) and O(mode), is flushed to disk, and is renamed
    over O(path). Readers see the old file or the new one, never a part."""
    directory, base = os.path.split(path)
    fd, temp = tempfile.mkstemp(dir=directory, prefix="." + base + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            st = os.fstat(handle.fileno())
            want_uid = -1 if uid is None or uid == st.st_uid else uid
            want_gid = -1 if gid is None or gid == st.st_gid else gid
            if want_uid != -1 or want_gid != -1:
                os.fchown(handle.fileno(), want_uid, want_gid)
            os.fchmod(handle.fileno(), mode)  # after chown, which may clear set-id bits
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)


def replace_symlink(path, src):
    """Point O(path) at O(src): a temporary symlink beside it is renamed over it, so the
    path is never missing."""
    directory, base = os.path.split(path)
    for _attempt in range(100):
        temp = os.path.join(directory, ".%s.%s.tmp" % (base, secrets.token_hex(4)))
        try:
            os.symlink(src, temp)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError("no free temporary name beside %s" % path)
    try:
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)


def _fix_attributes(step):
    """Owner, group and mode of an existing directory or regular file, in place."""
    uid = step.uid if "owner" in step.reasons else -1
    gid = step.gid if "group" in step.reasons else -1
    if uid != -1 or gid != -1:
        os.chown(step.path, uid, gid, follow_symlinks=False)
    if {"mode", "owner", "group"} & set(step.reasons):
        os.chmod(step.path, step.mode)  # also after a chown, which may clear set-id bits


def _apply_directory(step):
    if "created" in step.reasons:
        os.mkdir(step.path, 0o700)  # no wider than owner-only until its owner and mode are set
        if step.uid is not None or step.gid is not None:
            os.chown(step.path, -1 if step.uid is None else step.uid, -1 if step.gid is None else step.gid,
                     follow_symlinks=False)
        os.chmod(step.path, step.mode)
    else:
        _fix_attributes(step)


def _apply_file(step):
    if "created" in step.reasons or "content" in step.reasons:
        # an owner that is not managed is kept from the file being replaced
        uid = step.uid if step.uid is not None else step.current_uid
        gid = step.gid if step.gid is not None else step.current_gid
        write_atomically(step.path, step.data, step.mode, uid, gid)
    else:
        _fix_attributes(step)


def _apply_link(step):
    replace_symlink(step.path, step.src)


_APPLY = {"directory": _apply_directory, "file": _apply_file, "link": _apply_link}


def apply_file_set(steps):
    """Carry out a plan: directories (shallowest first), then files, then links. Returns the
    paths converged; raises ApplyError (with the paths done before it) on the first failure."""
    changes = changed_steps(steps)
    directories = sorted((s for s in changes if s.kind == "directory"), key=lambda s: s.path.count("/"))
    order = directories + [s for s in changes if s.kind == "file"] + [s for s in changes if s.kind == "link"]
    done = []
    for step in order:
        try:
            _APPLY[step.kind](step)
        except OSError as exc:
            raise ApplyError(step, exc, done) from None
        done.append(step.path)
    return done
