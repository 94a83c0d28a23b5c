#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: disk_space
short_description: Free space on the filesystem that holds a path
version_added: "0.1.0"
description:
  - Reports the space available to unprivileged writers on the filesystem holding O(path).
  - When O(path) does not exist yet, its deepest existing ancestor is measured, so space can be
    checked before a directory is created.
  - With O(min_free_gb), fails when less is free.
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  path:
    description: Absolute path on the node.
    type: path
    required: true
  min_free_gb:
    description: Least free space in GB (10^9 bytes); the module fails below it.
    type: float
attributes:
  check_mode:
    support: full
    details: Only reads.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Require 200 GB for the model weights
  dgxspark.cluster.disk_space:
    path: /srv/models/DeepSeek-V4-Flash
    min_free_gb: 200
"""

RETURN = r"""
checked_path:
  description: The existing path that was measured.
  type: str
  returned: always
  sample: /srv
free_bytes:
  description: Bytes available.
  type: int
  returned: always
  sample: 512000000000
total_bytes:
  description: Size of the filesystem in bytes.
  type: int
  returned: always
  sample: 3840000000000
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._disk import disk_space


def main():
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "min_free_gb": {"type": "float"}},
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        result = disk_space(path)
    except (ValueError, OSError) as exc:
        module.fail_json(msg="cannot measure free space for %s: %s" % (path, exc))
    minimum = module.params["min_free_gb"]
    if minimum is not None and result["free_bytes"] < minimum * 1e9:
        module.fail_json(
            msg="%.1f GB free on the filesystem holding %s (measured at %s); %s GB is required"
            % (result["free_bytes"] / 1e9, path, result["checked_path"], minimum),
            **result
        )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
