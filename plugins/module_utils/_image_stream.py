# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stream an image archive between nodes over plain TCP.

The sending node runs this file as a transient systemd unit:

    python3 engine_image_stream.py serve --address FABRIC_IP --port 7070 \
        --allow PEER_IP ... -- /usr/bin/docker save dgxspark/engine:0123456789ab

Every accepted connection gets its own ``docker save`` written straight into
the socket, so all peers load in parallel and a slow peer holds up nobody.
The stream is the bare archive: ``nc FABRIC_IP 7070 | docker load`` on a peer
does the same by hand. The receiving side (``receive``) is what the
engine_image module runs on each peer.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import threading
import time

CHUNK = 1 << 20


def _log(message):
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _send(conn, peer, argv):
    started = time.monotonic()
    try:
        with conn:
            proc = subprocess.run(argv, stdout=conn.fileno(), stderr=subprocess.PIPE, check=False)
            try:
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        if proc.returncode != 0:
            _log("%s: %s exited %d: %s" % (peer, argv[0], proc.returncode, proc.stderr.decode(errors="replace").strip()))
        else:
            _log("%s: sent in %.1f s" % (peer, time.monotonic() - started))
    except OSError as exc:
        _log("%s: %s" % (peer, exc))


def serve(address, port, argv, allow=None, connections=0, ready=None, stop=None):
    """Accept connections until stopped (the unit is stopped, or ``stop`` is
    set), or until ``connections`` peers were served when it is not 0, so the
    sender ends by itself once every peer has its copy; refuse peers outside
    ``allow`` when it is given."""
    allow = set(allow or ())
    workers = []
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((address, port))
        server.listen(16)
        server.settimeout(0.5)
        _log("serving %s on %s:%d" % (" ".join(argv), address, server.getsockname()[1]))
        if ready is not None:
            ready(server.getsockname()[1])
        while stop is None or not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            if allow and peer[0] not in allow:
                _log("%s: refused, not one of %s" % (peer[0], ", ".join(sorted(allow))))
                conn.close()
                continue
            worker = threading.Thread(target=_send, args=(conn, peer[0], argv), daemon=True)
            worker.start()
            workers.append(worker)
            if connections and len(workers) >= connections:
                break
    for worker in workers:
        worker.join()


def receive(address, port, argv, connect_timeout=30.0, idle_timeout=300.0, progress=None):
    """Connect to a sender and pipe its stream into ``argv`` (``docker load``).

    Returns a dict with rc, stdout, stderr of the loader, the bytes received
    and the seconds taken; a connection failure raises OSError. O(progress)
    is called with the bytes received so far after every chunk; what it
    raises stops the transfer (the loader then sees the archive end early)."""
    started = time.monotonic()
    received = 0
    # The sender may still be starting: retry a refused connection until
    # connect_timeout has passed.
    while True:
        try:
            conn = socket.create_connection((address, port), timeout=connect_timeout)
            break
        except ConnectionRefusedError:
            if time.monotonic() - started >= connect_timeout:
                raise
            time.sleep(0.5)
    conn.settimeout(idle_timeout)
    # The loader's output goes to files, so it can never block on a full pipe
    # while this side writes its input.
    # Closed below, once the loader has exited and its output is read.
    out_file, err_file = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out_file, stderr=err_file)
    error = None
    try:
        with conn:
            while True:
                chunk = conn.recv(CHUNK)
                if not chunk:
                    break
                proc.stdin.write(chunk)
                received += len(chunk)
                if progress is not None:
                    progress(received)
    except TimeoutError:
        error = "no data from %s:%d for %.0f s after %d bytes" % (address, port, idle_timeout, received)
    except BrokenPipeError:
        error = "the loader stopped reading after %d bytes" % received
    finally:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
        # Also when O(progress) raised: the loader sees the archive end and exits.
        proc.wait()
    out_file.seek(0)
    err_file.seek(0)
    out, err = out_file.read(), err_file.read()
    out_file.close()
    err_file.close()
    return {
        "rc": proc.returncode,
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace"),
        "bytes": received,
        "seconds": round(time.monotonic() - started, 2),
        "error": error,
    }


def main(args=None):
    parser = argparse.ArgumentParser(description="Serve an image archive to peers over TCP.")
    sub = parser.add_subparsers(dest="command", required=True)
    srv = sub.add_parser("serve")
    srv.add_argument("--address", required=True)
    srv.add_argument("--port", type=int, required=True)
    srv.add_argument("--allow", action="append", default=[], help="peer address allowed to connect (repeatable)")
    srv.add_argument("--connections", type=int, default=0, help="exit after serving this many peers (0: never)")
    srv.add_argument("argv", nargs="+", help="command whose stdout is sent, after --")
    opts = parser.parse_args(args)
    serve(opts.address, opts.port, opts.argv, allow=opts.allow, connections=opts.connections)


if __name__ == "__main__":
    main()
