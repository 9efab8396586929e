"""Who is calling: access tokens and their revocation, the security schemes, the principal, the
OAuth token endpoint, attempts at an account's credentials. How and why: docs/auth.md."""
