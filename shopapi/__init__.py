"""The cross-cutting parts of the service, one module each; `app.create_app` wires them."""
