"""The ClusterPolicy spec: NVIDIA gpu-operator's keys, parsed into a model or a list of problems.

Keys follow gpu-operator's ClusterPolicy (``driver.enabled``, ``devicePlugin.config.name``,
``mig.strategy``, ``daemonsets.tolerations``, ...) so the chapter's commands and existing
values files read the same. Unknown keys are problems, like known keys with bad values: a typo
such as ``driver: {enabld: true}`` would otherwise be dropped silently and the operand deployed
with the default. The reconciler reports problems as a status condition instead of acting.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gpuchain import __version__

GPUCHAIN_REPOSITORY = "ghcr.io/gpuchain"
GPUCHAIN_IMAGE = "gpuchain"

# Docker reference grammar (distribution/reference), enough to catch what users get wrong:
# upper case in the repository, spaces, a tag with illegal characters or over 128 chars.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = re.compile(rf"^{_NAME}(?::{_TAG})?(?:@{_DIGEST})?$")


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, extra="forbid")


class ImageSpec(_Model):
    """Where an operand's image comes from: ``{repository}/{image}:{version}`` (or ``@sha256:...``)."""

    enabled: bool = True
    repository: str = GPUCHAIN_REPOSITORY
    image: str = GPUCHAIN_IMAGE
    version: str = __version__
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    env: list[dict[str, str]] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)

    def image_ref(self) -> str:
        """The full image reference the container uses."""
        base = f"{self.repository.rstrip('/')}/{self.image}" if self.repository else self.image
        if self.version.startswith("sha256:"):
            return f"{base}@{self.version}"
        return f"{base}:{self.version}" if self.version else base


class DrainSpec(_Model):
    """How a node is drained before its driver restarts (gpu-operator's upgradePolicy.drain)."""

    enable: bool = False
    force: bool = False
    pod_selector: str = ""
    timeout_seconds: int = Field(300, ge=0)
    delete_empty_dir: bool = False


class PodDeletionSpec(_Model):
    """How GPU pods are evicted before a driver restart (upgradePolicy.podDeletion)."""

    force: bool = False
    timeout_seconds: int = Field(300, ge=0)
    delete_empty_dir: bool = False


class UpgradePolicy(_Model):
    """Node-by-node driver upgrades: how many at once and how many nodes may be unavailable."""

    auto_upgrade: bool = True
    max_parallel_upgrades: int = Field(1, ge=0)
    max_unavailable: int | str = "25%"
    pod_deletion: PodDeletionSpec = Field(default_factory=PodDeletionSpec)
    drain: DrainSpec = Field(default_factory=DrainSpec)


class DriverSpec(ImageSpec):
    """The NVIDIA driver container (NVIDIA's published image); disable it for pre-installed drivers."""

    repository: str = "nvcr.io/nvidia"
    image: str = "driver"
    version: str = "570.124.06"
    upgrade_policy: UpgradePolicy = Field(default_factory=UpgradePolicy)


class ToolkitSpec(ImageSpec):
    """The NVIDIA container toolkit (NVIDIA's published image)."""

    repository: str = "nvcr.io/nvidia/k8s"
    image: str = "container-toolkit"
    version: str = "v1.17.5-ubuntu20.04"


class ConfigRef(_Model):
    """A ConfigMap of named configs and the key nodes use unless their label picks another."""

    name: str = ""
    default: str = ""


class DevicePluginSpec(ImageSpec):
    """The gpuchain device plugin; ``config`` works as NVIDIA's (per-node label picks a key)."""

    config: ConfigRef = Field(default_factory=ConfigRef)


class MigConfigRef(ConfigRef):
    """The MIG manager's ConfigMap of mig-parted layouts and the default layout."""

    default: str = "all-disabled"


class MigManagerSpec(ImageSpec):
    """The gpuchain MIG manager; ``config.default`` is the layout nodes get without a label."""

    config: MigConfigRef = Field(default_factory=MigConfigRef)


class MigSpec(_Model):
    """How MIG devices are advertised: none, single or mixed (NVIDIA's strategies)."""

    strategy: Literal["none", "single", "mixed"] = "single"


class RollingUpdate(_Model):
    """DaemonSet rolling update budget."""

    max_unavailable: int | str = "1"


class DaemonsetsSpec(_Model):
    """Settings shared by every operand DaemonSet."""

    tolerations: list[dict[str, Any]] = Field(
        default_factory=lambda: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    )
    priority_class_name: str = "system-node-critical"
    update_strategy: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    rolling_update: RollingUpdate = Field(default_factory=RollingUpdate)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class OperatorSpec(_Model):
    """Cluster-wide operator settings."""

    default_runtime: Literal["containerd", "crio", "docker"] = "containerd"
    runtime_class: str = "nvidia"


