# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node_read action: the read script of a spec run through the connection (here a
local shell standing in for SSH), parsed on the controller into the registered result."""

from __future__ import annotations

import hashlib
import subprocess
from types import SimpleNamespace

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.dgxspark.cluster.plugins.action.node_read import ActionModule


class Connection:
    """What the action uses of a connection: its options and a shell's tmpdir."""

    def __init__(self, options=("use_tty",)):
        self.options = {name: True for name in options}
        self._shell = SimpleNamespace(tmpdir="/tmp/unused")

    def has_option(self, name):
        return name in self.options

    def set_option(self, name, value):
        self.options[name] = value


def action(args, connection=None, check_mode=False, run=None):
    task = SimpleNamespace(args=args, async_val=0, check_mode=check_mode, action="dgxspark.cluster.node_read")
    plugin = ActionModule(task, connection or Connection(), None, None, None)
    commands = []

    def low_level(command, executable=None):
        commands.append((command, executable))
        if run is not None:
            return run(command)
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    plugin._low_level_execute_command = low_level
    return plugin, commands


def test_the_read_comes_back_as_data_without_a_terminal(tmp_path):
    kept = tmp_path / "kept.conf"
    kept.write_text("answer = 42\n")
    connection = Connection()
    plugin, commands = action(
        {"spec": {"paths": [str(kept), str(tmp_path / "absent")], "commands": {"greeting": ["echo", "hello"]},
                  "disks": [str(tmp_path / "not" / "yet")]}},
        connection=connection,
    )
    result = plugin.run(task_vars={"inventory_hostname": "spark1"})
    assert result["changed"] is False and not result.get("failed")
    assert result["paths"][str(kept)]["kind"] == "file"
    assert result["paths"][str(kept)]["sha256"] == hashlib.sha256(b"answer = 42\n").hexdigest()
    assert result["paths"][str(tmp_path / "absent")]["kind"] is None
    assert result["commands"]["greeting"] == {"rc": 0, "stdout": "hello\n", "stderr": ""}
    assert result["disks"][0]["checked_path"] == str(tmp_path)
    # One command, run like ansible.builtin.raw (no executable wrapping), without -tt.
    assert len(commands) == 1 and commands[0][0].startswith("sh -c ") and commands[0][1] is False
    assert connection.options["use_tty"] is False


def test_it_reads_in_check_mode_and_leaves_connections_without_a_tty_option_alone(tmp_path):
    connection = Connection(options=())
    plugin, commands = action({"spec": {"paths": [str(tmp_path)]}}, connection=connection, check_mode=True)
    result = plugin.run(task_vars={"inventory_hostname": "spark1"})
    assert result["paths"][str(tmp_path)]["kind"] == "directory" and len(commands) == 1
    assert connection.options == {}


def test_a_spec_it_cannot_read_fails_naming_the_host_before_anything_runs():
    plugin, commands = action({"spec": {"paths": ["etc/docker"]}})
    result = plugin.run(task_vars={"inventory_hostname": "spark2"})
    assert result["failed"] is True and commands == []
    assert result["msg"] == "spark2: cannot read this spec: cannot read 'etc/docker': expected an absolute path"


def test_a_read_cut_short_fails_with_what_the_node_said():
    plugin, commands = action(
        {"spec": {"units": ["docker.service"]}},
        run=lambda command: {"rc": 127, "stdout": "", "stderr": "sh: 1: systemctl: not found\n"},
    )
    result = plugin.run(task_vars={"inventory_hostname": "spark3"})
    assert result["failed"] is True and result["rc"] == 127 and len(commands) == 1
    assert result["msg"].startswith("spark3: the node read failed (rc 127): the node state read stopped before its end")
    assert result["msg"].endswith("sh: 1: systemctl: not found")


def test_an_unknown_option_is_refused():
    plugin, commands = action({"spec": {}, "path": "/etc"})
    with pytest.raises(AnsibleActionFail, match="Invalid options for dgxspark.cluster.node_read: path"):
        plugin.run(task_vars={})
    assert commands == []
