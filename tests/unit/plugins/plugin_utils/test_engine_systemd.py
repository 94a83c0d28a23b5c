# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Exec lines with systemd's executable prefixes (ExecStartPre=-...), quoted like
ExecStart, and the systemd-analyze verify command file_set runs on units and drop-ins."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._file_set import (
    plan_file_set,
    validate_file_set,
)
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_settings import EngineConfigError
from ansible_collections.dgxspark.cluster.plugins.plugin_utils._engine_systemd import (
    parse_systemd_exec_line,
    systemd_exec_line,
    systemd_verify_command,
)

HAS_SYSTEMD_ANALYZE = shutil.which("systemd-analyze") is not None


def test_a_prefix_goes_before_the_quoted_program_and_the_words_are_unchanged():
    argv = ["/usr/bin/docker", "rm", "--force", "dgxspark engine%1$x"]
    line = systemd_exec_line(argv, "-")
    assert line == '-"/usr/bin/docker" "rm" "--force" "dgxspark engine%%1$$x"'
    # systemd strips the prefix from the first word after unquoting; the rest reads back as given.
    assert parse_systemd_exec_line(line[1:]) == argv
    assert systemd_exec_line(argv) == line[1:]
    assert systemd_exec_line(["/bin/true"], "-+").startswith('-+"/bin/true"')


@pytest.mark.parametrize("prefix", ["x", "--", " -", None])
def test_a_prefix_that_is_not_systemds_is_refused(prefix):
    with pytest.raises(EngineConfigError, match="is not made of systemd's executable prefixes"):
        systemd_exec_line(["/bin/true"], prefix)


def test_the_check_of_a_unit_of_a_drop_in_and_of_a_template():
    unit = systemd_verify_command("/etc/dgxspark/engine/versions/0123/dgxspark-engine.service")
    assert unit.startswith("sh -c '") and unit.endswith("' sh %s")
    assert "systemd-analyze verify --man=no --recursive-errors=one \"$1\"" in unit
    dropin = systemd_verify_command("/etc/systemd/system/docker.service.d/dgxspark-limits.conf")
    assert dropin.endswith("' sh %s docker.service")
    assert 'SYSTEMD_UNIT_PATH="$(dirname "$(dirname "$1")"):"' in dropin
    template = systemd_verify_command("/etc/systemd/system/dgxspark-probe@.service")
    assert template.endswith("' sh %s dgxspark-probe@check.service")
    assert systemd_verify_command("/etc/systemd/system/getty@.service.d/x.conf").endswith(" getty@check.service")
    # No literal % besides the placeholder, which file_set would have to see doubled.
    assert all(command.count("%") == 1 for command in (unit, dropin, template))


@pytest.mark.parametrize("path", ["/etc/systemd/journald.conf.d/60-dgxspark.conf",
                                  "/etc/systemd/network/60-dgxspark-x.network", "relative.service", None])
def test_what_systemd_analyze_cannot_check_is_refused(path):
    with pytest.raises(EngineConfigError):
        systemd_verify_command(path)


def _directories(files):
    return [{"path": path, "mode": "0755"} for path in sorted({f["path"].rsplit("/", 1)[0] for f in files})]


def _check(tmp_path, files):
    steps = plan_file_set(directories=_directories(files),
                          files=[dict(f, mode="0644", validate=systemd_verify_command(f["path"])) for f in files])

    def run(argv):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr

    return [(f["path"].rsplit("/", 1)[1], f["stderr"]) for f in validate_file_set(steps, run)]


UNIT = "[Unit]\nDescription=check\n\n[Service]\nType=exec\nExecStartPre=%s\nExecStart=\"/bin/true\"\n"
WATCHDOG = "[Unit]\nBindsTo=e.service\nAfter=e.service\n\n[Service]\nExecStart=\"/bin/true\"\n"


@pytest.mark.skipif(not HAS_SYSTEMD_ANALYZE, reason="needs systemd-analyze")
def test_systemd_analyze_judges_units_side_by_side(tmp_path):
    d = str(tmp_path / "versions" / "0123")
    good = UNIT % systemd_exec_line(["/bin/true", "a b", "50%"], "-")
    assert _check(tmp_path, [{"path": d + "/e.service", "content": good},
                             {"path": d + "/w.service", "content": WATCHDOG}]) == []
    # Alone, the watchdog binds to a unit that is not there.
    assert "Unit e.service not found" in _check(tmp_path, [{"path": d + "/w.service", "content": WATCHDOG}])[0][1]
    # A hand-joined line with an unbalanced quote leaves nothing to run; a typo is only a warning, refused too.
    (failure,) = _check(tmp_path, [{"path": d + "/e.service", "content": UNIT.replace('"/bin/true"', '"/bin/true')
                                    % "/bin/true"}])
    assert "Unbalanced quoting" in failure[1]
    (failure,) = _check(tmp_path, [{"path": d + "/e.service", "content": good + "Restrat=no\n"}])
    assert "Unknown key 'Restrat'" in failure[1]


@pytest.mark.skipif(not HAS_SYSTEMD_ANALYZE, reason="needs systemd-analyze")
def test_systemd_analyze_judges_a_drop_in_with_the_unit_it_extends(tmp_path):
    base = tmp_path / "lib"
    base.mkdir()
    (base / "dgxspark-base.service").write_text("[Service]\nExecStart=/bin/true\n")
    path = str(tmp_path / "etc" / "dgxspark-base.service.d" / "x.conf")
    # The unit is found through SYSTEMD_UNIT_PATH's trailing colon where it is installed; this test's unit
    # is not, so its directory goes on the path too.
    files = [{"path": path, "content": "[Service]\nLimitNOFILE=1048576\n"}]
    check = systemd_verify_command(path).replace('"$(dirname "$(dirname "$1")"):"',
                                                 '"$(dirname "$(dirname "$1")"):%s:"' % str(base).replace("%", "%%"))
    steps = plan_file_set(directories=_directories(files), files=[dict(files[0], mode="0644", validate=check)])

    def run(argv):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        return done.returncode, done.stdout, done.stderr

    assert validate_file_set(steps, run) == []
    steps[-1].data = b"[Service]\nLimitNOFLIE=1048576\n"
    (failure,) = validate_file_set(steps, run)
    assert "Unknown key 'LimitNOFLIE'" in failure["stderr"]
