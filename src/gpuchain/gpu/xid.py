"""What an XID means and what to do about it: the one table the device plugin and remediation share.

An XID is the driver's error report for a GPU. Some are the application's fault (a bad memory
access, a hung kernel): the GPU is fine and restarting the workload is enough, so the device
plugin ignores them by default, as NVIDIA's plugin does (13, 31, 43, 45, 68, 109). The rest mean
the device itself needs a reset, or the whole node a reboot; those mark devices unhealthy.

``HealthPolicy`` is the decision "does this XID make a device unhealthy", built from defaults,
the config file and the ``DP_DISABLE_HEALTHCHECKS`` / ``DP_ENABLE_HEALTHCHECKS`` variables with
the same meaning as in NVIDIA's plugin.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

ENV_DISABLE = "DP_DISABLE_HEALTHCHECKS"
ENV_ENABLE = "DP_ENABLE_HEALTHCHECKS"


class XidKind(enum.StrEnum):
    """Whose fault: the application's (GPU still good) or the device's."""

    APPLICATION = "application"
    FATAL = "fatal"


class XidAction(enum.StrEnum):
    """The least disruptive action that clears the error."""

    RESTART_APP = "restart-app"
    RESET_GPU = "reset-gpu"
    REBOOT_NODE = "reboot-node"


@dataclass(frozen=True)
class XidInfo:
    """One row of the table."""

    code: int
    meaning: str
    kind: XidKind
    action: XidAction

    @property
    def fatal(self) -> bool:
        return self.kind is XidKind.FATAL


def _row(code: int, meaning: str, kind: XidKind, action: XidAction) -> tuple[int, XidInfo]:
    return code, XidInfo(code, meaning, kind, action)


_A, _F = XidKind.APPLICATION, XidKind.FATAL
_APP, _RESET, _REBOOT = XidAction.RESTART_APP, XidAction.RESET_GPU, XidAction.REBOOT_NODE

XID_TABLE: Mapping[int, XidInfo] = dict(
    [
        _row(13, "Graphics engine exception (illegal instruction or address in a kernel)", _A, _APP),
        _row(31, "GPU memory page fault (the application accessed an invalid address)", _A, _APP),
        _row(32, "Invalid or corrupted push buffer stream", _F, _RESET),
        _row(38, "Driver firmware error", _F, _RESET),
        _row(43, "GPU stopped processing (the application's channel was reset)", _A, _APP),
        _row(45, "Preemptive cleanup after an earlier error (the application was stopped)", _A, _APP),
        _row(48, "Double-bit ECC error (uncorrectable memory error)", _F, _RESET),
        _row(61, "Internal micro-controller breakpoint or warning", _F, _RESET),
        _row(62, "Internal micro-controller halt", _F, _RESET),
        _row(63, "ECC page retirement or row remapping recorded", _F, _RESET),
        _row(64, "ECC page retirement or row remapping failed", _F, _RESET),
        _row(68, "Video processor (NVDEC) exception", _A, _APP),
        _row(69, "Graphics engine class error", _F, _RESET),
        _row(74, "NVLink error", _F, _RESET),
        _row(79, "GPU has fallen off the bus", _F, _REBOOT),
        _row(92, "High single-bit ECC error rate", _F, _RESET),
        _row(94, "Contained ECC error (only the affected application is hit)", _F, _APP),
        _row(95, "Uncontained ECC error", _F, _RESET),
        _row(109, "Context switch timeout (an application did not yield)", _A, _APP),
        _row(119, "GSP RPC timeout (GPU System Processor stopped answering)", _F, _RESET),
        _row(120, "GSP error", _F, _RESET),
        _row(140, "Unrecovered ECC error", _F, _RESET),
    ]
)
"""Known XIDs. An XID missing here is treated as fatal (reset the GPU): unknown errors are not safe."""

DEFAULT_IGNORED: frozenset[int] = frozenset(c for c, info in XID_TABLE.items() if info.kind is XidKind.APPLICATION)
"""Application errors ignored by default, the same set as NVIDIA's plugin: 13, 31, 43, 45, 68, 109."""


def describe(code: int) -> XidInfo:
    """The table row for ``code``; an unknown XID gets a fatal, reset-the-GPU row."""
    info = XID_TABLE.get(code)
    if info is not None:
        return info
    return XidInfo(code, f"XID {code} (not in gpuchain's table; treated as a device error)", _F, _RESET)


@dataclass(frozen=True)
class HealthPolicy:
    """Which health events make a device unhealthy.

    ``checks``: False turns all health checking off (nothing is ever marked unhealthy).
    ``xids``: False ignores every XID but still reacts to lost GPUs.
    ``ignored``: XIDs that never mark a device unhealthy.
    """

    checks: bool = True
    xids: bool = True
    ignored: frozenset[int] = DEFAULT_IGNORED

    def marks_unhealthy(self, xid: int) -> bool:
        """Whether an XID makes the device unhealthy under this policy."""
        return self.checks and self.xids and xid not in self.ignored

    def with_ignored(self, extra: Iterable[int] = (), enabled: Iterable[int] = ()) -> HealthPolicy:
        """Ignore ``extra`` XIDs too, and stop ignoring ``enabled`` ones (enabled wins)."""
        return replace(self, ignored=(self.ignored | frozenset(extra)) - frozenset(enabled))


def policy_from_env(env: Mapping[str, str], base: HealthPolicy | None = None) -> HealthPolicy:
    """Apply NVIDIA's environment variables on top of ``base`` (defaults, or the config file's policy).

    ``DP_DISABLE_HEALTHCHECKS``: ``all`` turns checks off; ``xids`` ignores every XID; a comma list
    of XIDs adds them to the ignored set. ``DP_ENABLE_HEALTHCHECKS``: ``all`` stops ignoring any XID
    (even the default application errors); a comma list stops ignoring those. Raises ValueError
    naming the variable and the bad item.
    """
    policy = base or HealthPolicy()
    disable = [p.strip().lower() for p in env.get(ENV_DISABLE, "").split(",") if p.strip()]
    enable = [p.strip().lower() for p in env.get(ENV_ENABLE, "").split(",") if p.strip()]
    if "all" in disable:
        return replace(policy, checks=False)
    if "xids" in disable:
        policy = replace(policy, xids=False)
    extra = _codes(ENV_DISABLE, [p for p in disable if p != "xids"])
    if "all" in enable:
        return replace(policy, ignored=frozenset())
    return policy.with_ignored(extra, _codes(ENV_ENABLE, enable))


def _codes(var: str, items: list[str]) -> list[int]:
    codes = []
    for item in items:
        try:
            code = int(item)
        except ValueError:
            raise ValueError(f"{var}: {item!r} is not an XID number, 'all' or 'xids'") from None
        if code <= 0:
            raise ValueError(f"{var}: XID {code} is out of range (XIDs are positive)")
        codes.append(code)
    return codes
