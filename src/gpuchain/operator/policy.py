"""The ClusterPolicy spec: NVIDIA gpu-operator's keys, parsed into a model or a list of problems.

The model, with NVIDIA's spelling and defaults, is `spec.ClusterPolicySpec`, so a policy written
for NVIDIA's operator reads the same; `compat` decides what each key does in gpuchain. Unknown keys are
problems, like known keys with bad values: a typo such as ``driver: {enabld: true}`` would
otherwise be dropped silently and the operand deployed with the default. The reconciler reports
problems as a status condition instead of acting.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpuchain.common.quantity import parse_quantity
from gpuchain.operator.compat import nvidia_image_problems, refusals
from gpuchain.operator.manifests import label_key_problem, label_value_problem, name_problem
from gpuchain.operator.spec import IMAGE_KEYS, RESERVED_LABELS, ClusterPolicySpec, EnvVar, ImageSpec, Problem, to_snake

#: The model's names the parser's callers take from here: its result types and the operands' parts.
__all__ = ["ClusterPolicySpec", "EnvVar", "ImageSpec", "Problem"]

# Docker reference grammar (distribution/reference), enough to catch what users get wrong:
# upper case in the repository, spaces, a tag with illegal characters or over 128 chars.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF = re.compile(rf"^{_NAME}(?::{_TAG})?(?:@{_DIGEST})?$")


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
        reason = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "literal_error":
            reason = f"{err['input']!r} is not one of {err['ctx']['expected']}"
        elif err["type"] == "extra_forbidden":
            reason = _unknown_key(err["loc"])
        problems.append(Problem(field, reason))
    return problems


#: The keys of an operand block that make up its image reference.
#: The sections served as roles of the one node agent DaemonSet under ``nodeAgent.enabled``.
AGENT_KEYS = ("validator", "devicePlugin", "dcgmExporter", "gfd", "migManager")


def _node_agent_problems(policy: ClusterPolicySpec) -> list[Problem]:
    """The node agent is one container: the sections it serves must name one image and pull
    policy, and resource quantities it can add up (`desired.agent_resources`)."""
    if not policy.node_agent.enabled:
        return []
    seen: dict[tuple[str, str], str] = {}
    problems = []
    for key in AGENT_KEYS:
        block: ImageSpec = getattr(policy, to_snake(key))
        if not block.enabled:
            continue
        seen.setdefault((block.image_ref(), block.image_pull_policy), key)
        if block.resources is not None:
            for kind, quantities in (("limits", block.resources.limits), ("requests", block.resources.requests)):
                for resource, quantity in quantities.items():
                    try:
                        parse_quantity(quantity)
                    except ValueError as exc:
                        problems.append(Problem(f"{key}.resources.{kind}.{resource}", str(exc)))
    if len(seen) < 2:
        return problems
    named = "; ".join(f"{key}: {ref} ({pull})" for (ref, pull), key in seen.items())
    return [
        *problems,
        Problem(
            "nodeAgent.enabled",
            f"the node agent runs its roles in one container, but they name different images ({named}): "
            "give them one repository, image, version and imagePullPolicy, or set nodeAgent.enabled=false "
            "for one DaemonSet per operand",
        ),
    ]


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


def drop_nulls(value: Any) -> Any:
    """``value`` without null map entries: a null key means "not set", as for NVIDIA's operator.

    Go decodes ``plugin:`` (null) to an absent pointer and the API server prunes nulls from custom
    resources, so NVIDIA's sample (``validator.plugin:``) means the same as leaving the key out.
    """
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def _name_problems(policy: ClusterPolicySpec) -> list[Problem]:
    """Fields that become Kubernetes names, label keys or values, checked where the user wrote them."""
    out: list[Problem] = []
    names = {
        "operator.runtimeClass": policy.operator.runtime_class,
        "daemonsets.priorityClassName": policy.daemonsets.priority_class_name,
        "devicePlugin.config.name": policy.device_plugin.config.name,
        "migManager.config.name": policy.mig_manager.config.name,
        "dcgmExporter.config.name": policy.dcgm_exporter.config.name,
    }
    for key in IMAGE_KEYS:
        block = getattr(policy, to_snake(key))
        names.update({f"{key}.imagePullSecrets.{i}": s for i, s in enumerate(block.image_pull_secrets)})
    for field, value in names.items():
        if value and (why := name_problem(value)):
            out.append(Problem(field, why))
    maps = {
        "daemonsets.labels": (policy.daemonsets.labels, True),
        "daemonsets.annotations": (policy.daemonsets.annotations, False),
        "dcgmExporter.annotations": (policy.dcgm_exporter.annotations, False),
    }
    for field, (items, is_label) in maps.items():
        for k, v in items.items():
            why = label_key_problem(k) or (label_value_problem(v) if is_label else None)
            if why:
                out.append(Problem(field, why))
    out += [
        Problem("daemonsets.labels", f"key {k!r} is gpuchain's own (it finds its pods by it): remove it")
        for k in policy.daemonsets.labels
        if k in RESERVED_LABELS
    ]
    return out


def schema_problems(spec: dict[str, Any]) -> list[Problem]:
    """Unknown keys and wrong types only: what NVIDIA's own CRD schema would refuse as well."""
    try:
        ClusterPolicySpec.model_validate(drop_nulls(spec))
    except ValidationError as exc:
        return _schema_problems(exc)
    return []


