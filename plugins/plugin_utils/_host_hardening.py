# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the host_hardening role writes and checks, as pure functions.

On a DGX Spark the GPU and the operating system share one memory pool: an engine that
takes the memory the OS needed wedges the node (ping answers, SSH does not). earlyoom
kills before the kernel's OOM killer would, and it is told which processes to prefer
(the engine's ranks) and which to avoid (what keeps the node reachable).

earlyoom matches ``--prefer`` and ``--avoid`` (POSIX extended regular expressions)
against a process's name as ``/proc/<pid>/comm`` holds it: at most 15 characters. A
longer name (``systemd-journald``) is cut by the kernel (``systemd-journal``), so the
regex is built from the names cut the same way, anchored, and a name ending in ``*``
matches every name that starts with the rest (``VLLM::*`` for vLLM's ``VLLM::Worker_TP0``).

Debian's earlyoom.service runs ``/usr/bin/earlyoom $EARLYOOM_ARGS`` from
``/etc/default/earlyoom``: systemd splits the value on whitespace and removes no quotes,
so no argument may hold a space, a quote or a backslash.

Standard library only: unit-tested without Ansible.
"""

from __future__ import annotations

import re

# The kernel keeps TASK_COMM_LEN - 1 characters of a process name.
COMM_LENGTH = 15
# Escaped in a bracket ([.]) rather than with a backslash, which the EnvironmentFile
# line would take for its own escape.
_ERE_SPECIAL = re.compile(r"([.$|()*+?{}])")
_UNSAFE_WORD = re.compile(r"[\s'\"\\]")
_SIZE = re.compile(r"\A[1-9][0-9]*[KMGT]?\Z")


# The sysctls the role's defaults set, with the range a 128 GB unified-memory node
# can live with (least, most) and why; another name is written as given.
SYSCTL_RANGES = {
    # Below 64 MiB the reserve is the kernel's own default and protects nothing; above
    # 8 GiB it takes memory the model and its KV cache need.
    "vm.min_free_kbytes": (65536, 8388608),
    # The kernel's own range (0 to 200 since Linux 5.8); above 60 (Ubuntu's default) the
    # engine's processes are swapped out before the weights' page cache is dropped.
    "vm.swappiness": (0, 60),
    # The kernel's own range (1 to 3000); below Linux's default of 10 reclaim starts later.
    "vm.watermark_scale_factor": (10, 3000),
}


class HostHardeningError(ValueError):
    """Settings that would give earlyoom, sysctl or journald something they cannot use."""


def _name_problem(name):
    if not isinstance(name, str) or not name.strip("*"):
        return "%r is not a process name" % (name,)
    if _UNSAFE_WORD.search(name):
        return "%r holds a space, quote or backslash, which the EARLYOOM_ARGS line cannot carry" % (name,)
    if re.search(r"[\^\[\]]", name):
        return "%r holds ^, [ or ], which cannot be matched literally on the EARLYOOM_ARGS line" % (name,)
    if "*" in name[:-1]:
        return "%r has a * before its end; only a trailing * (any name starting with the rest) is understood" % (name,)
    return None


def process_regex(names, variable="names"):
    """The anchored ERE that matches the process names O(names) as earlyoom sees them.

    Each name is cut to 15 characters, as the kernel cuts ``comm``; ``name*`` matches
    every name that starts with ``name``. Duplicates after cutting are dropped, the order
    kept.
    """
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)) or not names:
        raise HostHardeningError("%s=%r; expected a non-empty list of process names" % (variable, names))
    alternatives = []
    for name in names:
        problem = _name_problem(name)
        if problem:
            raise HostHardeningError("%s: %s" % (variable, problem))
        prefix = name.endswith("*")
        stem = name[:-1] if prefix else name
        stem = stem[:COMM_LENGTH]
        text = _ERE_SPECIAL.sub(r"[\1]", stem) + (".*" if prefix and len(stem) < COMM_LENGTH else "")
        if text not in alternatives:
            alternatives.append(text)
    return "^(%s)$" % "|".join(alternatives)


def _percent(value, variable, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise HostHardeningError("%s=%r; expected a number from %s to %s" % (variable, value, low, high))
    return ("%d" % value) if float(value).is_integer() else ("%g" % value)


def earlyoom_args(mem_percent, swap_percent, prefer, avoid, report_interval=3600, extra_args=None):
    """earlyoom's arguments (after the program name) as a list of words.

    ``-m``: act when available memory falls below O(mem_percent) percent; ``-s``: and
    free swap below O(swap_percent) percent (earlyoom acts only when both are low);
    ``-r``: a memory report every O(report_interval) seconds (0: none); ``--prefer`` and
    ``--avoid``: the regexes of :func:`process_regex`.
    """
    args = [
        "-m", _percent(mem_percent, "host_hardening_earlyoom_mem_percent", 1, 100),
        "-s", _percent(swap_percent, "host_hardening_earlyoom_swap_percent", 0, 100),
    ]
    if isinstance(report_interval, bool) or not isinstance(report_interval, int) or report_interval < 0:
        raise HostHardeningError(
            "host_hardening_earlyoom_report_interval=%r; expected whole seconds, 0 or more" % (report_interval,))
    args += ["-r", str(report_interval)]
    args += ["--prefer", process_regex(prefer, "host_hardening_earlyoom_prefer")]
    args += ["--avoid", process_regex(avoid, "host_hardening_earlyoom_avoid")]
    extra = extra_args or []
    if isinstance(extra, (str, bytes)) or not isinstance(extra, (list, tuple)):
        raise HostHardeningError("host_hardening_earlyoom_extra_args=%r; expected a list of words" % (extra,))
    for word in extra:
        if not isinstance(word, str) or not word or _UNSAFE_WORD.search(word):
            raise HostHardeningError(
                "host_hardening_earlyoom_extra_args holds %r; expected words without spaces, quotes or backslashes "
                "(systemd splits EARLYOOM_ARGS on whitespace and keeps quotes)" % (word,))
        if word in ("-m", "-s", "-r", "--prefer", "--avoid", "-M", "-S"):
            raise HostHardeningError(
                "host_hardening_earlyoom_extra_args holds %s, which the role sets from its own variables; "
                "set host_hardening_earlyoom_mem_percent, _swap_percent, _report_interval, _prefer or _avoid" % word)
    return args + list(extra)


def earlyoom_default_file(args, header="Ansible managed"):
    """The text of /etc/default/earlyoom that gives earlyoom O(args)."""
    for word in args:
        if _UNSAFE_WORD.search(word):
            raise HostHardeningError("earlyoom argument %r holds a space, quote or backslash" % (word,))
    return (
        "# %s\n"
        "# Read by earlyoom.service (ExecStart=/usr/bin/earlyoom $EARLYOOM_ARGS): systemd splits the\n"
        "# value on whitespace and keeps quotes, so no argument holds either.\n"
        "# Prefer the engine's ranks, spare what keeps the node reachable (dgxspark.cluster.host_hardening).\n"
        'EARLYOOM_ARGS="%s"\n' % (header, " ".join(args))
    )


def running_args_differ(cmdline, args):
    """Whether the earlyoom process whose /proc/<pid>/cmdline is O(cmdline) (NUL-separated,
    or the words as a list) runs with other arguments than O(args); True when none runs."""
    if isinstance(cmdline, str):
        words = [word for word in cmdline.split("\0") if word]
    else:
        words = [word for word in cmdline or [] if word]
    if not words:
        return True
    return words[1:] != list(args)


def settings_problems(settings):
    """Every problem with the role's inputs, one sentence each, naming the variable, what
    was found, what is expected and the fix. O(settings) maps each host_hardening_ variable
    to its value; an empty list means the role can run."""
    problems = []
    try:
        earlyoom_args(
            settings.get("host_hardening_earlyoom_mem_percent"),
            settings.get("host_hardening_earlyoom_swap_percent"),
            settings.get("host_hardening_earlyoom_prefer"),
            settings.get("host_hardening_earlyoom_avoid"),
            settings.get("host_hardening_earlyoom_report_interval", 3600),
            settings.get("host_hardening_earlyoom_extra_args"),
        )
    except HostHardeningError as exc:
        problems.append(str(exc))
    prefer = settings.get("host_hardening_earlyoom_prefer") or []
    avoid = settings.get("host_hardening_earlyoom_avoid") or []
    if isinstance(prefer, list) and isinstance(avoid, list):
        both = sorted({str(n) for n in prefer} & {str(n) for n in avoid})
        if both:
            problems.append(
                "host_hardening_earlyoom_prefer and host_hardening_earlyoom_avoid both name %s; expected each process "
                "in one of them. Remove it from one list." % ", ".join(both))
    sysctl = settings.get("host_hardening_sysctl")
    if not isinstance(sysctl, dict):
        problems.append("host_hardening_sysctl=%r; expected a mapping of sysctl name to value" % (sysctl,))
    else:
        for name, value in sorted(sysctl.items(), key=lambda item: str(item[0])):
            if not isinstance(name, str) or not re.match(r"\A[a-z0-9_]+(\.[a-z0-9_-]+)+\Z", name):
                problems.append("host_hardening_sysctl holds the name %r; expected a sysctl name such as "
                                "vm.min_free_kbytes" % (name,))
            elif isinstance(value, bool) or not isinstance(value, (int, str)) or _UNSAFE_WORD.search(str(value)) \
                    or str(value) == "":
                problems.append("host_hardening_sysctl %s=%r; expected a number or a word" % (name, value))
            elif name in SYSCTL_RANGES:
                least, most = SYSCTL_RANGES[name]
                if not re.match(r"\A[0-9]+\Z", str(value)) or not least <= int(value) <= most:
                    problems.append("host_hardening_sysctl %s=%r; expected a whole number from %d to %d for a "
                                    "128 GB unified-memory node (SYSCTL_RANGES in _host_hardening.py says why)"
                                    % (name, value, least, most))
    journald = settings.get("host_hardening_journald")
    if not isinstance(journald, dict):
        problems.append("host_hardening_journald=%r; expected a mapping of journald.conf [Journal] setting to value"
                        % (journald,))
    else:
        for name, value in sorted(journald.items(), key=lambda item: str(item[0])):
            if name.endswith(("MaxUse", "KeepFree", "MaxFileSize")) and not _SIZE.match(str(value)):
                problems.append("host_hardening_journald %s=%r; expected a size such as 2G or 512M" % (name, value))
            elif not isinstance(value, (int, str)) or isinstance(value, bool) or "\n" in str(value):
                problems.append("host_hardening_journald %s=%r; expected a one-line value" % (name, value))
    return problems
