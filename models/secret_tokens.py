"""Random secrets handed out once (API keys, client secrets, refresh tokens), kept as digests.

A secret of 256 random bits cannot be guessed, so a fast SHA-256 digest protects a stolen table
as well as a slow KDF would, without adding a KDF's 50 ms to every request that presents one.
The digest is also what lookups index, so the secret itself is never compared byte by byte.
"""

import hashlib
import secrets


def generate(prefix: str) -> str:
    """`prefix_` and 43 URL-safe characters; the prefix tells what a leaked secret is."""
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