class ClusterPolicySpec(_Model):
    """ClusterPolicy.spec (gpuchain.io/v1), NVIDIA-compatible keys."""

    operator: OperatorSpec = Field(default_factory=OperatorSpec)
    daemonsets: DaemonsetsSpec = Field(default_factory=DaemonsetsSpec)
    driver: DriverSpec = Field(default_factory=DriverSpec)
    toolkit: ToolkitSpec = Field(default_factory=ToolkitSpec)
    validator: ImageSpec = Field(default_factory=ImageSpec)
    device_plugin: DevicePluginSpec = Field(default_factory=DevicePluginSpec)
    dcgm_exporter: ImageSpec = Field(default_factory=ImageSpec)
    gfd: ImageSpec = Field(default_factory=ImageSpec)
    mig_manager: MigManagerSpec = Field(default_factory=MigManagerSpec)
    mig: MigSpec = Field(default_factory=MigSpec)


#: spec keys of the operands that carry an image, in roll-out order.
IMAGE_KEYS = ("driver", "toolkit", "validator", "devicePlugin", "dcgmExporter", "gfd", "migManager")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a ClusterPolicy: the dotted spec field and what to do about it."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"spec.{self.field}: {self.reason}"


def _percent_or_int(value: int | str, field: str) -> list[Problem]:
    if isinstance(value, int):
        return [] if value >= 0 else [Problem(field, "must be >= 0")]
    if re.fullmatch(r"\d+%?", value):
        return []
    return [Problem(field, f"{value!r} is not an integer or a percentage such as '25%'")]


def _unknown_key(loc: tuple[str | int, ...]) -> str:
    """Reason for an unknown key: the closest known key at that place, when there is one."""
    model: type[BaseModel] | None = ClusterPolicySpec
    for part in loc[:-1]:
        field = _field_by_key(model, str(part)) if model is not None else None
        annotation = field.annotation if field is not None else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if model is None:
        return "unknown key"
    known = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    return f"unknown key; did you mean {close[0]!r}?" if close else f"unknown key (known: {', '.join(known)})"


def _field_by_key(model: type[BaseModel], key: str) -> Any:
    return next((f for name, f in model.model_fields.items() if key in (f.alias, name)), None)


def _schema_problems(exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        reason = err["msg"]
        if err["type"] == "literal_error":
            reason = f"{err['input']!r} is not one of {err['ctx']['expected']}"
        elif err["type"] == "extra_forbidden":
            reason = _unknown_key(err["loc"])
        problems.append(Problem(field, reason))
    return problems


#: The keys of an operand block that make up its image reference.
_IMAGE_FIELDS = ("enabled", "repository", "image", "version")


def _image_problems(spec: dict[str, Any]) -> list[Problem]:
    """Image references that are not valid, checked per operand even when other keys are wrong."""
    problems = []
    for key in IMAGE_KEYS:
        block = spec.get(key, {})
        if not isinstance(block, dict):
            continue  # a schema problem already
        kind = ClusterPolicySpec.model_fields[to_snake(key)].annotation
        if not (isinstance(kind, type) and issubclass(kind, ImageSpec)):
            continue
        try:
            img = kind.model_validate({k: v for k, v in block.items() if k in _IMAGE_FIELDS})
        except ValidationError:
            continue  # a wrong type: reported by the schema
        if img.enabled and not IMAGE_REF.match(img.image_ref()):
            problems.append(
                Problem(
                    f"{key}.version" if img.version and not re.fullmatch(_TAG, img.version) else f"{key}.repository",
                    f"image reference {img.image_ref()!r} is not valid "
                    "(lower-case repository, tag of letters, digits, '.', '_' or '-')",
                )
            )
    return problems


def parse_policy(spec: dict[str, Any] | None) -> ClusterPolicySpec | list[Problem]:
    """Validate a ClusterPolicy spec; a model when usable, otherwise every problem found.

    Schema problems (unknown keys, wrong types) and image-reference problems are reported
    together, so one round of fixes is enough.
    """
    raw = spec or {}
    problems: list[Problem] = []
    policy: ClusterPolicySpec | None = None
    try:
        policy = ClusterPolicySpec.model_validate(raw)
    except ValidationError as exc:
        problems += _schema_problems(exc)
    problems += _image_problems(raw)
    if policy is None:
        return problems
    problems += _percent_or_int(policy.driver.upgrade_policy.max_unavailable, "driver.upgradePolicy.maxUnavailable")
    problems += _percent_or_int(
        policy.daemonsets.rolling_update.max_unavailable, "daemonsets.rollingUpdate.maxUnavailable"
    )
    if policy.mig_manager.enabled and not policy.mig_manager.config.default:
        problems.append(Problem("migManager.config.default", "name the layout nodes get without a label"))
    return problems or policy


def to_snake(key: str) -> str:
    """camelCase spec key -> model attribute name."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
