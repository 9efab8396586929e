"""String formats checked as strictly as a client's validator checks them (jsonschema's are
lenient or optional). Why: docs/contract.md."""

import copy
import datetime
import ipaddress
import re

from jsonschema import Draft4Validator

# RFC 5322 addr-spec without comments: a dot-atom or quoted local part, then a host name or an
# address literal.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_DOT_ATOM = rf"{_ATEXT}(?:\.{_ATEXT})*"
_QUOTED = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"'
_LOCAL_PART = re.compile(f"{_DOT_ATOM}|{_QUOTED}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")

FORMAT_CHECKER = copy.deepcopy(Draft4Validator.FORMAT_CHECKER)


@FORMAT_CHECKER.checks("email")
def is_email(value) -> bool:
    if not isinstance(value, str):
        return True
    local, _, domain = value.rpartition("@")
    if not _LOCAL_PART.fullmatch(local):
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        try:
            if literal.startswith("IPv6:"):
                ipaddress.IPv6Address(literal[5:])
            else:
                ipaddress.IPv4Address(literal)
        except ValueError:
            return False
        return True
    return bool(_HOST.fullmatch(domain))


# RFC 3339 date-time: jsonschema checks this format only when an optional package is installed.
_DATE_TIME = re.compile(
    r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(?:\.\d+)?(?:[Zz]|[+-]\d\d:\d\d)", re.ASCII
)


@FORMAT_CHECKER.checks("date-time")
def is_date_time(value) -> bool:
    """An RFC 3339 date-time that is also a UTC time from year 1 to 9999: every time is kept,
    compared and shown in UTC, so `9999-12-31T23:59:59-05:00` (in year 10000 there) is refused
    like any other impossible time, in bodies and query filters alike."""
    if not isinstance(value, str):
        return True
    if not _DATE_TIME.fullmatch(value):
        return False
    try:
        datetime.datetime.fromisoformat(value.upper()).astimezone(datetime.UTC)
    except (ValueError, OverflowError):
        return False
    return True


# RFC 3986 URI (an absolute one: a scheme, then the rest in its allowed characters): jsonschema
# checks "uri" only when an optional package is installed, and strict validators refuse control
# or non-ASCII characters that would otherwise be accepted and echoed back.
_PCT = r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|{_PCT})"
_URI = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*):"
    rf"(?://(?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|{_PCT})*@)?"
    rf"(?P<host>\[[0-9A-Fa-f:.]+\]|(?:[A-Za-z0-9\-._~!$&'()*+,;=]|{_PCT})*)"
    r"(?::[0-9]*)?"
    rf"(?:/{_PCHAR}*)*|/?(?:{_PCHAR}+(?:/{_PCHAR}*)*)?)"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?",
    re.ASCII,
)


@FORMAT_CHECKER.checks("uri")
def is_uri(value) -> bool:
    if not isinstance(value, str):
        return True
    match = _URI.fullmatch(value)
    if match is None:
        return False
    host = match["host"] or ""
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
    return True
