# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The image stream between nodes, on 127.0.0.1: the sender as the transient
unit runs it (the file as a script) and in a thread, the receiver with a
loader that reports what it read."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.dgxspark.cluster.plugins.module_utils import _image_stream

# A loader that reads its whole input and prints how much it read and its digest.
DIGEST_LOADER = [sys.executable, "-c",
                 "import hashlib, sys; data = sys.stdin.buffer.read(); "
                 "print(len(data), hashlib.sha256(data).hexdigest())"]
SERVING = re.compile(r"^serving (?P<argv>.*) on 127\.0\.0\.1:(?P<port>\d+)$")


@pytest.fixture
def archive(tmp_path):
    """More than a few receive chunks, not a multiple of one."""
    data = os.urandom(3 * _image_stream.CHUNK + 12345)
    path = tmp_path / "image.tar"
    path.write_bytes(data)
    return path, data


def digest_line(data):
    return "%d %s\n" % (len(data), hashlib.sha256(data).hexdigest())


def in_thread(target, *args, **kwargs):
    """Run target in a thread; returns a function that waits for its result
    (a hang fails the test instead of stopping the run)."""
    box = {}

    def call():
        try:
            box["result"] = target(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001  # pylint: disable=broad-exception-caught  # re-raised by the caller
            box["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()

    def wait(timeout=30):
        thread.join(timeout)
        assert not thread.is_alive(), "%s did not return within %d s" % (target.__name__, timeout)
        if "error" in box:
            raise box["error"]
        return box["result"]

    return wait


def start_server(argv, **options):
    """serve() in a thread on a free port of 127.0.0.1; returns port, stop event and the waiter."""
    ready, stop, ports = threading.Event(), threading.Event(), []
    wait = in_thread(_image_stream.serve, "127.0.0.1", 0, argv, ready=lambda port: (ports.append(port), ready.set()),
                     stop=stop, **options)
    assert ready.wait(10), "the sender did not start"
    return ports[0], stop, wait


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_sender_script_serves_each_peer_on_its_own_and_exits_after_the_last(tmp_path):
    """As the transient unit runs it: a peer that reads nothing yet holds up no
    other peer, every peer gets the whole stream, and the sender exits once
    --connections peers were served."""
    # More than the loopback socket buffers of a peer that does not read hold.
    data = os.urandom(24 * _image_stream.CHUNK + 12345)
    path = tmp_path / "image.tar"
    path.write_bytes(data)
    sender = subprocess.Popen(
        [sys.executable, _image_stream.__file__, "serve", "--address", "127.0.0.1", "--port", "0",
         "--allow", "127.0.0.1", "--connections", "2", "--", "cat", str(path)],
        stderr=subprocess.PIPE, text=True)
    try:
        first = sender.stderr.readline().strip()
        match = SERVING.match(first)
        assert match and match.group("argv") == "cat %s" % path, first
        port = int(match.group("port"))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle_peer:
            result = in_thread(_image_stream.receive, "127.0.0.1", port, DIGEST_LOADER, connect_timeout=5,
                               idle_timeout=10)()
            late = bytearray()
            for chunk in iter(lambda: idle_peer.recv(_image_stream.CHUNK), b""):
                late += chunk
        assert sender.wait(10) == 0, "the sender did not exit after its two peers"
        log = sender.stderr.read()
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    assert (result["rc"], result["bytes"], result["error"]) == (0, len(data), None)
    assert result["stdout"] == digest_line(data) and result["stderr"] == ""
    assert isinstance(result["seconds"], float)
    assert bytes(late) == data
    assert log.count("127.0.0.1: sent in ") == 2, log


def test_the_sender_refuses_a_peer_outside_allow_and_keeps_serving(capsys, archive):
    path, _data = archive
    port, stop, wait = start_server(["cat", str(path)], allow=["192.0.2.7"], connections=1)
    refused = _image_stream.receive("127.0.0.1", port, DIGEST_LOADER, connect_timeout=5, idle_timeout=10)
    # A refused peer is not counted: the sender still listens for the allowed one.
    again = _image_stream.receive("127.0.0.1", port, DIGEST_LOADER, connect_timeout=5, idle_timeout=10)
    stop.set()
    wait()
    for result in (refused, again):
        assert (result["rc"], result["bytes"], result["error"]) == (0, 0, None)
        assert result["stdout"] == digest_line(b"")
    assert capsys.readouterr().err.count("127.0.0.1: refused, not one of 192.0.2.7") == 2


def test_a_failing_send_command_is_logged_and_the_peer_gets_nothing(capsys):
    port, stop, wait = start_server(["sh", "-c", "echo boom >&2; exit 3"], connections=1)
    result = _image_stream.receive("127.0.0.1", port, DIGEST_LOADER, connect_timeout=5, idle_timeout=10)
    wait()
    stop.set()
    assert (result["rc"], result["bytes"], result["error"]) == (0, 0, None)
    assert "127.0.0.1: sh exited 3: boom" in capsys.readouterr().err


def test_the_receiver_waits_for_a_sender_that_is_still_starting(archive):
    path, data = archive
    port = free_port()
    receiving = in_thread(_image_stream.receive, "127.0.0.1", port, DIGEST_LOADER, connect_timeout=10,
                          idle_timeout=10)
    time.sleep(1.2)  # two refused connection attempts
    ready, stop = threading.Event(), threading.Event()
    serving = in_thread(_image_stream.serve, "127.0.0.1", port, ["cat", str(path)], connections=1,
                        ready=lambda _port: ready.set(), stop=stop)
    assert ready.wait(10)
    result = receiving()
    serving()
    assert (result["rc"], result["bytes"], result["stdout"]) == (0, len(data), digest_line(data))
    assert result["seconds"] >= 1.0


def test_the_receiver_gives_up_when_nobody_listens_within_the_connect_timeout():
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        _image_stream.receive("127.0.0.1", free_port(), DIGEST_LOADER, connect_timeout=0.6, idle_timeout=10)
    assert 0.6 <= time.monotonic() - started < 5


def test_a_stalled_sender_ends_the_transfer_after_the_idle_timeout(tmp_path):
    """The sender accepts, sends 1000 bytes, then nothing, and keeps the connection open."""
    release = threading.Event()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]

        def stall():
            conn, _peer = server.accept()
            with conn:
                conn.sendall(b"\x01" * 1000)
                release.wait(30)

        stalling = in_thread(stall)
        result = _image_stream.receive("127.0.0.1", port, DIGEST_LOADER, connect_timeout=5, idle_timeout=1)
        release.set()
        stalling()
    assert result["error"] == "no data from 127.0.0.1:%d for 1 s after 1000 bytes" % port
    # What had arrived went to the loader, which then saw the end of its input.
    assert (result["rc"], result["bytes"], result["stdout"]) == (0, 1000, digest_line(b"\x01" * 1000))


def test_a_loader_that_stops_reading_ends_the_transfer(archive):
    path, data = archive
    port, stop, wait = start_server(["cat", str(path)], connections=1)
    quitter = [sys.executable, "-c", "import sys; sys.stdin.buffer.read(512); "
               "sys.stderr.write('invalid tar header\\n'); sys.exit(1)"]
    result = _image_stream.receive("127.0.0.1", port, quitter, connect_timeout=5, idle_timeout=10)
    wait()
    stop.set()
    assert result["rc"] == 1 and result["stderr"] == "invalid tar header\n"
    assert re.fullmatch(r"the loader stopped reading after \d+ bytes", result["error"]), result["error"]
    assert result["bytes"] < len(data)


def test_a_loader_that_writes_much_before_reading_cannot_block_the_transfer(archive):
    """The loader's output goes to files: a loader that prints more than a pipe
    holds before it reads its input still gets the whole stream."""
    path, data = archive
    port, stop, wait = start_server(["cat", str(path)], connections=1)
    chatty = [sys.executable, "-c",
              "import hashlib, sys; sys.stderr.write('x' * (1 << 20)); sys.stderr.flush(); "
              "data = sys.stdin.buffer.read(); print(len(data), hashlib.sha256(data).hexdigest())"]
    result = in_thread(_image_stream.receive, "127.0.0.1", port, chatty, connect_timeout=5, idle_timeout=10)()
    wait()
    stop.set()
    assert (result["rc"], result["bytes"], result["stdout"]) == (0, len(data), digest_line(data))
    assert len(result["stderr"]) == 1 << 20


def test_the_receiver_reports_the_bytes_received_as_they_come(archive):
    path, data = archive
    port, stop, wait = start_server(["cat", str(path)], connections=1)
    counts = []
    result = _image_stream.receive("127.0.0.1", port, DIGEST_LOADER, connect_timeout=5, idle_timeout=10,
                                   progress=counts.append)
    wait()
    stop.set()
    assert result["bytes"] == len(data) and result["stdout"] == digest_line(data)
    assert counts == sorted(counts) and counts[-1] == len(data) and len(counts) >= 4


def test_a_progress_that_stops_the_transfer_ends_the_loader_too(archive):
    path, data = archive
    port, stop, wait = start_server(["cat", str(path)], connections=1)
    seen = []

    def abandon(received):
        seen.append(received)
        raise RuntimeError("nobody follows")

    with pytest.raises(RuntimeError, match="nobody follows"):
        _image_stream.receive("127.0.0.1", port, DIGEST_LOADER, connect_timeout=5, idle_timeout=10, progress=abandon)
    wait()
    stop.set()
    assert len(seen) == 1 and seen[0] < len(data)
