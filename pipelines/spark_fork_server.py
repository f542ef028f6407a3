"""Spark's Python helper processes forked from one process that imported pyspark once.

Why: before a run's first record is read, a local session starts Python five times, one
after the other: the data source lookup, the source's creation, the streaming source's
runner, the task daemon and read planning (``python -m pyspark.daemon <module>`` or
``python -m <module>``). Each started an interpreter and imported pyspark and its module,
~0.15-0.35 s of CPU each: on the 20-file real workload ~1.6 s passed from the session's
start to the first batch's read. This server imports all of them (and the decoding tasks'
modules) once, beside the JVM's start, and forks a child for each process Spark starts.

``offsetlake-spark-python``, Spark's Python for a local session the CLI launches
(:mod:`pipelines.spark_python`), runs :mod:`pipelines.spark_fork_client` for ``-m``
commands: it hands this server its standard streams, arguments, environment and directory,
forwards the JVM's signals to the child and exits with its status. Where there is no server,
or the request's interpreter settings (``PYTHONHASHSEED``, ...) differ from the server's, it
runs Python as before.

The server starts no thread and runs nothing but imports before it forks, as
``pyspark.daemon`` does (:mod:`pipelines.spark_daemon` says why these imports are
fork-safe). It ends when the process that started it ends (its standard input closes); a
child lives on until Spark ends it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import traceback

from pipelines.spark_fork_client import ANSWER, HEADER, SERVER_ENV, read_exactly
from pipelines.without_pandas import block_pandas_in_own_workers

#: the environment variable that points ``offsetlake-spark-python`` at the client (the
#: server's socket: ``SERVER_ENV``)
CLIENT_ENV = "OFFSETLAKE_SPARK_FORK_CLIENT"
#: what Spark's local Python processes import: its planners, the streaming source's
#: runner and the task daemons (and the decoding tasks: ``spark_workers.TASK_MODULES``)
PRELOAD = ("pyspark.daemon", "pyspark.worker", "pyspark.sql.worker.lookup_data_sources",
           "pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read",
           "pyspark.sql.streaming.python_streaming_source_runner", "pipelines.spark_daemon")
#: the interpreter settings Spark gives its Python processes: the server starts with them,
#: and forks only for requests whose settings are its own. SparkContext sets the hash seed
#: unless the user did; PythonWorkerFactory sets PYTHONUNBUFFERED, over any of the user's.
HASH_SEED_DEFAULT, UNBUFFERED = "0", "YES"
#: environment variables read when an interpreter starts (``PYTHONPATH`` aside: a child
#: puts its entries on its path)
_STARTUP_VARIABLE = re.compile(r"PYTHON[A-Z]+")
#: room in ``sockaddr_un`` for the socket's path
_MAX_SOCKET_PATH = 100

_started: list[subprocess.Popen] = []  # referenced for the process' life: its pipe is the lifeline


def start(env: dict[str, str]) -> dict[str, str]:
    """Start the server (once per process) with ``env``; returns the variables that point
    the launcher at it, for the JVM's environment (empty where it cannot run here)."""
    client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark_fork_client.py")
    running = next((p for p in _started if p.poll() is None), None)
    if running is not None:
        return {SERVER_ENV: running.args[-1], CLIENT_ENV: client}
    folder = tempfile.mkdtemp(prefix="offsetlake-forks-")  # 0700: only this user connects
    path = os.path.join(folder, "socket")
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH or not os.path.isfile(client):
        os.rmdir(folder)
        return {}
    child_env = {**env, "PYTHONHASHSEED": env.get("PYTHONHASHSEED", HASH_SEED_DEFAULT),
                 "PYTHONUNBUFFERED": UNBUFFERED}
    # started with SIGINT blocked (a child inherits its parent thread's mask through exec): a
    # terminal's Ctrl-C during its interpreter's start printed "Fatal Python error:
    # init_import_site" (the server blocks it in main() anyway, as the CLI's to handle)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        _started.append(subprocess.Popen([sys.executable, "-m", __name__, path], env=child_env,
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL))
    except OSError:
        os.rmdir(folder)
        return {}
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return {SERVER_ENV: path, CLIENT_ENV: client}


def stop() -> None:
    """End this process' server (it ends with the process anyway) and wait for it."""
    while _started:
        server = _started.pop()
        with contextlib.suppress(OSError):
            server.stdin.close()
        server.wait()


def _startup_settings(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if _STARTUP_VARIABLE.fullmatch(k) and k != "PYTHONPATH"}


def _servable(env: dict[str, str], own_settings: dict[str, str]) -> bool:
    """Whether a child of this server can be what a fresh interpreter started with ``env``
    would be: the same settings read at start, and nothing on PYTHONPATH that this server
    does not have on its path (a Spark whose own pyspark zip stays on it, ``--py-files``:
    the modules imported here could be other ones)."""
    entries = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return (_startup_settings(env) == own_settings
            and all(p in sys.path or os.path.abspath(p) in sys.path for p in entries))


