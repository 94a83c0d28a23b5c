# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check a host's inventory values against roles' argument specs, on the controller.

A role applies its C(meta/argument_specs.yml) when its own play starts. site.yml's
preflight play checks the roles whose plays come later with this, so that a wrong
type or choice is refused before the first play that changes a node.
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator


class RoleInputsError(Exception):
    """The specs themselves are unusable."""


def role_input_problems(specs, values, host):
    """One message per value of O(values) that the spec of its role refuses.

    O(specs) maps a role name to its entry point's C(options) (as in
    C(meta/argument_specs.yml)); O(values) maps variable names to the host's values, for
    the variables the host sets (a role default is not a value to check). Only
    options of O(specs) are judged; names no spec knows are ignored. A required
    option the host does not set is reported too.
    """
    if not isinstance(specs, dict) or not all(isinstance(options, dict) for options in specs.values()):
        raise RoleInputsError("role_input_problems expects a mapping of role name to its options, got %r" % (specs,))
    problems = []
    for role, options in specs.items():
        provided = {name: values[name] for name in options if name in values}
        result = ArgumentSpecValidator(options).validate(provided)
        problems.extend(
            "%s: %s (role %s; the types and choices are in roles/%s/meta/argument_specs.yml). Fix the "
            "variable in the inventory." % (host, message, role, role)
            for message in result.error_messages
        )
    return problems
