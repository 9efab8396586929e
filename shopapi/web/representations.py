"""What differs between API versions: how a resource is shown and read. A handler's `represent`
gives v1's representation; `versioned` turns it into the request's version's. More: docs/web.md."""

import functools

import connexion

from models import money
from models.errors import InvalidReference

_MINOR_UNITS = "_cents"


def current_version() -> int:
    """The version this request is served in, as found once before routing, from its path
    (`/v2/...`) or its `Accept` (shopapi/pipeline/versions.py)."""
    return version_of(connexion.context.scope)


def version_of(scope) -> int:
    """The version a request of the versioned API is answered in, which the version layer
    noted in its scope's `state` (a handler runs only for a served one)."""
    return int(scope["state"]["api_version"])


def _money_shown(fields: dict, currency: str | None = None) -> dict:
    """v2's form of a v1 representation: each `<name>_cents` becomes `<name>` with the
    currency of its object (or of the enclosing one: an order's items), which then goes."""
    currency = fields.get("currency", currency)
    has_money = any(name.endswith(_MINOR_UNITS) for name in fields)
    shown = {}
    for name, value in fields.items():
        if name.endswith(_MINOR_UNITS):
            price = {"amount": money.amount(value, currency), "currency": currency}
            shown[name.removesuffix(_MINOR_UNITS)] = price
        elif name == "currency" and has_money:
            continue
        elif isinstance(value, list):
            shown[name] = [_money_shown(v, currency) if isinstance(v, dict) else v for v in value]
        else:
            shown[name] = value
    return shown


def _money_read(body: dict, at: str = "") -> dict:
    """v1's form of a v2 request body: `price: {amount, currency}` becomes `price_cents` and
    `currency`. `at`: where the body is in the request's (`/products/3`), for errors."""
    read = {}
    for name, value in body.items():
        if isinstance(value, dict) and value.keys() == {"amount", "currency"}:
            read[f"{name}{_MINOR_UNITS}"] = _minor_units(value, f"{at}/{name}")
            read["currency"] = value["currency"]
        else:
            read[name] = value
    return read


def _minor_units(value: dict, where: str) -> int:
    """The minor units of a money object the contract let through (one decimal pattern for
    every currency), or a 422 naming what its currency cannot hold."""
    amount, currency = value["amount"], value["currency"]
    field = f"{where.rpartition('/')[2]}.amount"
    minor = money.minor_units(amount, currency)
    if minor is None:
        places = money.exponent(currency)
        most = f"at most {places} decimals" if places else "no decimals"
        raise _bad_amount(
            where,
            f"{field}: {currency} has {places} minor units (ISO 4217), so {most}; {amount} "
            "has more.",
        )
    if minor > money.MAX_MINOR_UNITS:
        largest = money.amount(money.MAX_MINOR_UNITS, currency)
        raise _bad_amount(
            where,
            f"{field}: at most {largest} {currency} ({money.MAX_MINOR_UNITS} minor units); "
            f"{amount} is more.",
        )
    return minor


def _bad_amount(where: str, detail: str) -> InvalidReference:
    # A schema-valid amount its currency cannot hold: 422, as a valid body naming something
    # unusable is (docs/decisions.md).
    return InvalidReference(f"{where}/amount", detail)


# How each version after v1 changes v1's representations: (shown, read). v3 shows money as v2.
_CHANGES = {2: (_money_shown, _money_read), 3: (_money_shown, _money_read)}


def in_version(fields: dict, version: int) -> dict:
    """v1's representation `fields` as `version` shows it."""
    change = _CHANGES.get(version)
    return change[0](fields) if change else fields


def versioned(represent):
    """Decorates a handler's `represent(row) -> dict` (v1's representation) to give the
    representation of the request's version. The undecorated function stays reachable as
    `represent.__wrapped__` (the events' snapshots are v1's)."""

    @functools.wraps(represent)
    def shown(row) -> dict:
        return in_version(represent(row), current_version())

    return shown


def read(body, at: str = ""):
    """A request body (or the part of one `at` a JSON pointer) in v1's form, whichever version
    it was sent in."""
    change = _CHANGES.get(current_version())
    return change[1](body, at) if change and isinstance(body, dict) else body
