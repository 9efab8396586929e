import os

import flask
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from support.live import run_module

from shopapi.settings import ConfigurationError, Settings
from shopapi.web.configured import configured


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
        ("JWT_SECRET", "too-short"),
        ("JWT_PRIVATE_KEY_FILE", "/nonexistent/private.pem"),
        ("JWT_ISSUER", " "),
        ("ACCESS_TOKEN_TTL", "5"),
        ("REFRESH_TOKEN_TTL", "forever"),
        ("OAUTH_TRUSTED_ISSUERS", "https://idp.example.com"),
        ("OAUTH_TRUSTED_ISSUERS", '{"https://idp.example.com": 1}'),
        ("ADMIN_EMAIL", "root@example.com"),
        ("REQUEST_BODY_TIMEOUT_SECONDS", "0"),
        ("REQUEST_BODY_TIMEOUT_SECONDS", "soon"),
        ("REQUEST_BODIES_IN_FLIGHT_MAX_BYTES", "1000"),
        ("REQUEST_BODIES_IN_FLIGHT_MAX_BYTES", "lots"),
        ("DATABASE_STATEMENT_TIMEOUT_SECONDS", "-1"),
        ("DATABASE_TCP_TIMEOUT_SECONDS", "nan"),
        # PostgreSQL's statement timeout (5 s by default) would end every such lock wait first.
        ("DATABASE_LOCK_TIMEOUT_SECONDS", "5"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(name, value):
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env({name: value})


def test_the_hmac_secret_comes_from_the_environment_and_must_be_long():
    assert Settings.from_env({"HMAC_SECRET": "s" * 32}).hmac_secret == b"s" * 32
    with pytest.raises(ConfigurationError, match="HMAC_SECRET"):
        Settings.from_env({"HMAC_SECRET": "short"})


def test_without_a_hmac_secret_each_process_generates_one():
    assert Settings.from_env({}).hmac_secret != Settings.from_env({}).hmac_secret


def test_security_settings_come_from_the_environment(tmp_path):
    settings = Settings.from_env(
        {
            "JWT_SECRET": "j" * 32,
            "JWT_ISSUER": "https://shop.example.com",
            "JWT_AUDIENCE": "shop-api",
            "ACCESS_TOKEN_TTL": "300",
            "OAUTH_TRUSTED_ISSUERS": '{"https://idp.example.com": "/etc/idp-jwks.json"}',
            "ADMIN_EMAIL": "root@example.com",
            "ADMIN_PASSWORD": "root-password",
        }
    )
    assert settings.jwt_secret == b"j" * 32
    assert (settings.jwt_issuer, settings.jwt_audience) == ("https://shop.example.com", "shop-api")
    assert settings.access_token_ttl == 300
    assert settings.oauth_trusted_issuers == {"https://idp.example.com": "/etc/idp-jwks.json"}
    assert (settings.admin_email, settings.admin_password) == ("root@example.com", "root-password")


def test_rs256_needs_both_keys_as_pem_files(tmp_path):
    pem = tmp_path / "key.pem"
    pem.write_text("-----BEGIN PUBLIC KEY-----\n...\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ConfigurationError, match="JWT_PRIVATE_KEY_FILE"):
        Settings.from_env({"JWT_PUBLIC_KEY_FILE": str(pem)})
    not_pem = tmp_path / "key.txt"
    not_pem.write_text("hello")
    with pytest.raises(ConfigurationError, match="JWT_PUBLIC_KEY_FILE must name a PEM file"):
        Settings.from_env({"JWT_PRIVATE_KEY_FILE": str(pem), "JWT_PUBLIC_KEY_FILE": str(not_pem)})


def test_traffic_settings_come_from_the_environment():
    settings = Settings.from_env(
        {
            "SHARED_STORE_URL": "redis://cache:6379/1",
            "RATE_LIMIT_SCALE": "2.5",
            "CORS_ORIGINS": "https://a.example.com, https://b.example.com:8443/",
            "CORS_ALLOW_CREDENTIALS": "true",
            "METRICS_TOKEN": "m" * 24,
            "SLOW_REQUEST_MS": "250",
            "ALERT_WEBHOOK_URL": "http://alertmanager:9093/api/v2/alerts",
            "API_DEFAULT_VERSION": "2",
        }
    )
    assert settings.shared_store_url == "redis://cache:6379/1"
    assert settings.rate_limit_scale == 2.5
    assert settings.cors_origins == ("https://a.example.com", "https://b.example.com:8443")
    assert settings.cors_allow_credentials is True
    assert settings.metrics_token == "m" * 24
    assert settings.slow_request_ms == 250
    assert settings.alert_webhook_url == "http://alertmanager:9093/api/v2/alerts"
    assert settings.default_api_version == 2


@pytest.mark.parametrize(
    ("environ", "name"),
    [
        ({"SHARED_STORE_URL": "memcached://x:11211"}, "SHARED_STORE_URL"),
        ({"SHARED_STORE_URL": "redis"}, "SHARED_STORE_URL"),
        ({"RATE_LIMIT_SCALE": "0"}, "RATE_LIMIT_SCALE"),
        ({"RATE_LIMIT_SCALE": "lots"}, "RATE_LIMIT_SCALE"),
        ({"CORS_ORIGINS": "app.example.com"}, "CORS_ORIGINS"),
        ({"CORS_ORIGINS": "https://app.example.com/path"}, "CORS_ORIGINS"),
        ({"CORS_ORIGINS": "*", "CORS_ALLOW_CREDENTIALS": "1"}, "CORS_ORIGINS"),
        ({"METRICS_TOKEN": "short"}, "METRICS_TOKEN"),
        ({"SLOW_REQUEST_MS": "-1"}, "SLOW_REQUEST_MS"),
        ({"SEND_TIMEOUT_SECONDS": "0"}, "SEND_TIMEOUT_SECONDS"),
        ({"ALERT_WEBHOOK_URL": "ftp://alerts.example.com"}, "ALERT_WEBHOOK_URL"),
        ({"API_DEFAULT_VERSION": "v2"}, "API_DEFAULT_VERSION"),
        ({"API_DEFAULT_VERSION": "0"}, "API_DEFAULT_VERSION"),
    ],
)
def test_a_bad_traffic_setting_is_refused_naming_the_variable(environ, name):
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env(environ)


def test_the_webhook_workers_settings_come_from_the_environment():
    settings = Settings.from_env({"DELIVERY_POLL_SECONDS": "0.25", "DELIVERY_THREADS": "8"})
    assert (settings.delivery_poll_seconds, settings.delivery_threads) == (0.25, 8)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DELIVERY_POLL_SECONDS", "0"),
        ("DELIVERY_THREADS", "0"),
        ("DELIVERY_THREADS", "x"),
    ],
)
def test_a_bad_worker_setting_is_refused_naming_the_variable(name, value):
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env({name: value})


