"""The one XID table: what an XID means, what it needs, and when it makes a device unhealthy.

The data lives in ``xids.yaml`` beside this module, with its sources: NVIDIA's XID catalog (each
XID's mnemonic, name and immediate-action bucket) and NVIDIA's device plugin (which XIDs it skips).
Two questions are answered from it, separately, because NVIDIA's two answers differ:

- allocation health (``HealthPolicy``): does this XID stop the device plugin and DRA driver from
  handing out the device? As NVIDIA's plugin: yes, except 13, 31, 43, 45, 68 and 109, changed by
  ``DP_DISABLE_HEALTHCHECKS`` / ``DP_ENABLE_HEALTHCHECKS`` with that plugin's meaning;
- repair (``Resolution``): what clears it, from NVIDIA's catalog: nothing, restarting the
  application, resetting the GPU or rebooting the node. XID 109 is skipped for allocation but its
  catalog resolution is a GPU reset; its row's threshold makes repeated 109s unhealthy, and then
  the reset happens.

A threshold (count within a window) escalates an XID that repeats on one device; the counting is
pure (``Threshold.remember``/``reached``) and ``HealthState`` keeps the times. Overrides come from
``gpu-health --xid-resolution`` (``parse_overrides``).
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuchain.gpu import shipped

ENV_DISABLE = "DP_DISABLE_HEALTHCHECKS"
ENV_ENABLE = "DP_ENABLE_HEALTHCHECKS"
BURST_SECONDS = 1.0
"""Occurrences of one XID on one device closer than this are one fault (see the data file)."""


class Resolution(enum.StrEnum):
    """What clears an error, least to most disruptive."""

    NONE = "none"
    RESTART_APP = "restart-app"
    RESET_GPU = "reset-gpu"
    REBOOT_NODE = "reboot-node"

    @property
    def severity(self) -> int:
        return _ORDER.index(self)

    @property
    def repairs(self) -> bool:
        """Whether the GPU itself needs work (a reset or a reboot), not just its workload."""
        return self in (Resolution.RESET_GPU, Resolution.REBOOT_NODE)

    @classmethod
    def parse(cls, text: str) -> Resolution:
        """``reset-gpu`` or the short forms ``reset`` / ``reboot`` / ``restart``; ValueError otherwise."""
        value = text.strip().lower()
        return cls(_SHORT.get(value, value))


_ORDER = (Resolution.NONE, Resolution.RESTART_APP, Resolution.RESET_GPU, Resolution.REBOOT_NODE)
_SHORT = {"reset": "reset-gpu", "reboot": "reboot-node", "restart": "restart-app"}


def worst(resolutions: Iterable[Resolution]) -> Resolution:
    """The most disruptive of ``resolutions`` (NONE for none)."""
    return max(resolutions, key=lambda r: r.severity, default=Resolution.NONE)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_window(text: str) -> float:
    """``600``, ``600s``, ``10m``, ``1h``, ``1d`` as seconds; ValueError naming the form."""
    match = _DURATION.match(str(text).strip().lower())
    seconds = float(match.group(1)) * _UNIT[match.group(2)] if match else 0.0
    if seconds <= 0:
        raise ValueError(f"window {text!r}: expected a positive duration such as 600s, 10m, 1h or 1d")
    return seconds


def format_window(seconds: float) -> str:
    """The shortest exact form of a window (``3600`` -> ``1h``)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Threshold:
    """``count`` occurrences on one device within ``window_s`` seconds escalate the XID to ``then``."""

    count: int
    window_s: float
    then: Resolution

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"threshold count {self.count}: must be at least 1")
        if self.window_s <= 0:
            raise ValueError(f"threshold window {self.window_s}: must be positive (seconds)")

    def remember(self, times: tuple[float, ...], now: float) -> tuple[float, ...]:
        """The occurrence times to keep after one at ``now``: those still inside the window, a burst
        (within ``BURST_SECONDS`` of the last kept one) counted once, at most ``count`` of them."""
        kept = tuple(t for t in times if t > now - self.window_s and t <= now)
        if not kept or now - kept[-1] >= BURST_SECONDS:
            kept = (*kept, now)
        return kept[-self.count :]

    def reached(self, times: tuple[float, ...], now: float) -> bool:
        """Whether the occurrences inside the window at ``now`` reach the count."""
        return sum(1 for t in times if now - self.window_s < t <= now) >= self.count

    def describe(self) -> str:
        return f"{self.count} within {format_window(self.window_s)}: {self.then.value}"


