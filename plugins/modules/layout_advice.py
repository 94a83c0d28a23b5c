#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: layout_advice
short_description: Recommend the layout that serves the cluster's recorded traffic best, on the controller
version_added: "0.1.0"
description:
  - Weighs the traffic Prometheus recorded from the replica heads (O(history), which the monitoring role's C(history)
    entry point sets as C(monitoring_history)) against the newest field-profile report of C(playbooks/bench.yml) of
    each layout in O(report_dir), and writes C(<window end>-advice.md) and C(.json) under O(dest).
  - The traffic is the share of the busy time (a request or more in flight) at each number of requests in flight, the
    window's mean prompt and output tokens and its prefix-cache hit rate. Each layout's curve gives, per
    concurrency, TTFT cold and on a prefix-cache hit, decode tok/s per stream and aggregate tok/s; a number in flight
    between two measured ones is read on the line between them, one past the highest measured at the highest (said
    in the reasons).
  - Per request, the curve is weighed by streams (each number in flight by its share times the requests it holds),
    TTFT mixing hit and cold by the hit rate; the layout that answers the traffic's mean request (TTFT plus the mean
    output at the decode rate) soonest is recommended. The current layout is kept when it comes within 5% of it.
  - No recommendation, with the reasons, when the window holds less than O(min_history) of samples or fewer than
    O(min_requests) requests, when nothing was in flight, or when fewer than two layouts were measured; each
    measured layout's expectation is still reported.
  - Runs as an action on the controller; no node is involved. Relative paths are taken from the directory
    C(ansible-playbook) runs in. A file that already holds the advice is left alone.
author: Contributors to the dgxspark.cluster collection (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Weighs and reports whether a file would change; writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  history:
    description:
      - The monitoring role's C(monitoring_history), which its C(history) entry point sets; C(window) (C(start), C(end),
        C(seconds), C(step)), C(in_flight) and C(totals), Prometheus's answers as M(ansible.builtin.uri) returned them.
    type: dict
    required: true
  report_dir:
    description: Directory holding the reports of C(playbooks/bench.yml) (C(<time>-<layout>.json)).
    type: path
    required: true
  current_layout:
    description: The layout the cluster runs, C(tp<tensor parallel>x<replicas>) (C(tp4x1), C(tp2x2)).
    type: str
    required: true
  min_history:
    description: Samples the window must hold to decide, seconds or a Prometheus duration.
    type: raw
    default: 1d
  min_requests:
    description: Requests the window must hold to decide.
    type: int
    default: 100
  dest:
    description: Directory the advice is written to.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Weigh the last two weeks against the newest bench run of each layout
  dgxspark.cluster.layout_advice:
    history: "{{ hostvars[groups['monitoring'][0]].monitoring_history }}"
    report_dir: reports/bench
    current_layout: tp4x1
    dest: reports/advise
"""

RETURN = r"""
advice:
  description:
    - C(decided); C(recommendation) (a layout, V(null) when undecided), C(current), C(switch), C(settings) (the engine
      settings of the recommendation) and C(command); C(reasons) and, when undecided, C(undecided) (why);
      C(layouts), per measured layout its C(report), C(ttft_s), C(decode_tps_per_stream), C(mean_request_s),
      C(aggregate_tps), C(measured_up_to) and C(beyond_measured); C(traffic) (C(samples), C(step), C(seconds),
      C(busy_seconds), C(busy_fraction), C(in_flight) (share of the busy time per number in flight),
      C(p95_in_flight), C(max_in_flight), C(requests), C(prompt_tokens_mean), C(output_tokens_mean),
      C(prefix_cache_hit_rate)); C(monitoring_host).
  type: dict
  returned: success
markdown:
  description: The advice's Markdown.
  type: str
  returned: success
paths:
  description: The files written, by kind (C(markdown), C(json)).
  type: dict
  returned: success
"""
