"""The contract, read once at start-up: spec files bundled, the list language written in,
operations, request validation, routing to handlers."""
