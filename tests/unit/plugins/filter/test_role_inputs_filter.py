# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.filter.role_inputs import FilterModule

ROLES = Path(__file__).resolve().parents[4] / "roles"
role_input_problems = FilterModule().filters()["role_input_problems"]


def main_options(role):
    return yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


# The four roles site.yml's preflight play judges this way, with their real specs.
SPECS = {role: main_options(role) for role in ("nvidia_driver", "container_runtime", "engine_image", "fabric_report")}
IMAGE = {"engine_image_ref": "registry.example.com/vllm@sha256:" + "0" * 64}


def test_values_the_specs_accept_pass():
    values = dict(IMAGE, engine_image_strategy="pull", fabric_report_ping_count="20", nvidia_driver_packages=["a", "b"])
    assert role_input_problems(SPECS, values, "spark1") == []


@pytest.mark.parametrize(
    "values, expected",
    [
        (
            {"engine_image_strategy": "rsync"},
            "spark2: value of engine_image_strategy must be one of: spread, pull, registry, got: rsync "
            "(role engine_image; the types and choices are in roles/engine_image/meta/argument_specs.yml). "
            "Fix the variable in the inventory.",
        ),
        ({"fabric_report_ping_count": "many"}, "argument 'fabric_report_ping_count' is of type str"),
        ({"nvidia_driver_packages": {"nvidia-driver-580-open": 1}}, "argument 'nvidia_driver_packages' is of type dict"),
        ({"container_runtime_docker_packages": {"docker.io": 1}}, "(role container_runtime;"),
    ],
)
def test_a_value_the_spec_refuses_is_named_with_host_role_and_spec(values, expected):
    problems = role_input_problems(SPECS, dict(IMAGE, **values), "spark2")
    assert len(problems) == 1
    assert problems[0].startswith("spark2: ")
    assert expected in problems[0]


def test_a_missing_required_option_is_reported_and_unknown_names_are_ignored():
    problems = role_input_problems(SPECS, {"engine_image_id": "sha256:abc", "fabric_report_unknown": 1}, "spark1")
    assert problems == [
        "spark1: missing required arguments: engine_image_ref (role engine_image; the types and choices are in "
        "roles/engine_image/meta/argument_specs.yml). Fix the variable in the inventory."
    ]


def test_specs_that_are_not_a_mapping_of_options_are_an_error():
    with pytest.raises(AnsibleFilterError, match="mapping of role name to its options"):
        role_input_problems({"engine_image": ["engine_image_ref"]}, {}, "spark1")
