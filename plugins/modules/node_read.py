#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_read
short_description: Read packages, paths, units, commands, free space and the GPU of a node in one round trip
version_added: "0.1.0"
description:
  - Reads in one SSH exec what several tasks (C(stat), C(package_facts), C(systemd_service),
    M(dgxspark.cluster.disk_space), M(dgxspark.cluster.gpu_facts), C(docker info)) would read one
    round trip each, and returns it as data.
  - Runs like M(ansible.builtin.raw), as an action on the controller. The node needs no Python
    for it and no module is uploaded (about 0.1 s on four nodes against 0.55 s for a module task).
    The result is parsed on the controller, so a registered result is data that later tasks read
    without parsing it again.
  - The script only reads and always exits 0. File contents never leave the node, only their
    SHA-256. Packages are read with C(dpkg-query), paths with C(stat) (not following symlinks),
    C(sha256sum) and C(readlink), units with C(systemctl is-enabled) and C(is-active), free space
    with C(stat -f) on the path or its deepest existing ancestor, the GPU with the C(nvidia-smi)
    query of M(dgxspark.cluster.gpu_facts). Commands run with C(LC_ALL=C) and no standard input.
  - A spec that cannot be read, output that stops before its end, a path, unit, disk or command the
    read printed nothing for, free space that could not be measured, and C(nvidia-smi) output that
    does not fit the query fail the task with a message saying so.
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.raw
attributes:
  check_mode:
    support: full
    details: Only reads, so it reads in check mode too.
  diff_mode:
    support: none
  platform:
    details: Needs a POSIX shell on the node, and no Python; the command goes to the connection as it is.
    platforms: posix
  raw:
    support: full
options:
  spec:
    description: What to read; every key is optional.
    type: dict
    required: true
    suboptions:
      packages:
        description: Debian package names.
        type: list
        elements: str
      paths:
        description: Absolute paths to inspect.
        type: list
        elements: str
      units:
        description: systemd unit names.
        type: list
        elements: str
      commands:
        description: Read-only commands, name to argv; the name may not be C(gpu-query).
        type: dict
      disks:
        description: Absolute paths whose filesystem's free space is measured.
        type: list
        elements: str
      gpu:
        description:
          - V(true) queries the GPU as M(dgxspark.cluster.gpu_facts) does (C(nvidia-smi) on E(PATH) or in
            C(/usr/local/nvidia/bin)); an absolute path queries that C(nvidia-smi), as the module's
            O(dgxspark.cluster.gpu_facts#module:nvidia_smi) does.
        type: raw
        default: false
seealso:
  - module: ansible.builtin.raw
"""

EXAMPLES = r"""
- name: Read Docker's packages, its configuration, its unit and its runtimes in one call
  dgxspark.cluster.node_read:
    spec:
      packages: [docker-ce, docker.io]
      paths: [/etc/docker/daemon.json]
      units: [docker.service]
      commands:
        runtimes: [docker, info, --format, "{{ '{{' }}json .Runtimes{{ '}}' }}"]
  register: node

- name: Install Docker where none is installed
  ansible.builtin.apt:
    name: docker.io
  when: node.packages | length == 0
"""

RETURN = r"""
packages:
  description: Name to version of each installed package of the spec; missing ones are left out.
  type: dict
  returned: always
  sample: {"docker.io": "26.1.5+dfsg1-9+b9"}
paths:
  description:
    - Path to C(kind) (V(file), V(directory), V(link), another type, or V(null) when missing), C(mode)
      such as V(0644), C(uid), C(gid), C(owner), C(group), C(sha256) of a file and C(link), a symlink's target.
  type: dict
  returned: always
units:
  description:
    - Name to C(enabled) and C(active), judged as M(ansible.builtin.systemd_service) judges them, and
      C(is_enabled), C(is_active), what systemctl answered.
  type: dict
  returned: always
commands:
  description: Name to C(rc), C(stdout) and C(stderr).
  type: dict
  returned: always
disks:
  description:
    - One dict per path as M(dgxspark.cluster.disk_space) returns it, with C(path), C(checked_path),
      C(free_bytes) and C(total_bytes).
  type: list
  elements: dict
  returned: always
gpu:
  description:
    - C(nvidia_smi), the path found or V(''); C(facts), what M(dgxspark.cluster.gpu_facts) with
      C(required=false) sets; C(warning), set when C(nvidia-smi) exists but fails.
  type: dict
  returned: when the spec asks for the GPU
"""
