"""Who is calling: access tokens and their revocation, the security schemes, the principal, the
OAuth token endpoint. How and why: docs/auth.md."""
