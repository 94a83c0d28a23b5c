# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import datetime

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.cluster.plugins.plugin_utils import _run_lock

ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "playbook": {"type": "str", "required": True},
    "path": {"type": "path", "default": "/var/lib/dgxspark/run.lock"},
    "break_lock": {"type": "bool", "default": False},
}


class ActionModule(ActionBase):
    """Names this run on the controller (plugin_utils/_run_lock.py: the ansible-playbook
    process, its start time, the user and host), swaps the lock file on the node with the
    run_lock module, and judges a lock another run holds: taken over when that run was
    this controller's and is gone, broken when asked, refused otherwise."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)
    _supports_check_mode = True
    _supports_async = False

    def _swap(self, task_vars, args, holder, replace=None):
        module_args = dict(args, holder=holder)
        if replace is not None:
            module_args["replace"] = replace
        return self._execute_module(module_name="dgxspark.cluster.run_lock", module_args=module_args,
                                    task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validated.error_messages:
            return dict(result, failed=True, msg="run_lock: %s" % "; ".join(validated.error_messages))
        args = validated.validated_parameters
        now = datetime.datetime.now(datetime.UTC)
        me = _run_lock.this_run(args["playbook"], now)
        lock_host = (task_vars or {}).get("inventory_hostname", "the engine head")
        if self._task.delegate_to:
            lock_host = self._task.delegate_to
        path = args["path"]
        check_mode = self._task.check_mode
        swapped = self._swap(task_vars, args, me)
        if swapped.get("failed"):
            return dict(result, **swapped)
        result.update(changed=False, path=path, previous=swapped.get("previous"), lock=swapped.get("lock"),
                      outcome=swapped.get("outcome"))
        if args["state"] == "absent":
            # Check mode took no lock: there is none of this run's to find.
            warning = None if check_mode else _run_lock.release_warning(
                swapped["outcome"], swapped.get("previous"), lock_host, path, now)
            if warning:
                result.setdefault("warnings", []).append(warning)
            return result
        if swapped["outcome"] != "busy":
            return result
        holder = swapped["previous"]
        decision = _run_lock.decide(holder, me, args["break_lock"])
        if decision == "refuse":
            if check_mode:
                result.setdefault("warnings", []).append(
                    _run_lock.check_mode_warning(holder, lock_host, path, now))
                return dict(result, outcome="refused")
            return dict(result, failed=True, outcome="refused",
                        msg=_run_lock.refusal(holder, me, lock_host, path, now))
        again = self._swap(task_vars, args, me, replace=holder)
        if again.get("failed"):
            return dict(result, **again)
        if again["outcome"] == "taken":
            # Its holder released it in between.
            return dict(result, outcome="taken", previous=None, lock=again.get("lock"))
        if again["outcome"] != "taken_over":
            # Another run swapped the lock in between: it holds it now.
            taker = again.get("previous") or holder
            return dict(result, failed=not check_mode, outcome="refused", previous=taker, lock=taker,
                        msg=_run_lock.refusal(taker, me, lock_host, path, now))
        warning = (_run_lock.break_warning if decision == "break" else _run_lock.take_over_warning)(
            holder, lock_host, path, now, check_mode)
        result.setdefault("warnings", []).append(warning)
        return dict(result, outcome="broken" if decision == "break" else "taken_over", lock=again.get("lock"))
