"""Money: an integer count of the currency's minor units (ISO 4217 exponents), shown by API v2
and v3 as `{"amount": "12.50", "currency": "EUR"}`, and compared across currencies in SQL. More:
docs/web.md."""

import decimal

import peewee

# The currencies whose exponent is not 2 (ISO 4217).
_EXPONENTS = {
    currency: exponent
    for exponent, currencies in (
        (0, "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF"),
        (3, "BHD IQD JOD KWD LYD OMR TND"),
        (4, "CLF UYW"),
    )
    for currency in currencies.split()
}
_DEFAULT_EXPONENT = 2
# The most a price may be in minor units: v1's bound on `price_cents` (spec/openapi.yaml).
MAX_MINOR_UNITS = 1_000_000_000
# Filters and sorts compare amounts across currencies in ten-thousandths of a unit: every
# exponent above is at most 4, so each stored amount is a whole number of them.
COMPARABLE_EXPONENT = 4


def exponent(currency: str) -> int:
    return _EXPONENTS.get(currency, _DEFAULT_EXPONENT)


def amount(minor: int, currency: str) -> str:
    """The decimal amount of `minor` units, with as many decimals as the currency has."""
    return f"{decimal.Decimal(minor).scaleb(-exponent(currency)):f}"


def minor_units(value: str, currency: str) -> int | None:
    """The minor units a decimal amount is, or None when it is written with more decimals than
    the currency has (12.345 EUR, and 12.500 EUR too: the contract's rule is written decimals)."""
    written = decimal.Decimal(value)
    if -written.as_tuple().exponent > exponent(currency):
        return None
    return int(written.scaleb(exponent(currency)))


# The factor of each currency, written once as literal SQL: as a `peewee.Case` its 57
# parameters were rendered each time a query was, which was two fifths of the CPU of a v3 list
# sorted by `price.amount` (three renderings a request). The codes and factors are this module's
# constants, never a client's. PostgreSQL receives the same text either way (psycopg2 binds
# parameters in the client), so m0013's index still matches.
_FACTORS = peewee.SQL(
    " ".join(
        f"WHEN '{code}' THEN {10 ** (COMPARABLE_EXPONENT - e)}"
        for code, e in sorted(_EXPONENTS.items())
    )
    + f" ELSE {10 ** (COMPARABLE_EXPONENT - _DEFAULT_EXPONENT)} END"
)


def comparable(minor: peewee.Field, currency: peewee.Field) -> peewee.Node:
    """SQL for an amount in ten-thousandths of a unit, whatever its currency."""
    return peewee.NodeList((minor, peewee.SQL("* CASE"), currency, _FACTORS), parens=True)


def comparable_value(value: str) -> int:
    """A filter's decimal amount in ten-thousandths (the contract allows at most four
    decimals, so this is exact)."""
    return int(decimal.Decimal(value).scaleb(COMPARABLE_EXPONENT))
