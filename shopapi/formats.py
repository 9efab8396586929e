"""String formats checked as strictly as a client's validator checks them.

jsonschema's "email" check only looks for an "@", so the server accepted addresses that strict
validators (schemathesis's among them) then rejected in its responses.
"""

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
    if not isinstance(value, str):
        return True
    if not _DATE_TIME.fullmatch(value):
        return False
    try:
        datetime.datetime.fromisoformat(value.upper())
    except ValueError:
        return False
    return True