def preload(modules: tuple[str, ...]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # the child imports it again and fails with its own traceback
            print(f"offsetlake: the fork server could not import {module} ahead ({exc!r}); "
                  "its children import it themselves", file=sys.stderr)


def serve(listener: socket.socket, lifeline: int) -> None:
    """Fork a child for each request until ``lifeline`` reads end of file. A client that
    ends before its child (killed) takes its child with it."""
    children: dict[int, socket.socket | None] = {}  # None: its client ended
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    own_settings = _startup_settings(dict(os.environ))
    while True:
        clients = [c for c in children.values() if c is not None]
        ready, _, _ = select.select([listener, wake_r, lifeline, *clients], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
            _reap(children)
        for pid, conn in list(children.items()):
            if conn is not None and conn in ready:  # a client only speaks first: this is its end
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                conn.close()
                children[pid] = None
        if lifeline in ready and not os.read(lifeline, 512):  # after the ended clients' children
            return
        if listener in ready:
            conn, _ = listener.accept()
            try:
                pid = _fork(conn, own_settings, [listener, *clients], [wake_r, wake_w, lifeline])
            except (OSError, ValueError) as exc:
                print(f"offsetlake: the fork server could not start a process ({exc!r})", file=sys.stderr)
                pid = 0
            if pid:
                children[pid] = conn
            else:
                conn.close()


def _reap(children: dict[int, socket.socket | None]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(ANSWER.pack(os.waitstatus_to_exitcode(status)))
            conn.close()


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, streams, _, _ = socket.recv_fds(conn, HEADER.size, 3)
    if len(head) != HEADER.size or len(streams) != 3:
        for fd in streams:
            os.close(fd)
        raise ValueError("a malformed request")
    try:
        payload = read_exactly(conn, HEADER.unpack(head)[0])
        if payload is None:
            raise ValueError("a request cut short")
        return json.loads(payload), streams
    except BaseException:
        for fd in streams:
            os.close(fd)
        raise


def _fork(conn: socket.socket, own_settings: dict[str, str], sockets: list[socket.socket],
          fds: list[int]) -> int:
    """Fork the request's child and tell its client the pid; 0 (and the client is told so)
    when the request's interpreter settings are not this server's."""
    conn.settimeout(10)
    request, streams = _receive(conn)
    try:
        if not _servable(request["env"], own_settings):
            conn.sendall(ANSWER.pack(0))
            return 0
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(request, streams, [*sockets, conn], fds)  # never returns
        try:
            conn.sendall(ANSWER.pack(pid))
        except OSError:  # the client is gone: so is its child
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        conn.settimeout(None)
        return pid
    finally:
        for fd in streams:
            os.close(fd)


def _run_child(request: dict, streams: list[int], sockets: list[socket.socket], fds: list[int]) -> None:
    """Become ``python -m <module> <args>`` as the client would have run it; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, _interrupt_once)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a fresh interpreter
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one sent meanwhile comes now
        for s in sockets:
            s.close()
        for fd in fds:
            os.close(fd)
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
            os.close(fd)
        streams.clear()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = request["cwd"]  # `-m` puts the directory first (PYTHONPATH: _servable)
        module = request["module"]
        block_pandas_in_own_workers(module)  # as in a process started as `python -m module`
        sys.argv = [module, *request["args"]]
        sys.modules.pop(module, None)  # run as __main__ only, as `python -m` does
        code = _run_module(module)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


_interrupted = False  # set by the first SIGINT this child takes


def _interrupt_once(signum: int, frame) -> None:
    """SIGINT as in a fresh interpreter (a KeyboardInterrupt), once. A terminal's Ctrl-C
    reaches a child twice: from the terminal (the whole process group) and forwarded by its
    client. The second, landing while the first unwinds the child, printed a traceback of
    its own beside the CLI's "interrupted" (one run in three). The flag, set before any call:
    the second can also land while this handler runs, inside its ``signal.signal`` call
    (then the handler runs again within itself; seen once in CI's many runs)."""
    global _interrupted
    if _interrupted:
        return
    _interrupted = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.default_int_handler(signum, frame)


def _run_module(module: str) -> int:
    """``python -m module``'s run, and the exit code the interpreter would give it
    (negative: the signal it would end by)."""
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the interpreter then ends by SIGINT itself
        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


class _Terminated(BaseException):
    """SIGTERM reached the server. Not an ``Exception``: it lands wherever the server is,
    most often in its imports, where ``except Exception`` (the preload's own, and libraries'
    around optional imports) would have swallowed it and the server lived on."""


_terminating = False  # set as well: an import's bare ``except`` may still swallow it


def _terminated(signum: int, frame) -> None:
    global _terminating
    _terminating = True
    raise _Terminated


def main(path: str) -> None:
    # A terminal's Ctrl-C is the CLI's to handle. Blocked, not ignored: a child inherits the
    # block, so a SIGINT its client forwards before the child set its handler waits for it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    listener = None
    try:
        # A scheduler stopping its task (Airflow: SIGTERM to the process group) ends the
        # server as its lifeline's end does, its socket's directory removed (one was left per
        # stop). Set inside the ``try``: the handler runs as the call it lands in returns, and
        # one landing as ``bind`` returned (a caller saw the socket) raised outside it.
        signal.signal(signal.SIGTERM, _terminated)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: no BLAS threads to fork
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)  # bound first: a client that comes early waits for the imports
        listener.listen(64)
        from pipelines.spark_workers import TASK_MODULES  # pyarrow: not in the CLI before its JVM

        preload((*PRELOAD, *TASK_MODULES))
        if not _terminating:  # an import's bare ``except`` may have swallowed _Terminated
            serve(listener, sys.stdin.fileno())
    except _Terminated:  # ends it below, once its socket is removed
        pass
    finally:
        # what it bound, and only that (a failed bind leaves another's socket alone); asked of
        # the socket itself, which knows even where the signal landed as bind returned
        bound = listener is not None and listener.getsockname() == path
        if listener is not None:
            listener.close()
        for remove, target in ((os.unlink, path), (os.rmdir, os.path.dirname(path))) if bound else ():
            with contextlib.suppress(OSError):  # its socket, then its directory if empty (not
                remove(target)  # the tree: a path given by hand may sit in a shared one)
    if _terminating:  # ended by it, as without the handler
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    os._exit(0)  # at once: a caller that reads the CLI's output waits for its standard error


if __name__ == "__main__":
    main(sys.argv[1])
