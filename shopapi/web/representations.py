"""How each API version shows and reads a resource. A handler gives every field of a row (money in
minor units beside its currency); a `Shape`, built once per operation from its version's
contract (shopapi/contract/shapes.py), shows what that version has, and a `Reading` reads a body
sent in that version into the handler's form. More: docs/web.md."""

import connexion
import flask

from models import money
from models.base import Written
from models.errors import InvalidReference

# A money field `price` is stored as `price_cents`, in the currency of its object (or of the
# enclosing one: an order's items take the order's).
MINOR_UNITS = "_cents"

# The kinds of step of a Shape, each (kind, name, argument).
COPY = "copy"  # the field as it is
MONEY = "money"  # {amount, currency} from `<name>_cents` (the argument) and the currency
EACH = "each"  # a list of objects, each shown by the argument (a Shape)
NESTED = "nested"  # an object shown by the argument (a Shape)
BY_KIND = "by kind"  # an object shown by the Shape the argument maps its sibling's value to


def current_version() -> int:
    """The version this request is served in, as found once before routing, from its path
    (`/v2/...`) or its `Accept` (shopapi/pipeline/versions.py)."""
    return version_of(connexion.context.scope)


def version_of(scope) -> int:
    """The version a request of the versioned API is answered in, which the version layer
    noted in its scope's `state` (a handler runs only for a served one)."""
    return int(scope["state"]["api_version"])


class Shape:
    """How one version shows an object: the fields its schema has, in the schema's order (a
    closed schema, `additionalProperties: false`, shows no other), money as `{amount,
    currency}`. A field the object lacks is left out (what `expand` did not bring)."""

    def __init__(self, steps: list[tuple[str, str, object]], closed: bool):
        self.steps = steps
        self.closed = closed
        # Only fields as they are: one comprehension does it.
        self.names = tuple(name for kind, name, _ in steps if kind == COPY)
        if len(self.names) < len(steps):
            self.names = None

    def __call__(self, source: dict, currency: str | None = None) -> dict:
        if self.names is not None and self.closed:
            return {name: source[name] for name in self.names if name in source}
        currency = source.get("currency", currency)
        shown = {} if self.closed else dict(source)
        for kind, name, argument in self.steps:
            if kind == MONEY:
                if argument in source:
                    minor = source[argument]
                    shown[name] = (
                        None
                        if minor is None
                        else {"amount": money.amount(minor, currency), "currency": currency}
                    )
                continue
            if name not in source:
                continue
            value = source[name]
            if value is None or kind == COPY:
                shown[name] = value
            elif kind == EACH:
                shown[name] = [argument(item, currency) for item in value]
            elif kind == NESTED:
                shown[name] = argument(value, currency)
            else:  # BY_KIND: (the sibling, {its value: Shape})
                sibling, shapes = argument
                shape = shapes.get(source.get(sibling))
                shown[name] = value if shape is None else shape(value)
        return shown


def selected(page: dict, fields: str, kept: tuple[str, ...]) -> dict:
    """A list's page with only the named top-level `fields` of each item (the list language's
    `fields`), and the `kept` ones (what `expand` brought) wherever an item has them."""
    names = fields.split(",")
    names += [name for name in kept if name not in names]
    page["data"] = [{name: item[name] for name in names if name in item} for item in page["data"]]
    return page


class Reading:
    """How a body sent in one version becomes the handler's: each money field (`price:
    {amount, currency}`) as minor units and `currency`, lists of objects read item by item; as
    a `Written`, with every field the version lets a client write."""

    def __init__(self, money_fields: tuple[str, ...], each: dict, writable: frozenset[str]):
        self.money_fields = money_fields
        self.each = each
        self.writable = writable

    def __call__(self, body: dict, at: str = "") -> Written:
        """`body`, where `at` (a JSON pointer: `/products/3`) is in the request's, for errors."""
        read = Written(body, self.writable)
        for name in self.money_fields:
            if name in read:
                value = read.pop(name)
                read[f"{name}{MINOR_UNITS}"] = _minor_units(value, f"{at}/{name}")
                read["currency"] = value["currency"]
        for name, reading in self.each.items():
            if name in read:
                items = enumerate(read[name])
                read[name] = [reading(item, f"{at}/{name}/{n}") for n, item in items]
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


def shown_as_at_its_path(representation: dict) -> dict:
    """`representation` as the request's version shows the resource at the request's path (as
    its `GET` does): what an If-Match's tag is of, whatever the method."""
    shape = flask.g.get("resource_shape")
    return representation if shape is None else shape(representation)
