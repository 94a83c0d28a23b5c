#!/usr/bin/python
# Copyright: Contributors to the dgxspark.cluster collection
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_facts
short_description: Gather facts about the NVIDIA GPUs of a DGX Spark node from nvidia-smi
version_added: 0.1.0
description:
  - Runs C(nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits) once and returns
    one dictionary per GPU as the fact RV(ansible_facts.dgxspark_gpus), with numbers typed.
  - On a DGX Spark the GB10 GPU shares its memory with the CPU, so
    RV(ansible_facts.dgxspark_gpus[].memory_total_mib) is
    V(null) there (C(nvidia-smi) prints C([N/A])); the power limit is V(null) too.
  - Readings that C(nvidia-smi) reports as C(N/A) or C(Not Supported) are returned as V(null).
  - Nothing on the host is changed; the module reports C(changed=false) and runs the same
    in check mode.
options:
  nvidia_smi:
    description:
      - Path to the C(nvidia-smi) binary.
      - When not set, C(nvidia-smi) is searched on E(PATH), then in C(/usr/local/nvidia/bin).
    type: path
  required:
    description:
      - With V(true), fail when C(nvidia-smi) is missing, exits non-zero, or lists no GPU.
      - With V(false), return RV(ansible_facts.dgxspark_gpus=[]) and
        RV(ansible_facts.dgxspark_gpu_present=false) in those cases instead, with a warning
        when C(nvidia-smi) exists but fails.
      - Output that cannot be parsed, and GPUs of one host that report different driver
        versions, fail the module either way.
    type: bool
    default: true
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: The module only reads; it runs C(nvidia-smi) in check mode too.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in --diff mode).
    support: none
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
notes:
  - The query fields (checked against a real 580.159.04 driver, tests/unit/fixtures/gpu) are
    C(index), C(uuid), C(name), C(pci.bus_id), C(driver_version),
    C(compute_cap), C(memory.total), C(power.draw), C(power.limit), C(temperature.gpu),
    C(persistence_mode), C(compute_mode), C(mig.mode.current), C(clocks.sm), C(clocks.max.sm)
    and C(clocks_event_reasons.active); each is listed by
    C(nvidia-smi --help-query-gpu) of the 580 driver series that DGX OS ships for the GB10.
  - A driver that refuses one of the clock fields as unknown (an older one) is asked again
    without it, with a warning; the facts from that field then read V(null).
requirements:
  - The NVIDIA driver and its C(nvidia-smi) on the target.
author:
  - Contributors to the dgxspark.cluster collection (!UNKNOWN)
"""

EXAMPLES = r"""
- name: GPU | Gather GPU facts
  dgxspark.cluster.gpu_facts:

- name: GPU | Check for a driver that can run our images
  ansible.builtin.assert:
    that:
      - ansible_facts['dgxspark_gpu_count'] == 1
      - ansible_facts['dgxspark_gpus'][0]['compute_cap'] == '12.1'
      - ansible_facts['dgxspark_gpu_driver_version'] is version('580.95.05', '>=')
    fail_msg: "Found {{ ansible_facts['dgxspark_gpus'] }}; want one GB10 on driver 580.95.05 or newer"

- name: GPU | Gather GPU facts where a GPU may be missing (the control node, say)
  dgxspark.cluster.gpu_facts:
    required: false

- name: GPU | Use an nvidia-smi outside PATH
  dgxspark.cluster.gpu_facts:
    nvidia_smi: /usr/local/nvidia/bin/nvidia-smi
"""

RETURN = r"""
ansible_facts:
  description: The GPU facts.
  returned: always
  type: dict
  contains:
    dgxspark_gpus:
      description:
        - One dictionary per GPU, in the order of C(nvidia-smi).
        - Empty when no GPU was found and O(required=false).
      returned: always
      type: list
      elements: dict
      contains:
        index:
          description: Zero-based index of the GPU (can change at each boot).
          type: int
          sample: 0
        uuid:
          description: Unique, immutable identifier of the GPU.
          type: str
          sample: GPU-3a1f07c2-5b8e-4d19-a6e0-7c2b9d41f5e8
        name:
          description: Product name.
          type: str
          sample: NVIDIA GB10
        pci_bus_id:
          description: PCI bus id as C(domain:bus:device.function), in hex.
          type: str
          sample: 0000000F:01:00.0
        driver_version:
          description: Version of the NVIDIA driver.
          type: str
          sample: 580.95.05
        compute_cap:
          description: CUDA compute capability as C(MAJOR.MINOR).
          type: str
          sample: "12.1"
        compute_cap_major:
          description: Major part of RV(ansible_facts.dgxspark_gpus[].compute_cap).
          type: int
          sample: 12
        compute_cap_minor:
          description: Minor part of RV(ansible_facts.dgxspark_gpus[].compute_cap).
          type: int
          sample: 1
        memory_total_mib:
          description: Dedicated GPU memory in MiB; V(null) on a GB10, whose memory is unified.
          type: int
          sample: null
        power_draw_w:
          description: Power draw in watts at the time of the query.
          type: float
          sample: 4.05
        power_limit_w:
          description: Software power limit in watts; V(null) where there is none (GB10).
          type: float
          sample: null
        temperature_gpu_c:
          description: Core GPU temperature in degrees Celsius.
          type: int
          sample: 36
        persistence_mode:
          description: Whether persistence mode is enabled; V(null) where not supported.
          type: bool
          sample: true
        compute_mode:
          description: Compute mode, such as C(Default) or C(Exclusive_Process).
          type: str
          sample: Default
        mig_mode_current:
          description: Current MIG mode (C(Enabled), C(Disabled)); V(null) where there is no MIG (GB10).
          type: str
          sample: null
        clocks_sm_mhz:
          description: Current SM clock in MHz.
          type: int
          sample: 2418
        clocks_max_sm_mhz:
          description: Highest SM clock the GPU can run at, in MHz.
          type: int
          sample: 3003
        clock_event_reasons_active:
          description:
            - The clock-event (throttle) reasons active now, as NVML's bitmask
              (C(nvidia-smi) prints it in hex, such as C(0x0000000000000001)).
          type: int
          sample: 1
        clock_event_reasons:
          description:
            - RV(ansible_facts.dgxspark_gpus[].clock_event_reasons_active) decoded into names, in bit order
              (C(gpu_idle), C(applications_clocks_setting), C(sw_power_cap), C(hw_slowdown), C(sync_boost),
              C(sw_thermal_slowdown), C(hw_thermal_slowdown), C(hw_power_brake_slowdown),
              C(display_clock_setting)); a bit NVML does not name reads C(unknown_0x...).
            - An empty list when the clocks run unhindered.
          type: list
          elements: str
          sample: [gpu_idle]
    dgxspark_gpu_count:
      description: Number of GPUs found.
      returned: always
      type: int
      sample: 1
    dgxspark_gpu_driver_version:
      description: The driver version all GPUs report; V(null) when no GPU was found.
      returned: always
      type: str
      sample: 580.95.05
    dgxspark_gpu_present:
      description: Whether at least one GPU was found.
      returned: always
      type: bool
      sample: true
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.cluster.plugins.module_utils._gpu import (
    QUERY_FIELDS,
    GpuDriverMismatchError,
    GpuQueryError,
    build_query_argv,
    common_driver_version,
    parse_query_gpu,
    refused_optional_field,
    with_all_keys,
)

