#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_rsync
short_description: Run the rsync pull of the model weights, keeping how far it has come
version_added: "0.1.0"
description:
  - Runs O(argv) (an C(rsync) pull) as M(ansible.builtin.command) would, and returns its C(rc), C(stdout) and
    C(stderr) the same way, failing when it exits non-zero.
  - With O(progress_file), C(--info=progress2) is added to the command line; its progress lines are read as rsync
    prints them, counted into the progress file and left out of RV(stdout), which holds what rsync reported
    otherwise (C(--itemize-changes), C(--stats)).
  - Its action shows a line from the progress file every O(progress_interval) seconds while rsync runs.
author:
  - Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  argv:
    description: The rsync command line, the program first.
    type: list
    elements: str
    required: true
  expected_bytes:
    description:
      - About how many bytes rsync will send (the sizes of the files the peer lacks or holds damaged), so that the
        progress lines can say how much is left. Only shown, never checked.
    type: int
  progress_file:
    description:
      - A file on the node where the pull keeps its progress (bytes transferred), replaced atomically about twice per
        O(progress_interval). The action of this module sets it to a file of its temporary directory; leave it
        unset.
      - While it is set, a pull that no controller has polled for ten O(progress_interval) (at least two minutes)
        is stopped, as it would be when the connection drops.
    type: path
  progress_interval:
    description: Seconds between the progress lines the action shows while rsync runs; V(0) for none.
    type: float
    default: 10
seealso:
  - module: ansible.builtin.command
"""

EXAMPLES = r"""
- name: Model weights | Pull the weights from the source
  dgxspark.cluster.weights_rsync:
    argv: [rsync, --archive, --partial, --stats, --itemize-changes, "rsync://192.168.100.11:873/weights/", /srv/models/tiny/]
    expected_bytes: 158913789952
  register: pulled
  changed_when: pulled.stdout_lines | select('match', '^[<>ch.*][fdLDS]') | list | length > 0
"""

RETURN = r"""
rc:
  description: The exit status of rsync.
  returned: always
  type: int
stdout:
  description: What rsync printed, without its progress lines.
  returned: always
  type: str
stderr:
  description: What rsync printed on standard error.
  returned: always
  type: str
cmd:
  description: The command line that ran.
  returned: always
  type: list
  elements: str
transferred_bytes:
  description: Bytes of the files rsync transferred, by its last progress line; 0 without O(progress_file).
  returned: always
  type: int
seconds:
  description: Seconds rsync ran.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._progress import (
    ProgressAbandoned,
    ProgressFile,
    abandon_after,
    writer_interval,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils._rsync_output import run_rsync


def main():
    module = AnsibleModule(
        argument_spec=dict(
            argv=dict(type="list", elements="str", required=True),
            expected_bytes=dict(type="int"),
            progress_file=dict(type="path"),
            progress_interval=dict(type="float", default=10),
        ),
        supports_check_mode=False,
    )
    params = module.params
    argv = list(params["argv"])
    if not argv:
        module.fail_json(msg="argv is empty; expected the rsync command line")
    argv[0] = module.get_bin_path(argv[0], required=True) if "/" not in argv[0] else argv[0]
    if params["progress_file"]:
        argv.insert(1, "--info=progress2")
    progress = ProgressFile(params["progress_file"], "weights sync", total=params["expected_bytes"] or None,
                            every=writer_interval(params["progress_interval"]),
                            abandon_after=abandon_after(params["progress_interval"]))
    started = time.monotonic()
    try:
        progress.update(force=True)
        rc, output, stderr = run_rsync(argv, lambda transferred: progress.update(done=transferred))
    except ProgressAbandoned as exc:
        module.fail_json(msg="the weights sync: %s" % exc, cmd=argv)
    except OSError as exc:
        module.fail_json(msg="cannot run %s: %s" % (argv[0], exc), cmd=argv)
    progress.finish(done=output.transferred)
    result = dict(rc=rc, stdout=output.stdout, stderr=stderr, cmd=argv, transferred_bytes=output.transferred,
                  seconds=round(time.monotonic() - started, 2), changed=True)
    if rc != 0:
        module.fail_json(msg="rsync exited %d: %s" % (rc, stderr.strip() or output.stdout.strip()[-2000:]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
