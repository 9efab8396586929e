"""The demo accounts, whose passwords the README publishes, exist only in the demo database (the
SQLite file `make run` creates when DATABASE_URL is not set) or where SEED_DEMO=1 asks for them;
an operator who names an admin gets that admin only; and start-up warns, once, while any account
still has a published password."""

import json
import os
import sqlite3

import pytest
from support.live import ROOT, run_module

from models import User, demo, seed
from models.passwords import verify_password

OPERATOR = {"ADMIN_EMAIL": "Ops@Shop.example", "ADMIN_PASSWORD": "a-long-operator-password"}
PUBLISHED = {account["email"]: account["password"] for account in demo.ACCOUNTS}


def _seed(cwd, **env) -> str:
    """`make seed` (migrations, then models.seed) in `cwd`, with only `env` set of ours."""
    environ = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "ADMIN_EMAIL", "ADMIN_PASSWORD", "SEED_DEMO")
    }
    environ.update(env, PYTHONPATH=str(ROOT))
    for module in ("models.migrations", "models.seed"):
        done = run_module(module, environ, cwd)
        assert done.returncode == 0, done.stderr
    return done.stdout


def _sqlite_users(path) -> dict[str, tuple[str, str]]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT email, role, password_hash FROM user").fetchall()
    return {email: (role, password_hash) for email, role, password_hash in rows}


def _published_in(users: dict[str, tuple[str, str]]) -> set[str]:
    """The emails in `users` whose password is one the README publishes."""
    return {
        email
        for email, (_, password_hash) in users.items()
        if any(verify_password(password, password_hash) for password in demo.PUBLISHED_PASSWORDS)
    }


@pytest.mark.slow
def test_make_run_on_a_bare_machine_gets_the_demo_database_with_the_demo_accounts(tmp_path):
    print(_seed(tmp_path))
    users = _sqlite_users(tmp_path / "data" / "shopapi.db")
    assert set(users) == set(PUBLISHED)
    assert users["admin@example.com"][0] == "admin"
    assert _published_in(users) == set(PUBLISHED)  # the README's examples log in with them


@pytest.mark.slow
def test_in_the_demo_database_an_operators_admin_replaces_the_demo_one(tmp_path):
    _seed(tmp_path, **OPERATOR)
    users = _sqlite_users(tmp_path / "data" / "shopapi.db")
    assert set(users) == {"carol@example.com", "paul@example.com"}  # the app adds the operator's


@pytest.mark.slow
def test_a_database_of_the_operators_gets_only_their_admin(app, app_with, database_url, tmp_path):
    output = _seed(tmp_path, DATABASE_URL=database_url, **OPERATOR)
    assert "no demo data" in output
    assert not User.select().exists()
    app_with(admin_email=OPERATOR["ADMIN_EMAIL"], admin_password=OPERATOR["ADMIN_PASSWORD"])
    users = {user.email: (user.role, user.password_hash) for user in User.select()}
    assert set(users) == {"ops@shop.example"}
    assert users["ops@shop.example"][0] == "admin"
    assert not _published_in(users)


@pytest.mark.slow
def test_the_demo_data_goes_elsewhere_only_when_asked_for(app, database_url, tmp_path):
    output = _seed(tmp_path, DATABASE_URL=database_url, SEED_DEMO="1", **OPERATOR)
    assert "seeded" in output
    # Asked for: the demo customer and partner; the admin stays the operator's alone.
    assert {user.email for user in User.select()} == {"carol@example.com", "paul@example.com"}
    # Asked not to: not even the demo database gets it.
    assert "no demo data" in _seed(tmp_path, SEED_DEMO="0")
    assert _sqlite_users(tmp_path / "data" / "shopapi.db") == {}


def _warnings(capsys) -> list[dict]:
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    return [line for line in lines if line["logger"] == "shopapi.demo"]


def test_start_up_warns_once_while_a_published_password_is_in_use(app, app_with, capsys):
    seed.seed()
    capsys.readouterr()
    served = app_with().test_client()
    assert served.get("/v1/openapi.json").status_code == 200
    (warning,) = _warnings(capsys)
    assert warning["level"] == "warning"
    assert warning["accounts"] == ["admin@example.com", "carol@example.com", "paul@example.com"]
    assert all(email in warning["message"] for email in PUBLISHED)
    assert not any(password in json.dumps(warning) for password in demo.PUBLISHED_PASSWORDS)

    # Once a password is changed that account is not named; once all are, nothing is said.
    carol = User.get(User.email == "carol@example.com")
    carol.password = "carol-changed-it"
    carol.save()
    app_with()
    (warning,) = _warnings(capsys)
    assert warning["accounts"] == ["admin@example.com", "paul@example.com"]
    User.delete().where(User.email.in_(["admin@example.com", "paul@example.com"])).execute()
    app_with()
    assert _warnings(capsys) == []


def test_an_operators_admin_with_a_published_password_is_warned_of(app, app_with, capsys):
    capsys.readouterr()
    app_with(admin_email="root@shop.example", admin_password="admin-pass")
    (warning,) = _warnings(capsys)
    assert warning["accounts"] == ["root@shop.example"]


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, True),
        ({"DATABASE_URL": "sqlite:///data/shopapi.db"}, False),  # named: the operator's own
        ({"DATABASE_URL": "postgresql://db/shop", "SEED_DEMO": "1"}, True),
        ({"SEED_DEMO": "0"}, False),
    ],
)
def test_which_databases_get_the_demo_data(environ, wanted):
    assert seed.wanted(environ) is wanted
