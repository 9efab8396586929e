"""Password hashes as the service stores them: the suite's own process shares one salt to save
time (tests/conftest.py), so the salting itself is held here, with the system's randomness."""

import secrets

import models.passwords
from models.passwords import hash_password, verify_login, verify_password


def test_each_hash_has_a_salt_of_its_own(monkeypatch):
    monkeypatch.setattr(models.passwords, "secrets", secrets)
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first != second
    assert first.split("$")[4] != second.split("$")[4]  # the salts
    assert verify_password("correct horse", first) and verify_password("correct horse", second)
    assert not verify_password("correct horsE", first)


def test_a_login_without_a_stored_hash_never_matches():
    assert verify_login("anything", None) is False
    assert verify_login("correct horse", hash_password("correct horse")) is True
