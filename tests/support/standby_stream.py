"""A hot standby (shopapi/testing/standby.py) cut from its primary's WAL and given it back: its
primary_conninfo pointed at a port where nothing listens, as when the primary removed the WAL it
needs or cannot be reached; the standby still answers."""

import contextlib

import psycopg2

from shopapi.testing.ports import free_port


def _stream_from(standby, conninfo: str) -> None:
    with contextlib.closing(psycopg2.connect(standby.url)) as connection:
        connection.autocommit = True  # ALTER SYSTEM runs in no transaction
        with connection.cursor() as cursor:
            cursor.execute("ALTER SYSTEM SET primary_conninfo = %s", (conninfo,))
            cursor.execute("SELECT pg_reload_conf()")


@contextlib.contextmanager
def cut_from_its_primary(standby):
    ((conninfo,),) = standby.query("SHOW primary_conninfo")
    _stream_from(standby, f"host=127.0.0.1 port={free_port()} user=postgres connect_timeout=1")
    try:
        yield
    finally:
        _stream_from(standby, conninfo)
