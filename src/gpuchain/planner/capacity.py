"""Whole GPU, MIG or time-slicing: how many copies of one model a GPU serves, and how safely.

The three ways to share a GPU trade density against isolation:

- whole GPU: one instance, nothing shared, most memory idle for a small model;
- MIG: the card is cut into hardware slices; memory and compute are fenced, so an instance that
  outgrows its slice fails alone. Counts and memory come from the MIG catalog and every layout is
  checked with `place_layout`, the way the hardware decides;
- time-slicing: N replicas of the whole GPU take turns; nothing is fenced, so one tenant that
  grows past its share exhausts the pool for all, and the QPS is nominal because compute is
  time-shared.

Everything here is a pure function of the request: the CLI parses, calls `plan` and renders.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from gpuchain.gpu import catalog
from gpuchain.gpu.catalog import GpuModel, MigProfile
from gpuchain.gpu.errors import InvalidConfigError
from gpuchain.planner.errors import PlanInputError
from gpuchain.planner.units import format_mib

DEFAULT_REPLICAS = 10
"""Time-slicing replicas when none are asked for: a common starting point (an A100 shared ten ways)."""


class Sharing(enum.StrEnum):
    WHOLE = "whole-gpu"
    MIG = "mig"
    TIME_SLICING = "time-slicing"


class Isolation(enum.StrEnum):
    """What stops one tenant from hurting another."""

    EXCLUSIVE = "exclusive"
    HARDWARE = "hardware"
    NONE = "none"


ISOLATION_WORDS = {
    Isolation.EXCLUSIVE: "exclusive GPU",
    Isolation.HARDWARE: "hardware isolation",
    Isolation.NONE: "no isolation",
}


class IsolationNeed(enum.StrEnum):
    """hard: tenants must not affect each other (external, multi-tenant); soft: they may (internal batch)."""

    HARD = "hard"
    SOFT = "soft"


@dataclass(frozen=True)
class Workload:
    """One inference model: the GPU memory one instance needs and the QPS one instance serves."""

    model_memory_mib: float
    qps_per_instance: float


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """What to plan for: the card, the workload, the isolation it needs and the fleet size."""

    gpu: GpuModel
    workload: Workload
    isolation: IsolationNeed = IsolationNeed.HARD
    gpus: int = 1
    replicas: int = DEFAULT_REPLICAS
    min_headroom_mib: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Option:
    """One way to run the workload on the card, with its density, headroom, isolation and risk.

    ``risk`` is a few words for a table column, ``risk_detail`` the sentence behind them; both
    are empty when the option does not fit. ``memory_per_instance_mib`` is what each instance
    may use: the whole card, the MIG slice, or for time-slicing the fair share of the pool (not
    enforced). ``headroom_mib`` is that minus the model; negative when the option does not fit.
    ``why_not`` is empty exactly when ``fits``.
    """

    sharing: Sharing
    label: str
    profile: str | None
    resource: str
    fits: bool
    instances_per_gpu: int
    memory_per_instance_mib: float
    headroom_mib: float
    memory_utilisation: float
    qps_per_gpu: float
    qps_nominal: bool
    total_instances: int
    total_qps: float
    isolation: Isolation
    risk: str
    risk_detail: str
    why_not: str = ""


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    """The chosen option, why it wins, and how to set it up in the cluster."""

    label: str
    sharing: Sharing
    profile: str | None
    reason: str
    setup: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Every option for one card and workload, and the recommendation (None when nothing qualifies)."""

    gpu: str
    gpu_memory_mib: int
    model_memory_mib: float
    qps_per_instance: float
    isolation_need: IsolationNeed
    gpus: int
    replicas: int
    options: tuple[Option, ...]
    recommendation: Recommendation | None
    summary: str
    notes: tuple[str, ...] = field(default=())

    @property
    def fitting(self) -> tuple[Option, ...]:
        return tuple(o for o in self.options if o.fits)


def resolve_gpu(name: str) -> GpuModel:
    """The catalogued card for a friendly name (``a100-40gb``, ``H100_80GB``, ``l4``) or its NVML name."""
    by_nvml = catalog.model_for_name(name.strip())
    if by_nvml is not None:
        return by_nvml
    key = name.strip().replace("_", "-").replace(" ", "-").lower()
    matches = [m for k, m in catalog.MODELS.items() if k.lower() == key]
    if not matches and key:
        matches = [m for k, m in catalog.MODELS.items() if k.lower().startswith(key)]
    if len(matches) == 1:
        return matches[0]
    candidates = matches or list(catalog.MODELS.values())
    known = ", ".join(m.key.lower() for m in candidates)
    what = "ambiguous" if len(matches) > 1 else "unknown"
    raise PlanInputError(f"--gpu: {what} GPU {name!r}; use one of {known}")


