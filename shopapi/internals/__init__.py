"""Every place the service relies on a library's private API, one module per library
(connexion, uvicorn, starlette, a2wsgi, peewee), and nowhere else. Each use is held by
tests/test_internals.py, in the class named after its library, which fails when a new release
changes it; tests/test_private_uses.py keeps any new one from being written outside this
package."""
