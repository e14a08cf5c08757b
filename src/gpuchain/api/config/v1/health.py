"""``health``: gpuchain's one section NVIDIA's file lacks, because NVIDIA's plugin never recovers devices."""

from __future__ import annotations

from collections.abc import Mapping

from gpuchain.api.config.v1.section import Section
from gpuchain.common.schema import define, spec
from gpuchain.gpu.health import DEFAULT_QUIET_SECONDS
from gpuchain.gpu.xid import HealthPolicy, policy_from_env


@define
class Health(Section):
    """gpuchain extension: the XID policy and when a recovered GPU's devices become healthy again."""

    disabled: bool = False
    ignored_xids: tuple[int, ...] = spec(default=(), key="ignoredXids")
    enabled_xids: tuple[int, ...] = spec(default=(), key="enabledXids")
    recovery_quiet_seconds: float = spec(default=DEFAULT_QUIET_SECONDS, ge=0, key="recoveryQuietSeconds")

    def policy(self, env: Mapping[str, str] | None = None) -> HealthPolicy:
        """The XID policy: defaults, then this section, then DP_*_HEALTHCHECKS from ``env``."""
        base = HealthPolicy(checks=not self.disabled).with_ignored(self.ignored_xids, self.enabled_xids)
        return policy_from_env(env or {}, base)
