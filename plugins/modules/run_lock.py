#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: run_lock
short_description: Take or release the cluster's run lock on the engine head
version_added: "0.1.0"
description:
  - One run at a time changes the cluster's nodes. A second C(ansible-playbook) against the same cluster (two
    operators, a cron job) would stop the first run's image sender and rsync daemon; the lock refuses it, naming the
    run that holds it.
  - The lock is a JSON file on the engine head (O(path)) naming the run that holds it, with the user and the controller
    host, the playbook, since when (UTC), and the controller's C(ansible-playbook) process (its pid, its start time
    and the controller's boot id, so that a reused pid is not taken for the run).
  - The action, on the controller, names this run (O(holder) is filled in there) and judges a lock another run
    holds. A holder that ran on this controller and whose process is gone, or has another start time, ended
    without releasing the lock (a failed or killed run), and the lock is taken over, with a warning naming it. A
    live holder on this controller, or one on another controller (which cannot be checked from here), refuses
    the run, naming the holder, its playbook and age and how to break the lock; O(break_lock) (the playbooks
    pass C(dgxspark_run_lock_break)) takes it anyway, with a warning naming the broken holder.
  - O(state=absent) removes the lock only when this run holds it for this O(playbook); a playbook imported by the
    one that took it leaves it. A lock another run holds is left, with a warning.
  - On the node, every change is a compare-and-swap under C(flock) of the lock's directory, the record written to
    a temporary file renamed over the lock (mode C(0644)).
  - The lock is the run's bookkeeping, not the node's configuration; the task never reports a change, so a
    converged cluster's run still reports C(changed=0).
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the lock and says what a run would do (take it, take it over, break it, be refused); writes nothing
      and never fails on a held lock, which it names in a warning.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  state:
    description: V(present) takes the lock for this run, V(absent) releases it.
    type: str
    choices: [present, absent]
    default: present
  playbook:
    description: The playbook that takes or releases the lock (V(site.yml)); recorded in the lock.
    type: str
    required: true
  path:
    description: The lock file on the engine head; its directory is created (mode C(0755)) when missing.
    type: path
    default: /var/lib/dgxspark/run.lock
  break_lock:
    description:
      - Take the lock whoever holds it, with a warning naming the holder. For a lock left by a run on another
        controller that has ended (or a controller that is gone); the playbooks pass C(dgxspark_run_lock_break).
    type: bool
    default: false
  holder:
    description:
      - This run's record (V(user), V(controller), V(boot_id), V(pid), V(start), V(playbook), V(since)). Filled in
        by the action on the controller; not set in a task.
    type: dict
  replace:
    description:
      - The record the action judged stale or broke; the lock is taken only while the file still holds exactly
        it. Set by the action; not set in a task.
    type: dict
"""

EXAMPLES = r"""
- name: Run | Take the cluster's run lock on the engine head
  dgxspark.cluster.run_lock:
    playbook: site.yml
    break_lock: "{{ dgxspark_run_lock_break | default(false) | bool }}"
  delegate_to: spark1
  run_once: true

- name: Run | Release the cluster's run lock
  dgxspark.cluster.run_lock:
    state: absent
    playbook: site.yml
  delegate_to: spark1
  run_once: true
"""

RETURN = r"""
outcome:
  description:
    - V(taken) (the lock was free), V(held) (this run held it already), V(taken_over) (a run on this controller
      that ended without releasing it held it), V(broken) (O(break_lock) took it from its holder), V(refused),
      V(released), V(kept) (held by this run for the playbook that imported this one), V(free) (no lock to
      release), V(other) (another run holds it; left). In check mode, what a run would do.
  type: str
  returned: always
  sample: taken
lock:
  description: The record the lock holds after the task (this run's when taken), V(null) when it is free.
  type: dict
  returned: always
  sample:
    user: alice
    controller: ops1
    boot_id: 3f0c6c1e-8a38-4d52-9a55-0d4b0f4a2f10
    pid: 41234
    start: 918273
    playbook: site.yml
    since: "2026-12-06T06:42:22Z"
previous:
  description: The record the lock held before the task, V(null) when it was free.
  type: dict
  returned: always
path:
  description: The lock file.
  type: str
  returned: always
  sample: /var/lib/dgxspark/run.lock
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._run_lock_file import swap


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "playbook": {"type": "str", "required": True},
            "path": {"type": "path", "default": "/var/lib/dgxspark/run.lock"},
            "break_lock": {"type": "bool", "default": False},
            "holder": {"type": "dict"},
            "replace": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not params["holder"]:
        module.fail_json(msg="run_lock: holder is not set; the dgxspark.cluster.run_lock action fills it in "
                             "(run the module through its action, not with a holder of your own)")
    holder = dict(params["holder"], playbook=params["playbook"])
    try:
        outcome, previous = swap(params["path"], params["state"], holder, params["replace"], module.check_mode)
    except OSError as exc:
        module.fail_json(msg="run_lock: cannot %s the run lock %s: %s"
                             % ("take" if params["state"] == "present" else "release", params["path"], exc))
    lock = holder if outcome in ("taken", "taken_over") else (None if outcome in ("released", "free") else previous)
    module.exit_json(changed=False, outcome=outcome, lock=lock, previous=previous, path=params["path"])


if __name__ == "__main__":
    main()
