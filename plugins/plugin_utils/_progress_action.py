# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run a long module with a progress line per poll.

Ansible shows nothing while a task runs. An action plugin's code runs in the
worker process, whose Display is proxied to the main process's output
(``Display.set_queue`` in ``WorkerProcess``), so a line displayed here shows
while the task still runs, on the default callback and without ``-v``.

The action starts its module through the async wrapper, as ``async:`` does,
with ``progress_file`` set to a file in the job's temporary directory (the
wrapper removes it with the job), then every ``progress_interval`` seconds
runs one shell command on the node (``poll_command``: no module, no
interpreter start) that reads the progress record and the job file, and
displays the line. Once the job file holds the module's result, it is parsed
as a synchronous run parses a module's output and returned unchanged; the
job file is removed.

A step that needs no progress runs as before, synchronously: check mode,
``progress_interval: 0``, a task with ``async:`` of its own, and what the
action's ``wants_progress`` rules out (such as a read-only state).
"""

from __future__ import annotations

import shlex
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash
from ansible.vars.clean import remove_internal_keys

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._progress import (
    ProgressError,
    done_line,
    poll_command,
    poll_interval,
    progress_line,
    split_poll,
)

display = Display()

# The async wrapper kills its job after a time limit; these steps had none.
# A week stands for none: a step nobody follows stops long before
# (module_utils/_progress.py, abandon_after).
JOB_LIMIT_SECONDS = 7 * 24 * 3600
# Polls in a row that may find no job file before the job counts as lost.
MISSING_JOB_POLLS = 3
# The first poll comes soon, so a step with little to do ends at once.
FIRST_POLL_SECONDS = 1.0


class ProgressActionBase(ActionBase):
    """The action of a module with ``progress_file`` and
    ``progress_interval`` options. Subclasses set ``PROGRESS_VARIABLE`` (the
    role variable named in errors) and may override ``wants_progress`` and
    ``progress_label``."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = True
    PROGRESS_VARIABLE = "progress_interval"
    sleep = staticmethod(time.sleep)

    def wants_progress(self, args):
        """Whether the step with module arguments O(args) can take long."""
        return True

    def progress_label(self, args, record):
        """The words before the colon of a progress line; None: the record's phase."""

    def moved(self, result):
        """(bytes, seconds) that the step's O(result) says it moved, for the
        closing line; (0, 0) shows none."""
        return 0, 0

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        host = task_vars.get("inventory_hostname", "")
        args = dict(self._task.args)
        try:
            interval = poll_interval(args.get("progress_interval", 10), host, self.PROGRESS_VARIABLE)
        except ProgressError as exc:
            return dict(result, failed=True, msg=str(exc))
        if (self._task.check_mode or self._task.async_val or not interval or args.get("progress_file")
                or not self.wants_progress(args)):
            return self._run_as_before(result, task_vars)
        result.update(self._run_followed(host, args, interval, task_vars))
        return result

    def _run_as_before(self, result, task_vars):
        """The module run as ansible.builtin.normal runs it; a task with
        async: of its own is polled by the executor, as before."""
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _run_followed(self, host, args, interval, task_vars):
        if self._connection._shell.tmpdir is None:
            self._make_tmp_path()
        progress_path = self._connection._shell.join_path(self._connection._shell.tmpdir, "progress.json")
        args["progress_file"] = progress_path
        # The wrapper reads its time limit from the task, as for async:; the
        # executor must not poll the result again, so it is reset at once.
        tmpdir = self._connection._shell.tmpdir
        self._task.async_val = JOB_LIMIT_SECONDS
        try:
            started = self._execute_module(module_args=args, task_vars=task_vars, wrap_async=True)
        finally:
            self._task.async_val = 0
        job_path = started.get("results_file")
        if started.get("failed") or not job_path:
            # The wrapper did not start the job, so nothing removes its directory but this.
            self._remove_tmp_path(tmpdir)
            return started
        command = poll_command(progress_path, job_path)
        missing = 0
        wait = min(FIRST_POLL_SECONDS, interval)
        while True:
            self.sleep(wait)
            wait = interval
            polled = self._low_level_execute_command(command, sudoable=True)
            record, job_text, finished = split_poll(polled.get("stdout", ""))
            if finished:
                break
            missing = missing + 1 if not job_text else 0
            if missing >= MISSING_JOB_POLLS:
                raise AnsibleActionFail(
                    "%s: the job file %s of this step is gone (rc %s: %s); the step's result is lost. Look for a "
                    "leftover process on the node before running it again" % (
                        host, job_path, polled.get("rc"), (polled.get("stderr") or "").strip()))
            if record is not None:
                display.display(progress_line(host, record, self.progress_label(args, record)))
        self._low_level_execute_command("rm -f %s" % shlex.quote(job_path), sudoable=True)
        result = self._module_result(job_text)
        count, seconds = self.moved(result) if not result.get("failed") else (0, 0)
        if count:
            # Also when no poll found the step still running: the line says what it moved.
            display.display(done_line(host, self.progress_label(args, {}), count, seconds))
        return result

    def _module_result(self, job_text):
        """The module's result from the job file, parsed and cleaned as
        ``_execute_module`` does with a synchronous module's output."""
        data = self._parse_returned_data({"stdout": job_text, "stderr": "", "rc": 0}, "legacy")
        data.pop("_ansible_suppress_tmpdir_delete", None)
        remove_internal_keys(data)
        for stream in ("stdout", "stderr"):
            if stream in data and stream + "_lines" not in data:
                data[stream + "_lines"] = (data.get(stream) or "").splitlines()
        return data
