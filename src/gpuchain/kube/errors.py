"""Typed Kubernetes API errors, the same from every adapter, so callers never parse HTTP codes."""

from __future__ import annotations

import re
from typing import Any


class KubeError(Exception):
    """Base of every error the kube layer raises; ``code`` is the HTTP status it stands for."""

    code: int = 500


class UnknownKindError(KubeError, LookupError):
    """An object's apiVersion/kind is not registered (a typo, or a CRD never registered)."""

    code = 404


class NotFoundError(KubeError, LookupError):
    """The object (or its namespace/kind) does not exist."""

    code = 404


class AlreadyExistsError(KubeError):
    """create() of a name that is taken."""

    code = 409


class ConflictError(KubeError):
    """A write raced another one (resourceVersion precondition failed); re-read and retry."""

    code = 409


class BadRequestError(KubeError, ValueError):
    """The API server refused the request itself (HTTP 400), e.g. a log read naming a container the
    pod does not have, or ``previous`` logs of a container that never restarted."""

    code = 400


class ForbiddenError(KubeError):
    """The API server refused the caller (HTTP 403): RBAC does not grant the verb, or an admission
    policy denied the write with ``reason: Forbidden`` (the chart's node-write policy does). Retrying
    the same request as the same identity gets the same answer."""

    code = 403


class InvalidError(KubeError, ValueError):
    """The API server rejected the object as malformed (HTTP 422)."""

    code = 422


class GoneError(KubeError):
    """A watch asked for a resourceVersion older than the server keeps; list again and re-watch."""

    code = 410


class TooManyRequestsError(KubeError):
    """HTTP 429 that is not a disruption budget: the API server is throttling; retry later."""

    code = 429


class EvictionBlockedError(KubeError):
    """The Eviction API refused (HTTP 429) because a PodDisruptionBudget allows no disruption.

    ``pdb`` names the budget so a caller (remediation, driver upgrade) can say which one blocks it.
    """

    code = 429

    def __init__(self, namespace: str, *, pod: str, pdb: str, message: str = "") -> None:
        self.namespace = namespace
        self.pod = pod
        self.pdb = pdb
        detail = f": {message}" if message else ""
        super().__init__(f"eviction of pod {namespace}/{pod} blocked by PodDisruptionBudget {namespace}/{pdb}{detail}")


class UnreachableError(KubeError):
    """The API server did not answer as a Kubernetes API server: connection refused, name not
    resolved, TLS failure, timeout, or a reply that is not the API's JSON (a proxy's HTML page).

    Its message is one line saying what was tried and what to check, so a command can print it as is.
    """

    code = 503


def error_for_status(code: int, status: dict[str, Any], *, creating: bool = False, what: str = "") -> KubeError:
    """The typed error of an API server's answer with HTTP status ``code`` and its Status object
    ``status`` ({} where the body was none): the Status's own code wins, 409 on create is
    AlreadyExists. ``what`` names the request for a message the server did not give."""
    code = int(status.get("code") or code)
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or f"HTTP {code} from {what or 'the API server'}")
    if code == 400:
        return BadRequestError(message)
    if code == 403:
        return ForbiddenError(message)
    if code == 404:
        return NotFoundError(message)
    if code == 409:
        return AlreadyExistsError(message) if reason == "AlreadyExists" or creating else ConflictError(message)
    if code == 410:
        return GoneError(message)
    if code == 422:
        return InvalidError(message)
    err = KubeError(message)
    err.code = code
    return err


_PDB_NAME = re.compile(r"[Tt]he disruption budget (\S+)")


def eviction_error(status: dict[str, Any], *, name: str, namespace: str) -> KubeError:
    """The typed error of an eviction the API server answered 429 with ``status``: a disruption
    budget's refusal (EvictionBlockedError naming the budget) or throttling (TooManyRequestsError).

    The API server names the budget in a cause with reason DisruptionBudget ("The disruption
    budget X needs N healthy pods..."); a rate-limited request carries no such cause."""
    message = str(status.get("message") or "too many requests")
    causes = (status.get("details") or {}).get("causes") or []
    budget = [c for c in causes if c.get("reason") == "DisruptionBudget"]
    for text in [*(str(c.get("message", "")) for c in causes), message]:
        m = _PDB_NAME.search(text)
        if m:
            return EvictionBlockedError(namespace, pod=name, pdb=m.group(1), message=message)
    if budget:
        return EvictionBlockedError(namespace, pod=name, pdb="(unnamed)", message=message)
    return TooManyRequestsError(f"eviction of pod {namespace}/{name}: API server throttling")