def parse_policy(spec: dict[str, Any] | None) -> ClusterPolicySpec | list[Problem]:
    """Validate a ClusterPolicy spec; a model when usable, otherwise every problem found.

    Schema problems (unknown keys, wrong types), image references, names and features gpuchain
    does not have (`compat.FEATURES`) are reported together, so one round of fixes is enough.
    """
    raw = drop_nulls(spec or {})
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
    problems += _name_problems(policy) + refusals(policy) + nvidia_image_problems(policy)
    if not problems:  # images of different operands disagree only once each is a usable image
        problems += _node_agent_problems(policy)
    return problems or policy


def located(problems: list[Problem]) -> ValidationError:
    """The problems as one pydantic error with each problem's place in the document.

    Raised from a document model's validator, it reaches the common YAML reader, which turns
    the first into ``file:line: spec.field: reason`` with a count of the others.
    """
    return ValidationError.from_exception_data(
        "ClusterPolicy",
        [
            {
                "type": PydanticCustomError("clusterpolicy", "{reason}", {"reason": p.reason}),
                "loc": p.loc(),
                "input": p.value or {},
            }
            for p in problems
        ],
    )


#: What a file of another kind is, and what to do with it, for a command that wanted a ClusterPolicy.
_OTHER_KINDS = {
    "NVIDIADriver": (
        "this file is NVIDIA's NVIDIADriver, not a ClusterPolicy; gpuchain does not implement NVIDIADriver: "
        "put its repository, image and version under driver in the ClusterPolicy "
        "(`gpuchain operator import --from-cluster` reports each NVIDIADriver it finds)"
    ),
    "ClusterServiceVersion": (
        "this file is an OLM ClusterServiceVersion, not a ClusterPolicy; NVIDIA's ClusterPolicy is in its "
        "alm-examples annotation: save that object as YAML and run `gpuchain operator import -f FILE`"
    ),
    "ConfigMap": (
        "this file is a ConfigMap, not a ClusterPolicy; pass the ClusterPolicy "
        "(`kubectl get clusterpolicies.nvidia.com -o yaml` for NVIDIA's)"
    ),
}


def _cluster_policy_kind(kind: Any) -> Any:
    """A ClusterPolicy file's ``kind``: anything else is named with what to do instead."""
    if kind == "ClusterPolicy":
        return kind
    raise ValueError(_OTHER_KINDS.get(str(kind), f"expected ClusterPolicy (got {kind!r})"))


class PolicyDocument(BaseModel):
    """A ClusterPolicy manifest as read from a file: gpuchain's (gpuchain.io/v1) or NVIDIA's (nvidia.com/v1).

    Validating it validates the spec as the operator would, so a bad policy is named by file,
    line and field.
    """

    # kind first: a file of another kind is named as such, not as a wrong apiVersion.
    kind: str = "ClusterPolicy"
    apiVersion: str = "gpuchain.io/v1"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any] | None = None
    _parsed: ClusterPolicySpec | None = PrivateAttr(None)

    _kind = field_validator("kind", mode="before")(_cluster_policy_kind)

    @field_validator("apiVersion")
    @classmethod
    def _api_version(cls, value: str, info: ValidationInfo) -> str:
        if "kind" in info.data and value not in ("gpuchain.io/v1", "nvidia.com/v1"):
            raise ValueError(f"expected gpuchain.io/v1 or NVIDIA's nvidia.com/v1 (got {value!r})")
        return value

    @model_validator(mode="after")
    def _valid_spec(self) -> PolicyDocument:
        parsed = parse_policy(self.spec)
        if isinstance(parsed, list):
            raise located(parsed)
        self._parsed = parsed
        return self

    @property
    def name(self) -> str:
        """metadata.name, ``cluster-policy`` when absent."""
        return str(self.metadata.get("name") or "cluster-policy")

    def policy(self) -> ClusterPolicySpec:
        """The parsed spec (valid: the document would not exist otherwise)."""
        assert self._parsed is not None
        return self._parsed


class NvidiaPolicyDocument(BaseModel):
    """NVIDIA's ClusterPolicy (nvidia.com/v1) as read for `operator import`: only its schema is checked.

    Features gpuchain refuses and NVIDIA's images are what the import converts, so they are not
    problems here; an unknown key or a wrong type is (NVIDIA's own CRD would refuse it too).
    """

    kind: str = "ClusterPolicy"
    apiVersion: str = "nvidia.com/v1"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: dict[str, Any] | None = None

    _kind = field_validator("kind", mode="before")(_cluster_policy_kind)

    @field_validator("apiVersion")
    @classmethod
    def _api_version(cls, value: str, info: ValidationInfo) -> str:
        if "kind" not in info.data or value == "nvidia.com/v1":
            return value
        if value == "gpuchain.io/v1":
            raise ValueError(
                "this is gpuchain's ClusterPolicy already: nothing to import "
                "(check it with `gpuchain operator render -f FILE`)"
            )
        raise ValueError(f"expected NVIDIA's nvidia.com/v1 (got {value!r})")

    @model_validator(mode="after")
    def _valid_schema(self) -> NvidiaPolicyDocument:
        problems = schema_problems(self.spec or {})
        if problems:
            raise located(problems)
        return self
