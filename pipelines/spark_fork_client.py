"""``python -m <module> [args]`` run as a child of offsetlake's fork server
(:mod:`pipelines.spark_fork_server`), or as a fresh interpreter where the server cannot.

Run by path with ``python -I -S`` from ``offsetlake-spark-python`` (so: the standard library
only). It hands the server its standard streams, arguments, environment and directory,
forwards to the child the signals a JVM sends the processes it started, and exits with the
child's status: Spark sees the process it started behave as ``python -m <module>`` would.

    python -I -S spark_fork_client.py <python> -m <module> [args...]
"""

import contextlib
import json
import os
import signal
import socket
import struct
import sys

#: a request's header: the payload's length; the three standard streams come with it
HEADER = struct.Struct("!I")
#: the answers: the child's pid (0: not forked, run Python yourself), then its exit code
#: (negative: ended by that signal)
ANSWER = struct.Struct("!i")
#: the environment variable naming the server's socket
SERVER_ENV = "OFFSETLAKE_SPARK_FORK_SERVER"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def read_exactly(sock, n):
    """``n`` bytes from ``sock``; None when it ends before."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _fork_on_server(path, module, args):
    """``(pid, connection)`` of the server's child that runs ``module``; None when the
    server cannot: Python runs here."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(path)
            payload = json.dumps({"module": module, "args": args, "env": dict(os.environ),
                                  "cwd": os.getcwd()}).encode()
            socket.send_fds(sock, [HEADER.pack(len(payload))], [0, 1, 2])
            sock.sendall(payload)
            answer = read_exactly(sock, ANSWER.size)
            if answer is None or ANSWER.unpack(answer)[0] <= 0:
                return None
            return ANSWER.unpack(answer)[0], sock.detach()
    except OSError:
        return None


def main(python, argv):
    path = os.environ.get(SERVER_ENV)
    if not (path and len(argv) >= 2 and argv[0] == "-m"):
        os.execv(python, [python, *argv])
    # Held back until the child is known, then forwarded to it: a signal that came while
    # the server forked (the child may already run and be seen) was otherwise lost here.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    forked = _fork_on_server(path, argv[1], argv[2:])
    if forked is None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one that came ends this process
        os.execv(python, [python, *argv])
    pid, fd = forked

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    with socket.socket(fileno=fd) as sock:
        status = read_exactly(sock, ANSWER.size)
    code = ANSWER.unpack(status)[0] if status is not None else 1  # None: the server ended first
    if code < 0:  # the child was ended by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
