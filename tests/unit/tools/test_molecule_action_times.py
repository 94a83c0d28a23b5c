# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/lib.sh dgxspark_molecule_action_times, through which tools/test passes
Molecule's output: the output unchanged, and one line per action with its seconds
for the summary, from Molecule's own coloured log lines only."""

from __future__ import annotations

import subprocess

from unit_support import REPO_ROOT

ESC = "\x1b"


def log_line(action, what):
    """A line as Molecule logs it, coloured."""
    return (f"{ESC}[36mINFO    {ESC}[0m {ESC}[32mcluster{ESC}[0m \u279c {ESC}[33m{action}{ESC}[0m: "
            f"{ESC}[36m{what}{ESC}[0m")


def run(script, tmp_path):
    """Run a bash script whose output goes through the function; (passed output, action lines)."""
    actions = tmp_path / "actions"
    result = subprocess.run(
        ["bash", "-c", f"source tools/lib.sh; {{ {script} ; }} | dgxspark_molecule_action_times {actions}"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return result.stdout, actions.read_text().splitlines() if actions.exists() else []


def test_each_action_is_timed_from_its_start_to_its_end_and_the_output_passes_unchanged(tmp_path):
    lines = [log_line("create", "Executing"), "  TASK [Create the nodes]", log_line("create", "Executed: Successful"),
             log_line("converge", "Executing"), "PLAY RECAP", log_line("converge", "Executed: Successful"),
             log_line("verify", "Executing"), log_line("verify", "Executing Testinfra tests found in tests/..."),
             log_line("verify", "Executed: Successful"),
             # The recap Molecule prints at the end repeats the actions without INFO: not timed again.
             f"{ESC}[32mcluster{ESC}[0m \u279c {ESC}[33mdestroy{ESC}[0m: {ESC}[32mExecuted: Successful{ESC}[0m"]
    log = tmp_path / "molecule.log"
    log.write_text("\n".join(lines) + "\n")
    # The converge takes a second and more between its two lines.
    script = f"head -n 4 {log}; sleep 1.2; tail -n +5 {log}"
    output, actions = run(script, tmp_path)
    assert output.splitlines() == lines
    assert [a.split()[0] for a in actions] == ["create", "converge", "verify"]
    seconds = {a.split()[0]: int(a.split()[1]) for a in actions}
    assert seconds["converge"] >= 1 and seconds["create"] <= 1 and seconds["verify"] <= 1


def test_an_output_without_molecule_actions_times_nothing_and_a_last_line_without_newline_passes(tmp_path):
    output, actions = run("printf 'no actions here\\nlast line'", tmp_path)
    assert output == "no actions here\nlast line\n" and actions == []
