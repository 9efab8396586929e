"""Settings renamed for what they do: the new names are read, and the old ones still are, each
with one warning per process naming its new name; both set to different values refuse to start."""

import dataclasses
import logging
import os
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from support.live import ROOT

from shopapi.settings import ConfigurationError, Settings, generated_secrets

SECRET = "a-secret-of-at-least-sixteen-characters"
# old name -> (new name, a value, the field it sets, what the field holds then)
RENAMED = {
    "RATELIMIT_STORAGE_URI": (
        "SHARED_STORE_URL",
        "redis://cache:6379/1",
        "shared_store_url",
        "redis://cache:6379/1",
    ),
    "CURSOR_SECRET": ("HMAC_SECRET", SECRET, "hmac_secret", SECRET.encode()),
    "WEBHOOK_TIMEOUT_SECONDS": (
        "DELIVERY_TIMEOUT_SECONDS",
        "2.5",
        "delivery_timeout_seconds",
        2.5,
    ),
    "WEBHOOK_RETRY_BASE_SECONDS": (
        "DELIVERY_RETRY_BASE_SECONDS",
        "7",
        "delivery_retry_base_seconds",
        7.0,
    ),
    "WEBHOOK_MAX_ATTEMPTS": ("DELIVERY_MAX_ATTEMPTS", "3", "delivery_max_attempts", 3),
    "WEBHOOK_POLL_SECONDS": ("DELIVERY_POLL_SECONDS", "0.5", "delivery_poll_seconds", 0.5),
    "WEBHOOK_WORKER_THREADS": ("DELIVERY_THREADS", "6", "delivery_threads", 6),
}
# Paths of key files, named as APNS_KEY_FILE and FCM_SERVICE_ACCOUNT_FILE are.
RENAMED_FILES = {
    "JWT_PRIVATE_KEY": "JWT_PRIVATE_KEY_FILE",
    "JWT_PUBLIC_KEY": "JWT_PUBLIC_KEY_FILE",
    "VAPID_PRIVATE_KEY": "VAPID_PRIVATE_KEY_FILE",
}


def _formerly() -> dict[str, str]:
    return {
        old: field.metadata["variable"]
        for field in dataclasses.fields(Settings)
        for old in field.metadata.get("formerly", ())
    }


def test_the_settings_table_names_each_renamed_setting_old_and_new():
    assert _formerly() == {old: new for old, (new, *_) in RENAMED.items()} | RENAMED_FILES


def _pem(path, key) -> str:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(path)


def test_the_key_files_are_read_from_their_old_names_too(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr("shopapi.settings._deprecated_names_warned", set())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = tmp_path / "public.pem"
    public.write_bytes(
        rsa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    environ = {
        "JWT_PRIVATE_KEY": _pem(tmp_path / "private.pem", rsa_key),
        "JWT_PUBLIC_KEY": str(public),
        "VAPID_PRIVATE_KEY": _pem(tmp_path / "vapid.pem", ec.generate_private_key(ec.SECP256R1())),
        "VAPID_SUBJECT": "mailto:push@example.com",
    }
    with caplog.at_level(logging.WARNING, logger="shopapi.settings"):
        settings = Settings.from_env(environ, warn_of_generated_secrets=False)
    assert "BEGIN PRIVATE KEY" in settings.jwt_private_key
    assert "BEGIN PUBLIC KEY" in settings.jwt_public_key
    assert "BEGIN PRIVATE KEY" in settings.vapid_private_key
    assert sorted(caplog.messages) == sorted(
        f"{old} is deprecated: set {new} instead" for old, new in RENAMED_FILES.items()
    )
    # An RS256 pair under its old names replaces JWT_SECRET: none is generated.
    assert generated_secrets(environ | {"HMAC_SECRET": SECRET}) == []


@pytest.mark.parametrize("old", RENAMED)
def test_a_renamed_setting_is_read_from_its_new_name_without_a_warning(old, caplog):
    new, raw, field, value = RENAMED[old]
    with caplog.at_level(logging.WARNING, logger="shopapi.settings"):
        settings = Settings.from_env({new: raw}, warn_of_generated_secrets=False)
    assert getattr(settings, field) == value
    assert caplog.messages == []


@pytest.mark.parametrize("old", RENAMED)
def test_the_old_name_still_works_and_the_warning_names_the_new_one(old, caplog, monkeypatch):
    new, raw, field, value = RENAMED[old]
    monkeypatch.setattr("shopapi.settings._deprecated_names_warned", set())
    with caplog.at_level(logging.WARNING, logger="shopapi.settings"):
        settings = Settings.from_env({old: raw}, warn_of_generated_secrets=False)
    assert getattr(settings, field) == value
    assert len(caplog.messages) == 1
    assert old in caplog.messages[0] and new in caplog.messages[0]
    assert "deprecated" in caplog.messages[0]


def test_an_old_names_bad_value_is_refused_naming_the_variable_it_was_read_from():
    with pytest.raises(ConfigurationError, match="WEBHOOK_MAX_ATTEMPTS"):
        Settings.from_env({"WEBHOOK_MAX_ATTEMPTS": "many"})


def test_old_and_new_names_set_to_different_values_refuse_to_start():
    with pytest.raises(ConfigurationError, match=r"RATELIMIT_STORAGE_URI.*SHARED_STORE_URL"):
        Settings.from_env(
            {"RATELIMIT_STORAGE_URI": "redis://a:6379/0", "SHARED_STORE_URL": "redis://b:6379/0"}
        )


def test_old_and_new_names_set_alike_start_with_the_warning(caplog, monkeypatch):
    monkeypatch.setattr("shopapi.settings._deprecated_names_warned", set())
    environ = {"WEBHOOK_MAX_ATTEMPTS": "3", "DELIVERY_MAX_ATTEMPTS": "3"}
    with caplog.at_level(logging.WARNING, logger="shopapi.settings"):
        assert Settings.from_env(environ).delivery_max_attempts == 3
    assert [m for m in caplog.messages if "WEBHOOK_MAX_ATTEMPTS" in m] != []


def test_the_old_secret_name_counts_as_set_and_a_generated_one_goes_by_the_new_name():
    assert "HMAC_SECRET" in generated_secrets({})
    assert generated_secrets({"CURSOR_SECRET": SECRET, "JWT_SECRET": SECRET * 2}) == []
    assert generated_secrets({"HMAC_SECRET": SECRET, "JWT_SECRET": SECRET * 2}) == []


def test_each_old_name_is_warned_of_once_per_process():
    # A server reads its settings more than once (the server, the app, gunicorn's master).
    env = {name: value for name, value in os.environ.items() if name not in RENAMED}
    env |= {"RATELIMIT_STORAGE_URI": "memory://", "WEBHOOK_POLL_SECONDS": "2"}
    read_three_times = (
        "from shopapi.settings import Settings\n"
        "for _ in range(3): Settings.from_env(warn_of_generated_secrets=False)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", read_three_times],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert [line for line in lines if "RATELIMIT_STORAGE_URI" in line] == [
        "RATELIMIT_STORAGE_URI is deprecated: set SHARED_STORE_URL instead"
    ]
    assert len([line for line in lines if "WEBHOOK_POLL_SECONDS" in line]) == 1
