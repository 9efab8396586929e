#!/bin/sh
# Patroni's post_bootstrap (patroni.yml), run once when the cluster is made, with the superuser's
# connection string: the app's role, shopapi, not a superuser, and the shopapi database it owns,
# and with it the public schema its migrations change (PostgreSQL 15 gives that to the
# database's owner). The superuser stays Patroni's. APP_DATABASE_PASSWORD_FILE names the file
# holding the role's password.
set -eu
APP_DATABASE_PASSWORD=$(cat "${APP_DATABASE_PASSWORD_FILE:?names no file}")
export APP_DATABASE_PASSWORD
psql "$1" --no-psqlrc --quiet -v ON_ERROR_STOP=1 <<'SQL'
\getenv password APP_DATABASE_PASSWORD
CREATE ROLE shopapi LOGIN PASSWORD :'password';
CREATE DATABASE shopapi OWNER shopapi;
SQL
