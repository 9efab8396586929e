"""The cross-cutting parts of the service, one module each; `app.create_app` wires them."""

import warnings

# Connexion imports starlette.testclient (connexion/apps/abstract.py) for its test client, and
# Starlette warns there, at every start, that it found httpx rather than httpx2: nothing an
# operator can act on, and a line that is not JSON in the server's log. Whichever module of ours
# imports Connexion first (the server's protocol does, before app.py), that warning only.
warnings.filterwarnings(
    "ignore",
    message="Using `httpx` with `starlette.testclient` is deprecated",
    module="connexion.apps.abstract",
)
