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

``run_rsync`` runs rsync and reads both of its outputs as they come.

Standard library only (nodes run it on their system Python).
"""

from __future__ import annotations

import codecs
import os
import re
import selectors
import subprocess

C_LOCALE = {"LC_ALL": "C", "LANGUAGE": "C"}
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


def run_rsync(argv, progress):
    """Run O(argv) (rsync) in the C locale, feeding its standard output to an
    RsyncOutput and the bytes of each progress line to O(progress); returns
    (rc, the RsyncOutput, standard error). What O(progress) raises kills rsync
    and is raised again."""
    output, errors = RsyncOutput(), []
    decoders = {}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, **C_LOCALE))
    try:
        with selectors.DefaultSelector() as selector:
            for stream in (proc.stdout, proc.stderr):
                selector.register(stream, selectors.EVENT_READ)
                decoders[stream] = codecs.getincrementaldecoder("utf-8")("replace")
            while selector.get_map():
                for key, _events in selector.select():
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    text = decoders[key.fileobj].decode(chunk)
                    if key.fileobj is proc.stderr:
                        errors.append(text)
                    elif output.feed(text):
                        progress(output.transferred)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    output.close()
    return proc.wait(), output, "".join(errors)