C_LOCALE = {"LC_ALL": "C", "LANGUAGE": "C"}
NVIDIA_SMI_OPT_DIRS = ["/usr/local/nvidia/bin"]


def absent_facts():
    return {
        "dgxspark_gpus": [],
        "dgxspark_gpu_count": 0,
        "dgxspark_gpu_driver_version": None,
        "dgxspark_gpu_present": False,
    }


class GpuFacts:
    def __init__(self, module):
        self.module = module
        self.required = module.params["required"]

    def missing(self, msg, **details):
        """No usable GPU: fail when one is required, else return the absent facts."""
        if self.required:
            self.module.fail_json(msg=msg + "; set required=false where a GPU may be missing", **details)
        if details.get("rc"):
            self.module.warn(msg)
        self.module.exit_json(changed=False, ansible_facts=absent_facts())

    def find_nvidia_smi(self):
        path = self.module.params["nvidia_smi"]
        if path:
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
            self.missing(
                "nvidia_smi=%s is not an executable file; expected the NVIDIA driver's nvidia-smi there" % path
            )
        found = self.module.get_bin_path("nvidia-smi", required=False, opt_dirs=NVIDIA_SMI_OPT_DIRS)
        if not found:
            self.missing(
                "nvidia-smi was not found on PATH nor in %s; expected the NVIDIA driver to be installed"
                % ", ".join(NVIDIA_SMI_OPT_DIRS)
            )
        return found

    def run(self):
        nvidia_smi = self.find_nvidia_smi()
        fields = list(QUERY_FIELDS)
        while True:
            cmd = build_query_argv(nvidia_smi, fields)
            rc, out, err = self.module.run_command(cmd, environ_update=C_LOCALE)
            refused = rc != 0 and refused_optional_field(out + err, fields)
            if not refused:
                break
            self.module.warn("%s does not know the field %s (an older driver?); its facts read null" % (cmd[0], refused))
            fields.remove(refused)
        if rc != 0:
            self.missing(
                "%s exited %d; expected 0 and one CSV line per GPU (is the NVIDIA driver loaded?): %s"
                % (cmd[0], rc, (err or out).strip()),
                rc=rc, stdout=out, stderr=err, cmd=cmd,
            )
        try:
            gpus = with_all_keys(parse_query_gpu(out, fields), QUERY_FIELDS)
        except GpuQueryError as exc:
            self.module.fail_json(
                msg="nvidia-smi printed what the query did not ask for: %s" % exc,
                rc=rc, stdout=out, stderr=err, cmd=cmd,
            )
        try:
            driver_version = common_driver_version(gpus)
        except GpuDriverMismatchError as exc:
            self.module.fail_json(
                msg="%s; expected one driver version on all GPUs of a host" % exc,
                rc=rc, stdout=out, stderr=err, cmd=cmd, gpus=gpus,
            )
        except GpuQueryError as exc:
            self.module.fail_json(msg=str(exc), rc=rc, stdout=out, stderr=err, cmd=cmd, gpus=gpus)
        if not gpus:
            self.missing(
                "%s listed no GPU; expected at least one" % cmd[0],
                rc=rc, stdout=out, stderr=err, cmd=cmd,
            )
        self.module.exit_json(
            changed=False,
            ansible_facts={
                "dgxspark_gpus": gpus,
                "dgxspark_gpu_count": len(gpus),
                "dgxspark_gpu_driver_version": driver_version,
                "dgxspark_gpu_present": True,
            },
        )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            required=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    GpuFacts(module).run()


if __name__ == "__main__":
    main()
