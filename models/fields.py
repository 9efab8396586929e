"""Column types shared by the models."""

import datetime

import peewee


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class UTCDateTimeField(peewee.DateTimeField):
    """A timezone-aware UTC datetime, stored as naive UTC so SQLite and PostgreSQL compare and
    sort it the same way."""

    def db_value(self, value):
        if isinstance(value, datetime.datetime) and value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return super().db_value(value)

    def python_value(self, value):
        value = super().python_value(value)
        if isinstance(value, datetime.datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return value