def plan(req: PlanRequest) -> Plan:
    """All options for ``req``, the recommendation and a one-line summary.

    Raises PlanInputError for inputs no plan can use (non-positive memory, QPS, GPUs, replicas < 2).
    A model too large for the card is not an error: the plan says so and suggests larger cards.
    """
    _check(req)
    gpu, work = req.gpu, req.workload
    whole = _whole(req)
    options: list[Option] = [whole]
    options.extend(_mig(req, p) for p in gpu.mig_profiles)
    options.append(_time_slicing(req))
    notes: list[str] = []
    if not gpu.mig_capable:
        notes.append(f"{gpu.key} does not support MIG: only whole GPU and time-slicing apply.")
    rec = _recommend(req, options)
    return Plan(
        gpu=gpu.key,
        gpu_memory_mib=gpu.memory_mib,
        model_memory_mib=work.model_memory_mib,
        qps_per_instance=work.qps_per_instance,
        isolation_need=req.isolation,
        gpus=req.gpus,
        replicas=req.replicas,
        options=tuple(options),
        recommendation=rec,
        summary=_summary(req, options, rec),
        notes=tuple(notes),
    )


def _check(req: PlanRequest) -> None:
    if not math.isfinite(req.workload.model_memory_mib) or req.workload.model_memory_mib <= 0:
        raise PlanInputError("--model-memory: must be a finite size larger than zero, e.g. 3GiB")
    if not math.isfinite(req.workload.qps_per_instance) or req.workload.qps_per_instance <= 0:
        raise PlanInputError("--qps-per-instance: must be a finite number larger than zero, e.g. 60")
    if req.gpus < 1:
        raise PlanInputError(f"--gpus: must be at least 1, got {req.gpus}")
    if req.replicas < 2:
        raise PlanInputError(f"--replicas: time-slicing needs at least 2 (1 is the whole GPU), got {req.replicas}")
    if req.replicas > req.gpu.memory_mib:
        # every replica's share of memory would round to nothing (and the arithmetic divide by it)
        raise PlanInputError(
            f"--replicas: at most {int(req.gpu.memory_mib)} on {req.gpu.name} (one MiB of its memory each), "
            f"got {req.replicas}"
        )
    if not math.isfinite(req.min_headroom_mib) or req.min_headroom_mib < 0:
        raise PlanInputError("--min-headroom: must be zero or more, e.g. 1GiB")


def _option(
    req: PlanRequest,
    *,
    sharing: Sharing,
    label: str,
    profile: str | None,
    resource: str,
    instances: int,
    memory_per_instance: float,
    isolation: Isolation,
    risk: tuple[str, str],
    why_not: str,
) -> Option:
    fits = not why_not
    n = instances if fits else 0
    model = req.workload.model_memory_mib
    qps = n * req.workload.qps_per_instance
    return Option(
        sharing=sharing,
        label=label,
        profile=profile,
        resource=resource,
        fits=fits,
        instances_per_gpu=n,
        memory_per_instance_mib=memory_per_instance,
        headroom_mib=memory_per_instance - model,
        memory_utilisation=model / memory_per_instance,
        qps_per_gpu=qps,
        qps_nominal=sharing is Sharing.TIME_SLICING,
        total_instances=n * req.gpus,
        total_qps=qps * req.gpus,
        isolation=isolation,
        risk=risk[0] if fits else "",
        risk_detail=risk[1] if fits else "",
        why_not=why_not,
    )


def _whole(req: PlanRequest) -> Option:
    gpu, model = req.gpu, req.workload.model_memory_mib
    idle = gpu.memory_mib - model
    why_not = ""
    if model > gpu.memory_mib:
        why_not = f"the {format_mib(model)} model is larger than the {format_mib(gpu.memory_mib)} GPU"
    idle_share = idle / gpu.memory_mib
    risk = (
        f"{idle_share:.1%} idle",
        f"low density: {format_mib(idle)} ({idle_share:.1%}) of the GPU sits idle with one instance on it",
    )
    if idle_share < 0.5:
        risk = ("none from sharing", "none from sharing: one instance owns the GPU")
    return _option(
        req,
        sharing=Sharing.WHOLE,
        label="whole GPU",
        profile=None,
        resource="nvidia.com/gpu",
        instances=1,
        memory_per_instance=gpu.memory_mib,
        isolation=Isolation.EXCLUSIVE,
        risk=risk,
        why_not=why_not,
    )