@dataclass(frozen=True, kw_only=True)
class XidInfo:
    """One row: NVIDIA's facts (mnemonic, name, bucket) and gpuchain's policy for the XID."""

    code: int
    meaning: str
    mnemonic: str = ""
    bucket: str = ""
    resolution: Resolution = Resolution.RESET_GPU
    unhealthy: bool = True
    """Whether one occurrence makes the device unhealthy by default (NVIDIA's plugin skips six)."""
    threshold: Threshold | None = None
    group: str = ""
    """The part of the GPU it names (``firmware``, ``memory``, ``nvlink``, ``bus``; "" for none in particular)."""

    @property
    def catalogued(self) -> bool:
        """Whether the row comes from NVIDIA's catalog (False: an XID gpuchain does not know)."""
        return bool(self.bucket)

    def needs(self, repeated: bool = False) -> Resolution:
        """What clears it: the escalation when it crossed its threshold, else its own resolution."""
        if repeated and self.threshold is not None:
            return worst((self.resolution, self.threshold.then))
        return self.resolution


@dataclass(frozen=True)
class XidOverride:
    """One XID's change from the config: its resolution, its threshold, or both."""

    resolution: Resolution | None = None
    threshold: Threshold | None = None


@dataclass(frozen=True)
class XidTable:
    """Every known XID by code, with the config's overrides applied."""

    rows: Mapping[int, XidInfo]

    def describe(self, code: int) -> XidInfo:
        """The row for ``code``; an XID not in the table needs a GPU reset (unknown is not safe)."""
        info = self.rows.get(code)
        if info is not None:
            return info
        return XidInfo(code=code, meaning=f"XID {code} (not in gpuchain's table; treated as a device error)")

    def needs(self, code: int, repeated: bool = False) -> Resolution:
        return self.describe(code).needs(repeated)

    def with_overrides(self, overrides: Mapping[int, XidOverride]) -> XidTable:
        """The table with each override's resolution and threshold in place of the row's."""
        rows = dict(self.rows)
        for code, change in overrides.items():
            row = self.describe(code)
            rows[code] = replace(
                row,
                resolution=change.resolution or row.resolution,
                threshold=change.threshold or row.threshold,
            )
        return XidTable(rows)

    def without_thresholds(self, codes: Iterable[int]) -> XidTable:
        """The table with no escalation for ``codes`` (XIDs a person asked to ignore stay ignored)."""
        drop = {c for c in codes if c in self.rows and self.rows[c].threshold is not None}
        if not drop:
            return self
        return XidTable({c: replace(r, threshold=None) if c in drop else r for c, r in self.rows.items()})


def _load() -> dict[str, Any]:
    data: dict[str, Any] = shipped.data("xids.yaml")
    return data


@functools.cache
def xid_table() -> XidTable:
    """The table as shipped (the data file, read once)."""
    data = _load()
    buckets = {str(b): Resolution(str(r)) for b, r in data["buckets"].items()}
    group_of = {int(c): str(g) for g, codes in (data.get("groups") or {}).items() for c in codes}
    rows: dict[int, XidInfo] = {}
    for code, row in data["xids"].items():
        limit = row.get("threshold")
        threshold = None
        if limit is not None:
            threshold = Threshold(int(limit["count"]), parse_window(limit["window"]), Resolution(limit["then"]))
        rows[int(code)] = XidInfo(
            code=int(code),
            meaning=str(row["name"]),
            mnemonic=str(row["mnemonic"]),
            bucket=str(row["bucket"]),
            resolution=buckets[str(row["bucket"])],
            unhealthy=bool(row.get("unhealthy", True)),
            threshold=threshold,
            group=group_of.get(int(code), ""),
        )
    return XidTable(rows)


def source() -> str:
    """Where the table's NVIDIA facts come from (the catalog page)."""
    return str(_load()["source"])


def describe(code: int) -> XidInfo:
    """The shipped row for ``code`` (an unknown XID gets a reset-the-GPU row)."""
    return xid_table().describe(code)


@functools.cache
def default_ignored() -> frozenset[int]:
    """XIDs one occurrence of which leaves the device healthy: NVIDIA's plugin's 13, 31, 43, 45, 68, 109."""
    return frozenset(c for c, r in xid_table().rows.items() if not r.unhealthy)