def test_the_push_settings_come_from_the_environment():
    assert Settings.from_env({}).webpush_ports == (443,)
    settings = Settings.from_env(
        {
            "PUSH_DEVICES_PER_USER": "5",
            "WEBPUSH_PORTS": "443, 8443",
            "WEBPUSH_HOSTS": "Push.Services.Mozilla.com., fcm.googleapis.com",
        }
    )
    assert settings.push_devices_per_user == 5
    assert settings.webpush_ports == (443, 8443)
    assert settings.webpush_hosts == ("push.services.mozilla.com", "fcm.googleapis.com")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PUSH_DEVICES_PER_USER", "0"),
        ("WEBPUSH_PORTS", "0"),
        ("WEBPUSH_PORTS", "65536"),
        ("WEBPUSH_PORTS", "https"),
        ("WEBPUSH_PORTS", ""),
        ("WEBPUSH_HOSTS", "https://push.services.mozilla.com"),
        ("WEBPUSH_HOSTS", "*.push.apple.com"),
    ],
)
def test_a_bad_push_setting_is_refused_naming_the_variable(name, value):
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env({name: value})


def test_forwarded_headers_are_believed_from_no_proxy_unless_named():
    assert Settings.from_env({}).forwarded_allow_ips == ()
    named = Settings.from_env({"FORWARDED_ALLOW_IPS": " 10.0.0.5, 10.1.0.0/16,2001:db8::/32 "})
    assert named.forwarded_allow_ips == ("10.0.0.5", "10.1.0.0/16", "2001:db8::/32")


@pytest.mark.parametrize("value", ["*", "proxy.internal", "10.0.0.1/24", "10.0.0.300"])
def test_trusted_proxies_are_addresses_or_networks(value):
    # Not `*`: every peer could then say whose request it is (0.0.0.0/0,::/0 if that is meant).
    with pytest.raises(ConfigurationError, match="FORWARDED_ALLOW_IPS"):
        Settings.from_env({"FORWARDED_ALLOW_IPS": value})


