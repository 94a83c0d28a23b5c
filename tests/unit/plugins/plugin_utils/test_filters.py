# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from types import MappingProxyType

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.cluster.plugins.plugin_utils._filters import as_filter, plain


class PlanError(ValueError):
    pass


def halve(value, *, strict=True):
    if strict and value % 2:
        raise PlanError("%d is odd" % value)
    return value // 2


def test_wrapped_function_returns_its_value_and_keeps_its_name():
    wrapped = as_filter(halve, PlanError)
    assert wrapped(8) == 4 and wrapped(7, strict=False) == 3
    assert wrapped.__name__ == "halve"


def test_the_named_error_becomes_a_filter_error_with_the_same_message():
    with pytest.raises(AnsibleFilterError, match="^7 is odd$") as caught:
        as_filter(halve, PlanError)(7)
    assert isinstance(caught.value.orig_exc, PlanError)


def test_other_errors_pass_through():
    with pytest.raises(TypeError):
        as_filter(halve, PlanError)("x")


def test_plain_rebuilds_containers_and_keeps_values():
    class TaggedDict(dict):
        pass

    class TaggedList(list):
        pass

    value = TaggedDict(a=TaggedList([1, ("x", MappingProxyType({"b": None}))]), c="text")
    copied = plain(value)
    assert copied == {"a": [1, ["x", {"b": None}]], "c": "text"}
    # Plain containers, not the subclasses, which isinstance(..., dict) alone would accept.
    assert not isinstance(copied, TaggedDict) and not isinstance(copied["a"], TaggedList)
    assert isinstance(copied["a"][1], list) and isinstance(copied["a"][1][1], dict)
