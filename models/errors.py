"""What the domain refuses, in its own words; the web layer decides what status each gets."""


class Conflict(Exception):
    """The change conflicts with the current state of the data."""


class OutOfStock(Conflict):
    pass


class TransitionNotAllowed(Conflict):
    pass


class CurrentPasswordRequired(Exception):
    """A user changing their own password or email did not prove who they are."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class InvalidReference(ValueError):
    """A change names something that does not exist or cannot be used (an unknown product)."""

    def __init__(self, pointer: str, detail: str):
        super().__init__(detail)
        self.pointer = pointer
        self.detail = detail


class PendingLimitReached(Conflict):
    """A customer's pending orders would hold more of a product than they may."""
