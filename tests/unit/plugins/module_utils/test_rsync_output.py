# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""rsync's output with --info=progress2: the progress counted, the rest kept
as rsync reported it (as rsync 3.2 prints it)."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils._rsync_output import RsyncOutput, progress_bytes

OUTPUT = (
    ">f+++++++++ model.safetensors\n"
    "\r         32,768   0%    0.00kB/s    0:00:00  "
    "\r     20,000,000  40%    1.33GB/s    0:00:00 (xfr#1, to-chk=0/3)"
    "\r     50,000,000 100%    1.16GB/s    0:00:00 (xfr#2, to-chk=0/3)\n"
    "\n"
    "Number of files: 3 (reg: 2, dir: 1)\n"
    "Matched data: 0 bytes\n"
)
WITHOUT_PROGRESS = (
    ">f+++++++++ model.safetensors\n"
    "\n"
    "Number of files: 3 (reg: 2, dir: 1)\n"
    "Matched data: 0 bytes\n"
)


@pytest.mark.parametrize("size", [1, 7, 64, len(OUTPUT)])
def test_the_progress_is_counted_and_the_rest_kept_in_any_pieces(size):
    output = RsyncOutput()
    moved = [output.feed(OUTPUT[start:start + size]) for start in range(0, len(OUTPUT), size)]
    output.close()
    assert output.stdout == WITHOUT_PROGRESS and output.transferred == 50_000_000 and any(moved)


@pytest.mark.parametrize(("segment", "count"), [
    ("     20,000,000  40%    1.33GB/s    0:00:00 (xfr#1, to-chk=0/3)", 20_000_000),
    ("         32,768   0%    0.00kB/s    0:00:00  ", 32_768),
    ("  1.234.567  12%  95,43MB/s  0:01:23 (xfr#3, ir-chk=1000/1200)", 1_234_567),
    (">f+++++++++ model.safetensors", None),
    ("Total bytes received: 50,012,345", None),
    ("", None),
])
def test_only_progress2_lines_count(segment, count):
    assert progress_bytes(segment) == count


def test_output_without_a_last_line_end_is_kept():
    output = RsyncOutput()
    output.feed("sent 1 bytes")
    output.close()
    assert output.stdout == "sent 1 bytes\n" and output.transferred == 0
