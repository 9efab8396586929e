"""A test database that a test can take away from a running server and give back."""

import contextlib
import sqlite3
from urllib.parse import urlsplit, urlunsplit

from support.tcp_proxy import TcpProxy


@contextlib.contextmanager
def breakable(database_url, tmp_path):
    """A URL to the test database, and (cut, restore) functions that take it away and back."""
    if database_url.startswith("postgresql"):
        parts = urlsplit(database_url)
        proxy = TcpProxy(parts.hostname, parts.port or 5432)
        proxy.start()
        try:
            netloc = f"{parts.username}@127.0.0.1:{proxy.port}"
            yield urlunsplit(parts._replace(netloc=netloc)), proxy.stop, proxy.start
        finally:
            proxy.stop()
    else:
        path, away = tmp_path / "outage.db", tmp_path / "away.db"
        # SQLite's backup copies what is committed, including what is still in the -wal file
        # beside the database (a file copy would miss it: rows this test truncated, say).
        source = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        copy = sqlite3.connect(path)
        source.backup(copy)
        source.close()
        copy.close()

        def cut():  # a directory where the file was: SQLite cannot open it
            path.rename(away)
            path.mkdir()

        def restore():
            path.rmdir()
            away.rename(path)

        yield f"sqlite:///{path}", cut, restore
