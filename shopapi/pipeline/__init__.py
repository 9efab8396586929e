"""The layers a request passes through around its handler, in the order app.py lists them."""
