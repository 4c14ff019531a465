"""Child processes of the harness: finding the executables, starting them in
their own session with a log file, stopping them by pid, and cleaning up at
interpreter exit whatever a crashed test run left behind.

Only processes started here are ever signalled, always through their own
``Popen`` object: never by name, never a process group.

Servers die with their parent. The exit hook cannot run when the test process
is killed (SIGKILL, the OOM killer, a CI timeout), so on Linux every child
asks the kernel for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``,
set by a few lines of Python that then exec the server in the same process).
The kernel's "parent" is the *thread* that forked the child, not the process:
a server forked by a short-lived thread would be killed when that thread ends.
So every child is forked by one long-lived harness thread, ``lbtest-spawner``,
which lives as long as the interpreter.
A watchdog pipe was the alternative; it needs a helper process per server
(the servers are Go programs that cannot watch a pipe themselves), which can
itself be killed, and it hides the server's pid behind the helper's.
Elsewhere than Linux there is no such guarantee; the exit hook remains.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from liftbridge.testing._errors import ServerBinaryNotFoundError, ServerStartError

_LOG = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"

KILL_WAIT = 10.0
"""Seconds to wait for the kernel to reap a process after SIGKILL."""

SHUTDOWN = threading.Event()
"""Set when the interpreter exits: harness wait loops give up at once."""


def resolve_binary(explicit: str | os.PathLike[str] | None, *, env_var: str, name: str) -> str:
    """Finds a server executable: the explicit path, else ``$env_var``, else ``name`` on PATH.

    Args:
        explicit: a path given by the caller, or ``None``.
        env_var: the environment variable naming the executable.
        name: the executable's name on PATH.

    Returns:
        An absolute path to an executable file.

    Raises:
        ServerBinaryNotFoundError: with a message saying how to provide it.
    """
    how = _how_to_get(name, env_var)
    if explicit is not None:
        return _executable(Path(explicit), f"binary={os.fspath(explicit)!r}", how)
    from_env = os.environ.get(env_var)
    if from_env:
        return _executable(Path(from_env), f"{env_var}={from_env!r}", how)
    skipped: list[str] = []
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        found = shutil.which(name, path=directory or os.curdir)
        if found is None:
            continue
        if is_python_script(Path(found)):
            skipped.append(os.path.abspath(found))
            continue
        return os.path.abspath(found)
    if skipped:
        how = f"{', '.join(skipped)} on PATH is a Python script, not the server; {how}"
    raise ServerBinaryNotFoundError(f"cannot find the {name} server executable: {how}")


def is_python_script(path: Path) -> bool:
    """Tells whether ``path`` is a Python script (such as a console script of an old
    ``liftbridge`` SDK, whose command line was named like the server): the servers
    are compiled programs, never scripts run by Python."""
    try:
        with path.open("rb") as file:
            head = file.read(256)
    except OSError:
        return False
    first_line = head.split(b"\n", 1)[0]
    return head.startswith(b"#!") and b"python" in first_line


_GET_LIFTBRIDGE = (
    "a release binary of Liftbridge v1.9.0 "
    "(https://github.com/liftbridge-io/liftbridge/releases, no Go needed), "
    "`go install github.com/liftbridge-io/liftbridge@v1.9.0`, or `make server` in a checkout "
    "of this SDK (builds it into .cache/servers/bin/). Without a binary, "
    "liftbridge.testing.LiftbridgeContainer runs the official liftbridge/standalone-dev "
    "image in Docker (pip install 'liftbridge[testing]')"
)
_GET_NATS = (
    "a release binary (https://github.com/nats-io/nats-server/releases), your system's "
    "nats-server package, or `make server` in a checkout of this SDK"
)


def _how_to_get(name: str, env_var: str) -> str:
    """What a ServerBinaryNotFoundError tells the user to do."""
    ways = _GET_LIFTBRIDGE if name == "liftbridge" else _GET_NATS if name == "nats-server" else ""
    how = f"set {env_var} to its path or put '{name}' on PATH"
    return f"{how}. Ways to get it: {ways}" if ways else how


def _executable(path: Path, origin: str, how: str) -> str:
    if not path.is_file():
        raise ServerBinaryNotFoundError(f"{origin} is not a file; {how}")
    if not os.access(path, os.X_OK):
        raise ServerBinaryNotFoundError(f"{origin} is not executable; {how}")
    if is_python_script(path):
        raise ServerBinaryNotFoundError(
            f"{origin} is a Python script (the SDK's command line?), not the server; {how}"
        )
    return str(path.resolve())


def free_port() -> int:
    """Returns a TCP port on 127.0.0.1 that was free a moment ago.

    Another process may take it before the server binds it; the callers retry
    with a new port when the server's log says the address is in use.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int, timeout: float, *, host: str = LOOPBACK) -> bool:
    """Tells whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


_SPAWN_TIMEOUT = 30.0
"""Seconds a start waits for the spawner thread to fork and exec."""

# Run by the child's own Python before it becomes the server: the parent-death
# signal is set in a process of its own rather than in a ``preexec_fn``,
# because a ``preexec_fn`` makes CPython fork() instead of vfork(), and then
# gRPC's fork handlers run in the child of a process with live gRPC threads,
# which can abort it before exec. prctl survives execv; the pid stays the same.
_DIE_WITH_PARENT = """\
import ctypes, os, sys
ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
if os.getppid() != int(sys.argv[1]):  # the parent died before prctl took effect
    os._exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""

_PDEATHSIG = sys.platform.startswith("linux")