@pytest.mark.slow
def test_migrating_and_seeding_say_nothing_of_the_secrets_they_do_not_use(tmp_path):
    # `make run` migrates and seeds before it serves: only the server, which signs tokens and
    # cursors, warns that their secrets are generated.
    unset = ("JWT_SECRET", "HMAC_SECRET", "JWT_PRIVATE_KEY_FILE", "JWT_PUBLIC_KEY_FILE")
    env = {name: value for name, value in os.environ.items() if name not in unset}
    env |= {"DATABASE_URL": f"sqlite:///{tmp_path}/shopapi.db", "SEED_DEMO": "1"}
    for command in ("models.migrations", "models.seed"):
        run = run_module(command, env)
        assert run.returncode == 0, run.stderr
        assert "is not set" not in run.stdout
        assert run.stderr == ""


def test_read_replicas_are_postgresql_urls_beside_a_postgresql_primary():
    assert Settings.from_env({}).database_replica_urls == ()
    settings = Settings.from_env(
        {
            "DATABASE_URL": "postgresql://u@primary/shop",
            "DATABASE_REPLICA_URLS": " postgresql://u@replica-1/shop, postgres://u@replica-2/shop",
            "DATABASE_REPLICA_MAX_LAG_SECONDS": "2.5",
        }
    )
    assert settings.database_replica_urls == (
        "postgresql://u@replica-1/shop",
        "postgres://u@replica-2/shop",
    )
    assert settings.database_replica_max_lag_seconds == 2.5
    empty = {"DATABASE_URL": "postgresql://u@primary/shop", "DATABASE_REPLICA_URLS": ""}
    assert Settings.from_env(empty).database_replica_urls == ()


PRIMARY = {"DATABASE_URL": "postgresql://u@primary/shop"}


@pytest.mark.parametrize(
    ("name", "environ"),
    [
        ("DATABASE_REPLICA_URLS", {**PRIMARY, "DATABASE_REPLICA_URLS": "replica-1:5432"}),
        ("DATABASE_REPLICA_URLS", {**PRIMARY, "DATABASE_REPLICA_URLS": "sqlite:///replica.db"}),
        # SQLite has no replicas, and an unset DATABASE_URL is SQLite.
        (
            "DATABASE_REPLICA_URLS",
            {"DATABASE_URL": "sqlite:///a.db", "DATABASE_REPLICA_URLS": "postgresql://u@r/s"},
        ),
        ("DATABASE_REPLICA_URLS", {"DATABASE_REPLICA_URLS": "postgresql://u@r/s"}),
        ("DATABASE_REPLICA_MAX_LAG_SECONDS", {"DATABASE_REPLICA_MAX_LAG_SECONDS": "0"}),
        ("DATABASE_REPLICA_MAX_LAG_SECONDS", {"DATABASE_REPLICA_MAX_LAG_SECONDS": "soon"}),
    ],
)
def test_bad_replica_settings_stop_start_up_naming_the_variable(name, environ):
    with pytest.raises(ConfigurationError, match=name):
        Settings.from_env(environ)


def _private_key_file(path, curve):
    path.write_bytes(
        ec.generate_private_key(curve).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


@pytest.mark.parametrize(
    ("variable", "companions"),
    [
        ("VAPID_PRIVATE_KEY_FILE", {"VAPID_SUBJECT": "mailto:push@example.com"}),
        (
            "APNS_KEY_FILE",
            {"APNS_KEY_ID": "ABC123DEFG", "APNS_TEAM_ID": "DEF123GHIJ", "APNS_TOPIC": "com.ex.app"},
        ),
    ],
    ids=["vapid", "apns"],
)
def test_an_es256_signing_key_that_is_not_p256_stops_the_start_naming_its_variable(
    tmp_path, variable, companions
):
    """Web Push and APNs sign with ES256: a key of another kind would fail every notification
    sent, so the settings refuse it, and a PEM that holds no key at all."""
    other_curve = _private_key_file(tmp_path / "p384.pem", ec.SECP384R1())
    with pytest.raises(ConfigurationError, match=f"{variable} must be a P-256"):
        Settings.from_env({variable: str(other_curve), **companions})
    garbled = tmp_path / "garbled.pem"
    garbled.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigurationError, match=f"{variable}: .* holds no unencrypted private"):
        Settings.from_env({variable: str(garbled), **companions})
    p256 = _private_key_file(tmp_path / "p256.pem", ec.SECP256R1())
    settings = Settings.from_env({variable: str(p256), **companions})
    assert p256.read_text() in (settings.vapid_private_key, settings.apns_key)


def test_the_app_hands_its_settings_on_typed_not_as_flask_config_keys(app_with):
    # The handlers read `configured().settings` (shopapi/web/configured.py): one typed object,
    # not string keys copied into Flask's config, which no extension of ours reads.
    app = app_with(low_stock_threshold=7, push_devices_per_user=3)
    assert set(app.app.config) - set(flask.Flask("bare").config) == set()
    with app.app.app_context():
        assert configured().settings.low_stock_threshold == 7
