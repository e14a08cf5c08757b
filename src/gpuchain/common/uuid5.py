"""Name-based (version 5) UUIDs, the same values as ``uuid.uuid5``, without importing hashlib.

Why: ``uuid.uuid5`` imports hashlib, which loads OpenSSL's ``_hashlib`` and ``_blake2`` and
touches libcrypto: 0.6 MiB resident in the node agent (``bench.agents.imports``) for one SHA-1
of a few dozen bytes. CPython ships its own small SHA-1, ``_sha1``, which hashlib itself falls
back to; it is used here, and hashlib only on an interpreter built without it.
"""

from __future__ import annotations

import uuid

try:
    from _sha1 import sha1  # type: ignore[import-not-found]  # typeshed has no stub for CPython's _sha1
except ImportError:  # an interpreter built without its own SHA-1
    from hashlib import sha1


def uuid5(namespace: uuid.UUID, name: str) -> uuid.UUID:
    """``uuid.uuid5(namespace, name)``: RFC 4122's SHA-1 of the namespace's bytes and the UTF-8 name,
    truncated to 16 bytes with the version and variant bits set."""
    digest = sha1(namespace.bytes + name.encode("utf-8")).digest()
    return uuid.UUID(bytes=digest[:16], version=5)
