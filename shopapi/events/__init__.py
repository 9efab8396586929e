"""What follows a change: the outbox, event payloads, webhook and push delivery, the worker
process."""
