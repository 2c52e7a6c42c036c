"""Outside services the tests run against: a throwaway PostgreSQL cluster and headless Chromium.

Both talk only over the loopback: the cluster listens on 127.0.0.1 (and a socket in its own
temporary folder), Chromium is Debian's, driven by Debian's chromedriver, never a downloaded one.
``postgres_missing()`` and ``browser_missing()`` say what is not installed (None when all is);
the fixtures in conftest.py turn that into a skip, or into a failure under CI.
"""
from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
import warnings
from contextlib import contextmanager
from typing import Iterator, Optional

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Debian's Chromium as root needs --no-sandbox; the rest keep it from contacting anything on its own.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",  # a proxy from the environment is not the loopback
    # Pages under test are on 127.0.0.1: any host name resolves to nothing, so no stray request
    # (from the page or from Chromium itself) leaves the machine.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
    "--window-size=1280,900",
]


def postgres_bindir() -> Optional[str]:
    """The folder holding initdb and pg_ctl: `pg_config --bindir`, else the newest
    /usr/lib/postgresql/*/bin (Debian keeps them off PATH); None when neither has them."""
    candidates = []
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
        candidates.append(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass  # pg_config is in libpq-dev / postgresql-server-dev, often absent
    # Numeric sort: 9.6 < 10 < 15.
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: [int(x) if x.isdigit() else 0 for x in p.split("/")[-2].split(".")],
                         reverse=True)
    for folder in candidates:
        if all(os.access(os.path.join(folder, tool), os.X_OK) for tool in ("initdb", "pg_ctl")):
            return folder
    return None


def postgres_missing() -> Optional[str]:
    """What the PostgreSQL tests lack, with how to install it; None when nothing is missing."""
    missing = []
    if postgres_bindir() is None:
        missing.append("the PostgreSQL server (initdb, pg_ctl): apt-get install postgresql")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing.append("psycopg: pip install 'psycopg[binary]'")
    if missing:
        return "PostgreSQL tests need " + "; ".join(missing)
    return None


def browser_missing() -> Optional[str]:
    """What the browser tests lack, with how to install it; None when nothing is missing."""
    missing = [f"{path} (apt-get install {pkg})"
               for path, pkg in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver"))
               if not os.access(path, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install selenium)")
    if missing:
        return "browser tests need " + ", ".join(missing)
    return None


def _free_port() -> int:
    """A 127.0.0.1 port nobody listens on right now (start() retries if another process wins it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresCluster:
    """A PostgreSQL cluster in a temporary folder, on a free 127.0.0.1 port, trusting local users.

    ``start()`` runs initdb and pg_ctl (as the ``postgres`` user when we are root: the server
    refuses to run as root), ``create_database(name)`` returns a SQLAlchemy URL, ``stop()`` stops
    the server and removes the folder. stop() is also registered with atexit, so the server
    goes away even when a fixture finalizer never runs.
    """

    def __init__(self, bindir: Optional[str] = None):
        self.bindir = bindir or postgres_bindir()
        if self.bindir is None:
            raise RuntimeError(postgres_missing() or "initdb/pg_ctl not found")
        self.folder: Optional[str] = None
        self.port: Optional[int] = None

    @property
    def datadir(self) -> str:
        return os.path.join(self.folder, "data")

    @property
    def logfile(self) -> str:
        return os.path.join(self.folder, "server.log")

    def _run(self, tool: str, *args: str) -> None:
        """Run a server tool, as `postgres` when we are root; raise with its output and the log."""
        cmd = [os.path.join(self.bindir, tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        # cwd: the postgres user may not be allowed into ours. The output goes to a file, not a
        # pipe: the server pg_ctl leaves running would otherwise hold the pipe open.
        with tempfile.TemporaryFile() as out:
            result = subprocess.run(cmd, cwd=self.folder, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT)
            if result.returncode:
                out.seek(0)
                log = ""
                if os.path.exists(self.logfile):
                    with open(self.logfile, errors="replace") as f:
                        log = f.read()[-3000:]
                raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                                   f"{out.read().decode(errors='replace')}\n{log}")

    def start(self, attempts: int = 3) -> "PostgresCluster":
        """Create the cluster and start it; returns self once it accepts connections."""
        self.folder = tempfile.mkdtemp(prefix="reid-pg-")
        atexit.register(self.stop)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run("initdb", "-D", self.datadir, "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--locale=C", "--no-sync")
        # Trust only local sockets and 127.0.0.1 (initdb's --auth=trust also adds ::1 and
        # replication); truncating the file keeps its owner.
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write(f"\nlisten_addresses = '127.0.0.1'\n"
                    f"unix_socket_directories = '{self.folder}'\n"
                    # A throwaway cluster: durability only costs time.
                    "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
        for attempt in range(attempts):
            self.port = _free_port()
            try:
                # -w: return once the server accepts connections.
                self._run("pg_ctl", "start", "-w", "-t", "60", "-D", self.datadir,
                          "-l", self.logfile, "-o", f"-p {self.port}")
                return self
            except RuntimeError:
                # Another process (an xdist worker) may have taken the port in between.
                if attempt == attempts - 1:
                    self.stop()
                    raise
        return self

    def create_database(self, name: Optional[str] = None) -> str:
        """Create an empty database (a unique name when none is given); returns its SQLAlchemy URL."""
        import psycopg
        from psycopg import sql

        name = name or f"test_{uuid.uuid4().hex[:12]}"
        # CREATE DATABASE cannot run in a transaction.
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Stop the server (fast: open connections are cut) and remove the folder; safe to repeat."""
        if self.folder is None:
            return
        try:
            if os.path.exists(os.path.join(self.datadir, "postmaster.pid")):
                self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", self.datadir)
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
            atexit.unregister(self.stop)


def chrome_driver(profile_dir: str):
    """A Selenium Chrome webdriver on Debian's headless Chromium, window 1280x900.

    ``profile_dir``: an empty folder for the browser profile (--user-data-dir), fresh for each
    driver so no state leaks between tests. The caller quits the driver.
    """
    # Selenium Manager is never needed (the driver path is given below); should anything still
    # call it, offline mode keeps it from downloading.
    os.environ.setdefault("SE_OFFLINE", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    # Selenium talks to chromedriver on the loopback: a proxy from the environment must not
    # carry that connection elsewhere. Deprecated, but webdriver.Chrome takes no ClientConfig
    # (the replacement Selenium's warning suggests).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        options.ignore_local_proxy_environment_variables()
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


# --- An app served on the loopback from a thread -------------------------------------------------------------

@contextmanager
def served_in_thread(app, timeout: float = 30.0) -> Iterator[str]:
    """Serve the ASGI `app` with uvicorn from a thread on 127.0.0.1 (a free port, chosen by the system);
    yields its base URL and stops the server afterwards."""
    import threading
    import time

    import uvicorn

    class _Server(uvicorn.Server):
        def install_signal_handlers(self) -> None:  # a thread; the test process keeps its own handlers
            pass

    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start on 127.0.0.1")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(15)
