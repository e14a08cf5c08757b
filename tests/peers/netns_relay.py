"""Carry TCP connections from inside a network namespace to an address outside it.

    python netns_relay.py NETNS_PATH LISTEN_HOST:PORT TARGET_HOST:PORT

The real node of tests/peers/node.py lives in its own network namespace (its node IP must not be
loopback, and no address may be added to the machine's own network). Its kubelet reaches the test
control plane, which listens on the machine's loopback, through this relay: the listening socket
is made inside the namespace (by a thread that joins it with setns(2); a socket stays in the
namespace it was made in) and every connection to the target is made from the machine's
namespace. Bytes pass unchanged (TLS goes end to end). Prints "ready" once listening; stops on
SIGTERM or when its parent's pipe closes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000


def listen_in(netns: str, host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` inside the network namespace at ``netns``."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:  # setns(2) moves only this thread, which ends here
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(netns, os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {netns}")
            finally:
                os.close(fd)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(64)
            made.append(sock)
        except BaseException as exc:  # handed to the caller
            made.append(exc)

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (dst, src):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


def serve(listener: socket.socket, target: tuple[str, int]) -> None:
    while True:
        conn, _ = listener.accept()
        try:
            upstream = socket.create_connection(target, timeout=10)
            upstream.settimeout(None)
        except OSError:
            conn.close()
            continue
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


def main(netns: str, listen: str, target: str) -> None:
    lhost, lport = listen.rsplit(":", 1)
    thost, tport = target.rsplit(":", 1)
    listener = listen_in(netns, lhost, int(lport))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    threading.Thread(target=serve, args=(listener, (thost, int(tport))), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # the parent holds the other end: its exit ends the relay


if __name__ == "__main__":
    main(*sys.argv[1:])
