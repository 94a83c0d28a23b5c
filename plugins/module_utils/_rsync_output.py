# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The output of ``rsync --info=progress2``, split into what it reports
(``--itemize-changes``, ``--stats``) and how far the transfer has come.

With ``--info=progress2`` rsync rewrites one line with carriage returns::

    \\r     20,000,000  40%    1.33GB/s    0:00:00 (xfr#1, to-chk=0/3)

The first number counts the bytes of the files it transfers (a file it
skips as up to date adds nothing, a file it continues counts whole), the
percentage is of every file's size, skipped ones included. Only the bytes
are used. Every other line is kept as rsync printed it, so a caller reads
the itemized changes and the statistics as without the progress.

Standard library only (nodes run it on their system Python).
"""

from __future__ import annotations

import re

PROGRESS2 = re.compile(r"^\s*(?P<bytes>\d[\d,.']*)\s+\d+%\s+\S+/s\s+\d+:\d{2}:\d{2}(?:\s+\(.*\))?\s*$")


def progress_bytes(segment):
    """The bytes of a progress2 O(segment), or None when it is another line."""
    match = PROGRESS2.match(segment)
    if not match:
        return None
    return int(re.sub(r"[,.']", "", match.group("bytes")))


class RsyncOutput:
    """Fed rsync's standard output piece by piece: ``lines`` holds what it
    reported but the progress, ``transferred`` the bytes of the last
    progress line."""

    def __init__(self):
        self.lines = []
        self.transferred = 0
        self._pending = ""

    def feed(self, text):
        """Take O(text); returns True when a progress line moved the count."""
        self._pending += text
        moved = False
        while True:
            positions = [position for position in (self._pending.find("\r"), self._pending.find("\n")) if position >= 0]
            if not positions:
                return moved
            end = min(positions)
            segment, self._pending = self._pending[:end], self._pending[end + 1:]
            moved = self._take(segment) or moved

    def close(self):
        """Take what is left after the last line end."""
        if self._pending:
            self._take(self._pending)
            self._pending = ""

    def _take(self, segment):
        count = progress_bytes(segment)
        if count is not None:
            self.transferred = count
            return True
        # The blank segments between a progress line's \r and the next line's
        # start are the line rewriting itself, not output.
        if segment.strip() or (self.lines and self.lines[-1].strip()):
            self.lines.append(segment)
        return False

    @property
    def stdout(self):
        return "".join(line + "\n" for line in self.lines)
