#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: bench_compare
short_description: Compare two benchmark reports side by side (Markdown, JSON, PNG) on the controller
version_added: "0.1.0"
description:
  - Reads two reports that C(playbooks/bench.yml) wrote (M(dgxspark.cluster.bench_report)'s C(<time>-<layout>.json)),
    A and B, and writes C(compare-<A>-vs-<B>.md) (every wave either run measured, side by side, and B's aggregate
    against A's), C(.json) (the same as data) and C(.png) (aggregate and per-request decode against concurrency,
    A solid, B dashed) under O(dest).
  - Without O(reports), takes the newest report of each layout in O(report_dir), the older one as A; that needs
    exactly two layouts there (for example the lane C(tp4x1) and the fleet C(tp1x4)).
  - Runs of different profiles are refused unless O(force), since their numbers do not measure the same thing.
  - Runs as an action on the controller; no node is involved. Relative paths are taken from the directory
    C(ansible-playbook) runs in.
  - A file that already holds the comparison is left alone, so a second run with the same reports changes nothing.
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Compares and reports whether a file would change; writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  reports:
    description:
      - The two reports, A then B, as a list or as the text C([A.json,B.json]) (what
        C(-e bench_compare_reports=[A.json,B.json]) passes).
      - Left out, the newest report of each of the two layouts in O(report_dir).
    type: raw
  report_dir:
    description: Directory holding the reports, searched when O(reports) is left out.
    type: path
    required: true
  dest:
    description: Directory the comparison is written to; defaults to B's directory.
    type: path
  force:
    description: Compare runs of different profiles anyway.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Compare the newest lane and fleet runs
  dgxspark.cluster.bench_compare:
    report_dir: reports/bench
  register: bench_compare

- name: Compare two named runs
  dgxspark.cluster.bench_compare:
    reports:
      - reports/bench/20260101T100000Z-tp4x1.json
      - reports/bench/20260101T110000Z-tp1x4.json
    report_dir: reports/bench
"""

RETURN = r"""
reports:
  description: The two reports compared (A, B), absolute.
  type: list
  elements: str
  returned: success
paths:
  description: The files written, by kind (C(markdown), C(json), C(png)).
  type: dict
  returned: success
markdown:
  description: The comparison's Markdown.
  type: str
  returned: success
comparison:
  description:
    - C(name); C(a) and C(b), each run's C(name), C(layout), C(profile) and C(date); C(profiles_differ);
      C(waves), one per wave (C(kind), C(label), C(concurrency)) with each run's C(ttft_p50), C(decode_p50),
      C(aggregate_tps) and C(prefix_cache_hit_rate) (V(null) for a run that did not measure it) and
      C(aggregate_change), B's aggregate against A's as a fraction.
  type: dict
  returned: success
"""
