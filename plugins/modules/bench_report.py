#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: bench_report
short_description: Write a benchmark run's report (Markdown, JSON, PNG) on the controller
version_added: "0.1.0"
description:
  - Computes every number of the report from the raw run that C(playbooks/bench.yml) collected (per-request
    timings, C(/metrics) lines before and after each wave, power and NIC counter samples), with the functions of
    C(module_utils/_bench.py), and writes C(<name>.json) (the raw run and the computed summary),
    C(<name>.md) (tables shaped like the field report's) and C(<name>.png) (aggregate and per-request decode
    against concurrency) under O(dest).
  - "Run on the controller (C(hosts: localhost))."
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  raw:
    description: The raw run, with keys C(meta), C(config), C(waves), C(samples) and, for the community profile, C(community).
    type: dict
    required: true
  dest:
    description: Directory the three files are written to; created when missing.
    type: path
    required: true
  name:
    description: File name without extension, for example C(20260101T120000-tp4x1).
    type: str
    required: true
attributes:
  check_mode:
    support: full
    details: Computes the summary, writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Write the report
  dgxspark.cluster.bench_report:
    raw: "{{ bench_raw }}"
    dest: "{{ bench_report_controller_dir }}"
    name: "{{ bench_run_name }}"
"""

RETURN = r"""
paths:
  description: The files written, by kind (C(json), C(markdown), C(png)).
  type: dict
  returned: always
markdown:
  description: The report's Markdown.
  type: str
  returned: always
summary:
  description: Per wave the computed numbers; the quality verdicts; C(quality_passed); C(spec_decode_measured).
  type: dict
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._bench import (
    BenchError,
    build_summary,
    markdown,
    plot_series,
)
from ansible_collections.dgxspark.cluster.plugins.module_utils._png import line_plot


def main():
    module = AnsibleModule(
        argument_spec={"raw": {"type": "dict", "required": True}, "dest": {"type": "path", "required": True},
                       "name": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    raw, dest, name = module.params["raw"], module.params["dest"], module.params["name"]
    try:
        summary = build_summary(raw)
        text = markdown(raw, summary)
    except (BenchError, KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg="cannot build the benchmark report %s: %s" % (name, exc))
    paths = {kind: os.path.join(dest, name + ext) for kind, ext in (("json", ".json"), ("markdown", ".md"),
                                                                    ("png", ".png"))}
    if not module.check_mode:
        os.makedirs(dest, exist_ok=True)
        with open(paths["json"], "w", encoding="utf-8") as handle:
            json.dump(dict(raw, summary=summary), handle, indent=1, sort_keys=True)
            handle.write("\n")
        with open(paths["markdown"], "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        with open(paths["png"], "wb") as handle:
            handle.write(line_plot(plot_series(summary), "DECODE VS CONCURRENCY: " + raw["meta"]["layout"],
                                   "CONCURRENCY", "TOK/S"))
    module.exit_json(changed=not module.check_mode, paths=paths, markdown=text, summary=summary)


if __name__ == "__main__":
    main()