def still_serves(code: int) -> bool:
    """Whether the GPU still serves after one occurrence: an XID NVIDIA's plugin skips, or one NVIDIA's catalog clears
    by restarting the application or not at all (94, a contained ECC error: the driver contained it to the process
    it hit). A plugin's unhealthy mark on such an XID outlives its cause; restarting the plugin is the repair."""
    return code in default_ignored() or describe(code).resolution in (Resolution.NONE, Resolution.RESTART_APP)


@dataclass(frozen=True)
class Verdict:
    """What one XID occurrence does under a policy: whether it makes the device unhealthy, and
    whether that is because it crossed its threshold (then it needs the threshold's resolution)."""

    unhealthy: bool
    repeated: bool = False


@dataclass(frozen=True, kw_only=True)
class HealthPolicy:
    """Which health events make a device unhealthy.

    ``checks``: False turns all health checking off (nothing is ever marked unhealthy).
    ``xids``: False ignores every XID but still reacts to lost GPUs.
    ``ignored``: XIDs one occurrence of which does not mark a device unhealthy.
    ``table``: the XID table with the config's overrides (resolutions and thresholds).
    """

    checks: bool = True
    xids: bool = True
    ignored: frozenset[int] = field(default_factory=default_ignored)
    table: XidTable = field(default_factory=xid_table, compare=False)

    def marks_unhealthy(self, xid: int) -> bool:
        """Whether one occurrence of an XID makes the device unhealthy under this policy."""
        return self.checks and self.xids and xid not in self.ignored

    def threshold(self, xid: int) -> Threshold | None:
        """The XID's escalation, if it has one and XIDs are checked at all."""
        if not (self.checks and self.xids):
            return None
        return self.table.describe(xid).threshold

    def judge(self, xid: int, repeated: bool) -> Verdict:
        """One occurrence of ``xid``, given whether the device has now reached the XID's threshold
        (``Threshold.reached`` over the times ``HealthState`` keeps). Escalation to NONE escalates
        nothing, which is how an override switches a threshold off (``13=none@5/1h``)."""
        threshold = self.threshold(xid)
        if repeated and threshold is not None and threshold.then is not Resolution.NONE:
            return Verdict(True, True)
        return Verdict(self.marks_unhealthy(xid))

    def with_ignored(self, extra: Iterable[int] = (), enabled: Iterable[int] = ()) -> HealthPolicy:
        """Ignore ``extra`` XIDs too (thresholds included), and stop ignoring ``enabled`` ones (enabled wins)."""
        extra, enabled = frozenset(extra), frozenset(enabled)
        return replace(
            self, ignored=(self.ignored | extra) - enabled, table=self.table.without_thresholds(extra - enabled)
        )

    def with_overrides(self, overrides: Mapping[int, XidOverride]) -> HealthPolicy:
        """The policy with ``gpu-health --xid-resolution`` applied to its table."""
        return replace(self, table=self.table.with_overrides(overrides)) if overrides else self


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


OVERRIDE_FORM = "XID=<none|restart-app|reset|reboot>[@COUNT/WINDOW]"
_ITEM = re.compile(r"^(-?\d+)=([a-z-]+)(?:@(\d+)/([0-9.]+[smhd]?))?$")


def parse_overrides(text: str) -> dict[int, XidOverride]:
    """``109=none,92=reset,13=reset@5/1h`` as per-XID overrides; ValueError naming the item and the form.

    ``XID=RES`` sets what one occurrence needs; ``XID=RES@COUNT/WINDOW`` sets the threshold: that
    many occurrences on one device within the window make it unhealthy and need ``RES``. Both may
    be given for one XID (``13=none,13=reset@3/10m``).
    """
    out: dict[int, XidOverride] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        match = _ITEM.match(item.replace(" ", "").lower())
        try:
            if match is None:
                raise ValueError
            xid = int(match.group(1))
            res = Resolution.parse(match.group(2))
            threshold = None
            if match.group(3) is not None:
                threshold = Threshold(int(match.group(3)), parse_window(match.group(4)), res)
        except ValueError:
            raise ValueError(f"{item!r}: expected {OVERRIDE_FORM}, e.g. 109=none or 13=reset@5/1h") from None
        if xid <= 0:
            raise ValueError(f"{item!r}: XIDs are positive numbers")
        before = out.get(xid, XidOverride())
        out[xid] = replace(before, threshold=threshold) if threshold else replace(before, resolution=res)
    return out
