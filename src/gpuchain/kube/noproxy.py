"""Whether ``NO_PROXY`` sends a request to a URL past the proxy, read as kubectl reads it.

Why: `LeanCluster` speaks to the API server directly and hands over to `LiveCluster` when a proxy
is set; a node whose API server is excluded from the proxy (the usual ``NO_PROXY=10.0.0.0/8,
.svc,.cluster.local``) would pay lightkube's 11 MiB for a proxy it never uses. kubectl (Go's
net/http, golang.org/x/net/http/httpproxy) reads the list so: comma-separated entries, trimmed
and lower-cased; ``*`` matches every host; an IP address or a CIDR block matches an IP host; a
name matches that host and its subdomains (``example.com``), or its subdomains alone with a leading
dot (``.example.com``, ``*.example.com``); an entry with ``:port`` matches that port alone, the
scheme's default port counting. ``localhost`` and loopback addresses are never proxied.
stdlib's ``urllib.request.proxy_bypass_environment`` knows no CIDR blocks, and importing it adds
0.9 MiB resident to a node agent; ``ipaddress``, which ``urllib.parse`` already loads, adds nothing.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_PORTS = {"http": "80", "https": "443"}


def no_proxy_setting() -> str:
    """``NO_PROXY``, else ``no_proxy`` (the first one set and not empty, as Go reads them)."""
    return os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""


def bypasses(url: str, no_proxy: str) -> bool:
    """True when a request to ``url`` goes direct under the ``no_proxy`` list."""
    split = urlsplit(url)
    host = (split.hostname or "").lower()  # without an IPv6 address's brackets
    port = str(split.port or DEFAULT_PORTS.get(split.scheme, ""))
    ip = _address(host)
    if host == "localhost" or (ip is not None and ip.is_loopback):
        return True
    return any(_matches(entry, host, port, ip) for entry in _entries(no_proxy))


def _entries(no_proxy: str) -> list[str]:
    return [e for e in (part.strip().lower() for part in no_proxy.split(",")) if e]


def _matches(entry: str, host: str, port: str, ip: Address | None) -> bool:
    if entry == "*":
        return True
    if "/" in entry:
        network = _network(entry)
        return network is not None and ip is not None and ip in network
    name, entry_port = _split_port(entry)
    if not name:
        return False
    if entry_port is not None and entry_port != port:
        return False
    address = _address(name)
    if address is not None:
        return address == ip
    suffix = name[1:] if name.startswith("*.") else name
    if not suffix.startswith("."):
        return host == suffix or host.endswith("." + suffix)
    return host.endswith(suffix)


def _split_port(entry: str) -> tuple[str, str | None]:
    """``host:port`` or ``[v6]:port`` into its parts; an entry without a port (a bare IPv6 address too) whole."""
    if entry.startswith("["):
        head, _, rest = entry[1:].partition("]")
        return head, rest[1:] if rest.startswith(":") else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, port
    return entry, None


def _address(text: str) -> Address | None:
    """``text`` as an IP address; None for a name."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _network(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return None
