"""Opening a store's database: SQLite (one file, no server) or PostgreSQL (a server, several writers).

``open_database(url)`` returns a SQLAlchemy engine with the store's tables created and its schema
version checked. SQLite runs in WAL mode (readers never wait for the writer; a committed
transaction survives the process being killed) with foreign keys enforced; PostgreSQL needs the
``psycopg`` driver (``pip install "circle-reid[service]"``).
"""
from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from .schema import SCHEMA_VERSION, Base, Meta

#: The database kinds a store runs on (SQLAlchemy URL schemes).
BACKENDS = ("sqlite", "postgresql")
#: The store_meta row every writer updates first (Store.writing): writers take turns on both databases.
WRITE_LOCK = "write_lock"
#: Seconds a SQLite writer waits for another writer's lock before giving up.
SQLITE_BUSY_SECONDS = 30.0


def shown(url: str) -> str:
    """`url` with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return repr(url)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable against a killed process
    cursor.close()


def create_database_engine(url: str) -> Engine:
    """An engine for `url` ("sqlite:///FILE" or "postgresql+psycopg://..."); one line naming the URL when
    its kind is not one of :data:`BACKENDS` or its driver is missing."""
    from sqlalchemy import create_engine

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(f"database {url!r} is not a database URL; give sqlite:///FILE or "
                         "postgresql+psycopg://USER@HOST:PORT/NAME.") from None
    if parsed.get_backend_name() not in BACKENDS:
        raise ValueError(f"database {shown(url)}: {parsed.get_backend_name()!r} is not supported; "
                         f"a store runs on {' or '.join(BACKENDS)}.")
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, not SQLAlchemy's default psycopg2
    try:
        if parsed.get_backend_name() == "sqlite":
            engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_SECONDS, "check_same_thread": False})
            event.listen(engine, "connect", _sqlite_pragmas)
        else:
            engine = create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=10)
    except ImportError as e:
        raise ImportError(f"database {shown(url)} needs a driver that is not installed ({e}); "
                          'pip install "circle-reid[service]".') from e
    return engine


def open_database(url: str) -> Engine:
    """The engine of a store's database, its tables created when new; a database written by another
    schema version, or one that cannot be reached, gets one line naming it."""
    engine = create_database_engine(url)
    try:
        Base.metadata.create_all(engine)
        with Session(engine) as session, session.begin():
            row = session.get(Meta, "schema_version")
            if row is None:
                session.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
                session.add(Meta(key="created", value=repr(time.time())))
            elif row.value != str(SCHEMA_VERSION):
                raise ValueError(f"database {shown(url)} holds a store of schema version {row.value}; this "
                                 f"circle-reid reads version {SCHEMA_VERSION}: use the version that wrote it.")
            if session.get(Meta, WRITE_LOCK) is None:
                session.add(Meta(key=WRITE_LOCK, value=""))
    except OperationalError as e:
        engine.dispose()
        reason = str(e.orig).strip().splitlines()[0] if e.orig is not None else str(e)
        raise ValueError(f"database {shown(url)} cannot be opened: {reason}") from None
    except (SQLAlchemyError, ValueError):  # ValueError: another schema version; its connection closed too
        engine.dispose()
        raise
    return engine


def meta_value(engine: Engine, key: str) -> str:
    """A ``store_meta`` value ("" when unset)."""
    with Session(engine) as session:
        value = session.scalar(select(Meta.value).where(Meta.key == key))
    return value or ""


__all__ = ["BACKENDS", "WRITE_LOCK", "create_database_engine", "meta_value", "open_database", "shown"]
