"""Name-based (version 5) UUIDs, the same strings as ``str(uuid.uuid5(...))``, without importing
hashlib or uuid.

Why: ``uuid.uuid5`` imports hashlib, which loads OpenSSL's ``_hashlib`` and ``_blake2`` and
touches libcrypto: 0.6 MiB resident in the node agent (``bench.agents.imports``) for one SHA-1
of a few dozen bytes. CPython ships its own small SHA-1, ``_sha1``, which hashlib itself falls
back to; it is used here, and hashlib only on an interpreter built without it. ``uuid`` itself
imports ``platform`` and the ``_uuid`` extension (libuuid), 0.2 MiB more over a grpc process, for
a value that is 16 bytes with two fields set and written as hex: the namespace is its bytes and the
answer its string.
"""

from __future__ import annotations

try:
    from _sha1 import sha1  # type: ignore[import-not-found]  # typeshed has no stub for CPython's _sha1
except ImportError:  # an interpreter built without its own SHA-1
    from hashlib import sha1

NAMESPACE_URL = bytes.fromhex("6ba7b8119dad11d180b400c04fd430c8")
"""RFC 4122's URL namespace: ``uuid.NAMESPACE_URL.bytes``."""


def uuid5(namespace: bytes, name: str) -> str:
    """``str(uuid.uuid5(uuid.UUID(bytes=namespace), name))``: RFC 4122's SHA-1 of the namespace's
    bytes and the UTF-8 name, truncated to 16 bytes with the version and variant bits set."""
    b = bytearray(sha1(namespace + name.encode("utf-8")).digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x50  # version 5
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122's variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