def max_instances(gpu: GpuModel, profile: MigProfile) -> int:
    """How many instances of ``profile`` alone one card holds, as placement (not a slice sum) decides."""
    for n in range(profile.max_instances, 0, -1):
        try:
            catalog.place_layout(gpu, {profile.name: n})
        except InvalidConfigError:
            continue
        return n
    return 0


def _mig(req: PlanRequest, profile: MigProfile) -> Option:
    model = req.workload.model_memory_mib
    n = max_instances(req.gpu, profile)
    slice_mem = profile.memory_mib
    why_not = ""
    if model > slice_mem:
        why_not = f"the {format_mib(model)} model is larger than the {format_mib(slice_mem)} slice"
    elif n == 0:
        why_not = f"{profile.name} cannot be placed on {req.gpu.key}"
    risk = (
        "OOM stays inside",
        f"an instance that outgrows its {format_mib(slice_mem)} slice fails alone (CUDA OOM), neighbours "
        "are unaffected; changing the layout evicts the GPU's pods (plan a window)",
    )
    return _option(
        req,
        sharing=Sharing.MIG,
        label=f"MIG {profile.name}",
        profile=profile.name,
        resource=f"nvidia.com/mig-{profile.resource_suffix}",
        instances=n,
        memory_per_instance=slice_mem,
        isolation=Isolation.HARDWARE,
        risk=risk,
        why_not=why_not,
    )


