# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_driver reads a node once before any change: detect.yml's read asks the
driver and, where the kernels are checked or the packages held, the drift read's
commands too, and kernel.yml and hold.yml judge that read instead of reading again.
drift.yml (status.yml) reads the same in its own call."""

from __future__ import annotations

from unit_support import template_role_vars

DRIFT_COMMANDS = {"running", "kernels", "packages"}


def read(kernels="", running="6.11.0-1016-nvidia\n", packages=""):
    """A node_read result with the drift read's commands."""
    return {"changed": False, "commands": {
        "running": {"rc": 0, "stdout": running, "stderr": ""},
        "kernels": {"rc": 0, "stdout": kernels, "stderr": ""},
        "packages": {"rc": 0, "stdout": packages, "stderr": ""},
    }}


def test_the_detect_read_holds_the_drift_read_where_kernel_yml_or_hold_yml_judges_it():
    cases = [({}, {"spec": "{{ nvidia_driver_detect_spec }}", "drift": "{{ nvidia_driver_drift_read_spec }}"})]
    cases += [({"nvidia_driver_kernel_check": check, "nvidia_driver_hold": hold, "nvidia_driver_nvidia_smi": smi},
               {"spec": "{{ nvidia_driver_detect_spec }}"})
              for check, hold, smi in [(True, False, ""), (False, True, ""), (False, False, ""), (False, False, "/opt/nvidia-smi")]]
    (default, check, hold, neither, path) = template_role_vars("nvidia_driver", cases)
    assert default["spec"] == dict(default["drift"], gpu=True)
    assert set(default["spec"]["commands"]) == DRIFT_COMMANDS
    assert set(check["spec"]) == set(hold["spec"]) == {"gpu", "commands"}
    assert neither["spec"] == {"gpu": True}
    assert path["spec"] == {"gpu": "/opt/nvidia-smi"}


def test_drift_yml_reads_the_same_as_the_detect_read():
    (result,) = template_role_vars("nvidia_driver", [({}, {"detect": "{{ nvidia_driver_detect_spec }}",
                                                           "drift": "{{ nvidia_driver_drift_spec }}"})])
    assert result["drift"] == result["detect"]


def test_the_kernels_and_the_holds_are_judged_from_the_detect_read_until_the_node_changed():
    blocking = "boot 99.0.0-1001-nvidia\nmodules 99.0.0-1001-nvidia\n"
    detect = read(kernels=blocking, packages="install installed cuda-toolkit-13-0 13.0.1-1\n")
    after = read(packages="hold installed cuda-toolkit-13-0 13.0.1-1\n")
    expressions = {"kernel": "{{ nvidia_driver_kernel_state['state'] }}",
                   "to_hold": "{{ nvidia_driver_holds['to_hold'] }}"}
    (first, rebooting, installed) = template_role_vars("nvidia_driver", [
        # kernel.yml as main.yml imports it, and hold.yml on a converged node.
        ({"inventory_hostname": "spark2", "nvidia_driver_detect_state": detect,
          "nvidia_driver_kernel_read": detect}, expressions),
        # kernel.yml as reboot.yml imports it, with its own read after the install.
        ({"inventory_hostname": "spark2", "nvidia_driver_detect_state": detect,
          "nvidia_driver_kernel_read": read()}, {"kernel": expressions["kernel"]}),
        # hold.yml after an install: its own read.
        ({"inventory_hostname": "spark2", "nvidia_driver_detect_state": detect,
          "nvidia_driver_hold_read": after}, {"to_hold": expressions["to_hold"]}),
    ])
    assert first == {"kernel": "refuse", "to_hold": ["cuda-toolkit-13-0"]}
    assert rebooting == {"kernel": "ok"}
    assert installed == {"to_hold": []}