# One thread forks every child (see the module docstring); made on first use.
_SPAWNER_LOCK = threading.Lock()  # guards _spawner
_spawner: ThreadPoolExecutor | None = None


def _spawn(argv: Sequence[str], env: Mapping[str, str] | None, log: int) -> subprocess.Popen[bytes]:
    """Starts a child in its own session, writing to the file descriptor ``log``,
    bound to die with this process where the platform allows."""
    global _spawner
    command = list(argv)
    if _PDEATHSIG:
        command = [sys.executable, "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv]

    def fork() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )

    if not _PDEATHSIG:
        return fork()
    with _SPAWNER_LOCK:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lbtest-spawner")
        spawner = _spawner
    return spawner.submit(fork).result(timeout=_SPAWN_TIMEOUT)


def make_temp_dir(prefix: str) -> Path:
    """Creates a temporary directory that is removed at interpreter exit if still there."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    with _REGISTRY_LOCK:
        _DIRS.add(path)
    return path


def remove_temp_dir(path: Path) -> None:
    """Removes a directory made by :func:`make_temp_dir`."""
    shutil.rmtree(path, ignore_errors=True)
    with _REGISTRY_LOCK:
        _DIRS.discard(path)


class ManagedProcess:
    """One server process started by the harness, with its output in a log file.

    The process runs in a new session, so a Ctrl-C in the terminal reaches only
    the test runner, whose exit hook then kills it; on Linux it also gets
    SIGKILL from the kernel when the test process dies any other way.

    Thread-safety: not thread-safe; one owner drives it. The exit hook only
    calls :meth:`kill`, after the owner's threads are gone.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Prepares, without starting.

        Args:
            name: a label for log messages, e.g. ``"liftbridge a"``.
            argv: the command line.
            log_path: the file that receives stdout and stderr (appended to).
            env: the environment of the process; ``None`` inherits ours.
        """
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = None if env is None else dict(env)
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where this run's output begins in the log file

    @property
    def pid(self) -> int | None:
        """The process id of the current or last run, ``None`` before the first start."""
        return None if self._popen is None else self._popen.pid

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has exited, else ``None``."""
        return None if self._popen is None else self._popen.poll()

    def start(self) -> None:
        """Starts the process (again), appending its output to the log file."""
        if self.running:
            raise ServerStartError(f"{self.name} is already running (pid {self.pid})")
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            log.write(f"=== liftbridge.testing: starting {' '.join(self.argv)}\n".encode())
            log.flush()
            self._popen = _spawn(self.argv, self.env, log.fileno())
        with _REGISTRY_LOCK:
            _LIVE.add(self)
        _LOG.debug("started %s (pid %d): %s", self.name, self._popen.pid, " ".join(self.argv))

    def interrupt(self) -> None:
        """Sends SIGINT (graceful stop) if the process is running; does not wait."""
        if self._popen is not None and self._popen.poll() is None:
            self._popen.send_signal(signal.SIGINT)

    def wait(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for the process to exit.

        Returns:
            True when it has exited (or was never started).
        """
        if self._popen is None:
            return True
        try:
            self._popen.wait(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            return False
        self._forget()
        return True

    def stop(self, timeout: float) -> None:
        """SIGINT, then SIGKILL if the process has not exited within ``timeout`` seconds."""
        self.interrupt()
        if not self.wait(timeout):
            _LOG.warning(
                "%s did not stop within %.1fs after SIGINT; killing it", self.name, timeout
            )
            self.kill()

    def kill(self) -> None:
        """SIGKILL, then waits for the kernel to reap the process."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            self._popen.kill()
        if not self.wait(KILL_WAIT):
            _LOG.error(
                "%s (pid %d) survived SIGKILL for %.0fs", self.name, self._popen.pid, KILL_WAIT
            )

    def output(self) -> str:
        """This run's output so far (the log file from where this run began)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_start)
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _forget(self) -> None:
        with _REGISTRY_LOCK:
            _LIVE.discard(self)


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file, ``""`` when it cannot be read."""
    if lines <= 0:
        return ""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            size = log.tell()
            log.seek(max(0, size - 256 * 1024))  # a tail never needs more
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def address_in_use(output: str) -> bool:
    """Tells whether a server's output says it lost a race for its port."""
    return "address already in use" in output.lower()


_PROMOTION_TIMED_OUT = re.compile(r"Error on metadata leadership acquired: .*timed out")


def promotion_timed_out(output: str) -> bool:
    """Tells whether a server's output says it crashed for want of time in
    its own start-up: on a busy machine the Raft operations of its promotion
    to metadata leader (creating the internal streams' partitions) time out,
    and a one-node cluster, having no peer to hand leadership to, panics.
    A new start on fresh data does not meet the same delay."""
    return _PROMOTION_TIMED_OUT.search(output) is not None


def bootstrap_raced(output: str) -> bool:
    """Tells whether a cluster node's output says it crashed because a peer's
    vote request came before its Raft bootstrap (see :class:`BootstrapRaceError`)."""
    return "bootstrap only works on new clusters" in output


# Everything the harness started and has not cleaned up yet, for the exit hook.
_REGISTRY_LOCK = threading.Lock()  # guards _LIVE and _DIRS
_LIVE: set[ManagedProcess] = set()
_DIRS: set[Path] = set()


def _cleanup_at_exit() -> None:
    SHUTDOWN.set()
    with _REGISTRY_LOCK:
        processes = list(_LIVE)
        dirs = list(_DIRS)
    for process in processes:
        _LOG.warning("killing %s (pid %s), left running at exit", process.name, process.pid)
        process.kill()
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_cleanup_at_exit)