def _time_slicing(req: PlanRequest) -> Option:
    gpu, model, n = req.gpu, req.workload.model_memory_mib, req.replicas
    share = gpu.memory_mib // n
    why_not = ""
    if model > share:
        most = int(gpu.memory_mib // model)
        while most > 1 and model > gpu.memory_mib // most:
            most -= 1
        hint = f"at most {most} replicas fit" if most >= 2 else "fewer than 2 replicas fit"
        why_not = (
            f"{n} replicas x {format_mib(model)} = {format_mib(model * n)} do not fit in "
            f"{format_mib(share)} shares of the {format_mib(gpu.memory_mib)} GPU; {hint}"
        )
    risk = (
        "OOM hits all",
        f"no isolation: one tenant's OOM takes the shared pool - a replica that grows past its "
        f"{format_mib(share)} share exhausts the {format_mib(gpu.memory_mib)} pool and the other {n - 1} "
        f"fail with CUDA OOM; compute is time-shared, so real QPS is below the nominal "
        f"{n * req.workload.qps_per_instance:g}",
    )
    return _option(
        req,
        sharing=Sharing.TIME_SLICING,
        label=f"time-slicing x{n}",
        profile=None,
        resource="nvidia.com/gpu",
        instances=n,
        memory_per_instance=share,
        isolation=Isolation.NONE,
        risk=risk,
        why_not=why_not,
    )


def _recommend(req: PlanRequest, options: list[Option]) -> Recommendation | None:
    """The densest option that fits, leaves the asked headroom and meets the isolation need.

    Ties go to more headroom per instance (a whole GPU beats a 7g slice of it), then to profiles
    without media extensions, which are kept for video work.
    """
    allowed = [
        o
        for o in options
        if o.fits
        and o.headroom_mib >= req.min_headroom_mib
        and (req.isolation is IsolationNeed.SOFT or o.isolation is not Isolation.NONE)
    ]
    if not allowed:
        return None
    best = max(allowed, key=lambda o: (o.qps_per_gpu, o.headroom_mib, not (o.profile or "").endswith("+me")))
    return Recommendation(
        label=_name(best),
        sharing=best.sharing,
        profile=best.profile,
        reason=_reason(req, best, options),
        setup=_setup(best, req.replicas),
    )


def _name(o: Option) -> str:
    if o.sharing is Sharing.MIG:
        return f"{o.instances_per_gpu} x {o.label}"
    return o.label


def _reason(req: PlanRequest, best: Option, options: list[Option]) -> str:
    qps = req.workload.qps_per_instance
    nominal = " nominal" if best.qps_nominal else ""
    head = f"{_name(best)} serves {best.qps_per_gpu:g}{nominal} QPS per GPU"
    if best.instances_per_gpu > 1:
        head += f", {best.instances_per_gpu}x a whole GPU ({qps:g} QPS)"
    if best.sharing is Sharing.MIG and best.instances_per_gpu > 1:
        head += ": the limit is instances per GPU, not compute"
    parts = [head]
    if best.sharing is Sharing.MIG:
        parts.append(
            f"hardware isolation: memory and compute are fenced per tenant, and each instance keeps "
            f"{format_mib(best.headroom_mib)} of headroom for request bursts (KV cache, activations)"
        )
    elif best.sharing is Sharing.WHOLE:
        parts.append(f"exclusive: no neighbours, {format_mib(best.headroom_mib)} of headroom")
    else:
        isolated = _best_isolated(options, req.min_headroom_mib)
        if isolated is not None:
            more = best.instances_per_gpu / isolated.instances_per_gpu - 1
            parts.append(f"{more:.0%} more instances than {_name(isolated)} ({isolated.qps_per_gpu:g} QPS)")
        parts.append(
            "only for internal, low-priority work that tolerates neighbours: no memory isolation, "
            "and compute is time-shared so real QPS is lower"
        )
    ts = next(o for o in options if o.sharing is Sharing.TIME_SLICING)
    if best.sharing is not Sharing.TIME_SLICING and req.isolation is IsolationNeed.HARD and ts.fits:
        parts.append(
            f"{ts.label} ({ts.qps_per_gpu:g} nominal QPS) is ruled out by --isolation hard: "
            "one tenant's OOM takes the shared pool"
        )
    if req.min_headroom_mib:
        parts.append(f"options with less than {format_mib(req.min_headroom_mib)} of headroom were left out")
    return "; ".join(parts) + "."


def _best_isolated(options: list[Option], min_headroom_mib: float) -> Option | None:
    isolated = [
        o for o in options if o.fits and o.isolation is not Isolation.NONE and o.headroom_mib >= min_headroom_mib
    ]
    return max(isolated, key=lambda o: (o.qps_per_gpu, o.headroom_mib), default=None)


def _setup(o: Option, replicas: int) -> str:
    """How to get this option in the cluster, in the names the NVIDIA chain uses."""
    if o.sharing is Sharing.MIG:
        return (
            f"label the nodes nvidia.com/mig.config=all-{o.profile} (MIG manager); "
            f"pods request {o.resource}: 1 (device plugin migStrategy: mixed)"
        )
    if o.sharing is Sharing.TIME_SLICING:
        return (
            f"device plugin config sharing.timeSlicing.resources: [{{name: nvidia.com/gpu, replicas: {replicas}}}]; "
            "pods request nvidia.com/gpu: 1 and get a low, preemptible PriorityClass"
        )
    return "pods request nvidia.com/gpu: 1 (no sharing config)"


def _summary(req: PlanRequest, options: list[Option], rec: Recommendation | None) -> str:
    gpu, model = req.gpu, req.workload.model_memory_mib
    if rec is not None:
        best = next(o for o in options if _name(o) == rec.label)
        nominal = " nominal" if best.qps_nominal else ""
        per_gpu = f"{best.qps_per_gpu:g}{nominal} QPS per GPU"
        fleet = ""
        if req.gpus > 1:
            fleet = f"; {best.total_instances} instances, {best.total_qps:g}{nominal} QPS on {req.gpus} GPUs"
        return f"Recommended: {rec.label} - {per_gpu}, {ISOLATION_WORDS[best.isolation]}{fleet}."
    if not any(o.fits for o in options):
        bigger = [m.key for m in catalog.MODELS.values() if m.memory_mib >= model]
        where = f"a card with more memory ({', '.join(bigger)})" if bigger else "no catalogued card holds it whole"
        return (
            f"Nothing fits: the {format_mib(model)} model is larger than the {format_mib(gpu.memory_mib)} "
            f"of one {gpu.key}. Split it across GPUs (tensor parallelism, one whole GPU each) or use {where}."
        )
    why = []
    if req.min_headroom_mib:
        why.append(f"leaves {format_mib(req.min_headroom_mib)} of headroom")
    if req.isolation is IsolationNeed.HARD:
        why.append("is isolated")
    return (
        f"No option both fits and {' and '.join(why)}. "
        "Lower --min-headroom, accept --isolation soft, or pick a card with more memory."
    )
