import pytest

from shopapi.settings import ConfigurationError, Settings


def test_defaults_need_nothing_set():
    settings = Settings.from_env({})
    assert settings.database_url == "sqlite:///data/shopapi.db"
    assert settings.validate_responses is False


def test_values_come_from_the_environment():
    settings = Settings.from_env(
        {
            "DATABASE_URL": "postgresql://u@db:5432/shop",
            "VALIDATE_RESPONSES": "true",
            "DATABASE_POOL_SIZE": "32",
        }
    )
    assert settings.database_url == "postgresql://u@db:5432/shop"
    assert settings.validate_responses is True
    assert settings.database_pool_size == 32


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "mysql://x"),
        ("VALIDATE_RESPONSES", "maybe"),
        ("DATABASE_POOL_SIZE", "lots"),
        ("DATABASE_POOL_SIZE", "0"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(name, value):
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env({name: value})


def test_the_cursor_secret_comes_from_the_environment_and_must_be_long():
    assert Settings.from_env({"CURSOR_SECRET": "s" * 32}).cursor_secret == b"s" * 32
    with pytest.raises(ConfigurationError, match="CURSOR_SECRET"):
        Settings.from_env({"CURSOR_SECRET": "short"})


def test_without_a_cursor_secret_each_process_generates_one():
    assert Settings.from_env({}).cursor_secret != Settings.from_env({}).cursor_secret
