"""GPU pods that lost their GPUs while running: a systemd reload dropped their device rules, and what creates the
/dev/char links that keep them.

runc's systemd cgroup driver hands each container's device rules to systemd, which on ``systemctl daemon-reload``
rewrites them from paths under /dev/char; the NVIDIA device nodes have none unless something creates them, so the
reload takes a running container's GPUs and NVML fails inside it with "Unknown Error" (NVIDIA/nvidia-container-
toolkit#48). Who creates the links decides the repair:

- the GPU Operator's driver validation, from v22.9.2 (NVIDIA/gpu-operator validator/main.go@v22.9.2,
  ``createDevCharSymlinks``; its release notes: "Fixed an issue where containers allocated GPU lose access to them
  when systemd is triggered..."), unless the ClusterPolicy turns it off with ``DISABLE_DEV_CHAR_SYMLINK_CREATION``
  in ``spec.validator.driver.env`` (the same file's flag): an older operator is upgraded, a disabled one re-enabled;
- anywhere else, ``nvidia-ctk system create-dev-char-symlinks --create-all`` (NVIDIA/nvidia-container-toolkit
  cmd/nvidia-ctk/system/create-dev-char-symlinks@v1.12.0, the first release that has it), run at every boot (the
  toolkit's documented udev rule) since /dev is rebuilt then.

A toolkit release that cannot read the driver's device names (releases.yaml) comes first wherever it runs.
"""

from __future__ import annotations

from gpuchain.doctor import catalog
from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import node_finding
from gpuchain.doctor.links.releases import operator_release, release_repair
from gpuchain.doctor.model import Finding, Fix, FixOp, Severity
from gpuchain.doctor.ready_gpu_logs import NVML_LOST
from gpuchain.doctor.releases import release_of, showing
from gpuchain.kube.gpu_resources import pod_gpu_requests
from gpuchain.kube.objects import Obj, name_of, namespace_of
from gpuchain.operator.operands import TOOLKIT

#: The validator's switch that turns its /dev/char link creation off (NVIDIA/gpu-operator validator/main.go@v22.9.2).
DISABLE_LINKS = "DISABLE_DEV_CHAR_SYMLINK_CREATION"
#: The GPU Operator release whose driver validation first creates the links.
OPERATOR_LINKS = "v22.9.2"
#: The node-side repair: the links now, and at every boot from the udev rule NVIDIA's workaround for
#: NVIDIA/nvidia-container-toolkit#48 gives, which runs the same command when the nvidia driver binds a GPU.
CREATE_LINKS = (
    "create the /dev/char links runc needs for the NVIDIA devices (nvidia-ctk system create-dev-char-symlinks "
    "--create-all, NVIDIA Container Toolkit v1.12.0 or later) and keep them across reboots with a udev rule "
    '(/lib/udev/rules.d/71-nvidia-dev-char.rules: ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
    'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all")'
)


def _validator_env(ctx: Context) -> list[Obj]:
    """The ClusterPolicy's ``spec.validator.driver.env`` ([] without a policy)."""
    spec = (ctx.policy_obj or {}).get("spec") or {}
    return list(((spec.get("validator") or {}).get("driver") or {}).get("env") or [])


def links_disabled(ctx: Context) -> bool:
    """Whether the ClusterPolicy turns the driver validation's /dev/char link creation off."""
    return any(
        e.get("name") == DISABLE_LINKS and str(e.get("value", "")).lower() in ("true", "1") for e in _validator_env(ctx)
    )


def _operator_creates_links(ctx: Context) -> bool:
    """Whether the cluster's GPU Operator release is one whose driver validation creates the links (False where the
    cluster runs no GPU Operator or shows no release of it)."""
    if ctx.policy_obj is None:
        return False
    running = release_of(operator_release(ctx)[0], "gpu-operator")
    least = release_of(OPERATOR_LINKS, "gpu-operator")
    return running is not None and least is not None and not running < least


def lost_gpus(ctx: Context, view: NodeView, apps: list[Obj]) -> Finding | None:
    """The finding for GPU pods among ``apps`` whose log, or a probe of theirs (the kubelet's Unhealthy Event quotes
    an exec probe's output: a readiness probe that runs nvidia-smi), says NVML lost the GPU while they ran, with the
    repair of whatever should have created the /dev/char links on this node; None where no GPU pod says so."""
    probed = {
        str((e.get("involvedObject") or {}).get("name"))
        for e in view.events
        if e.get("reason") == "Unhealthy" and catalog.find(str(e.get("message", "")), NVML_LOST)
    }
    lost = [
        p
        for p in apps
        if pod_gpu_requests(p)
        and (
            name_of(p) in probed
            or any(
                catalog.find(ctx.log(p, str(c.get("name"))), NVML_LOST)
                for c in (p.get("spec") or {}).get("containers") or []
            )
        )
    ]
    if not lost:
        return None
    refs = [f"{namespace_of(p) or 'default'}/{name_of(p)}" for p in lost]
    again = f"kubectl delete pod -n {namespace_of(lost[0]) or 'default'} {name_of(lost[0])}"
    release = release_repair(ctx, view=view, pod=view.pod(TOOLKIT), operand=TOOLKIT, shown=showing("log", NVML_LOST))
    evidence = [
        f"pods logging '{catalog.entry(NVML_LOST).args[0]}' from NVML"
        f"{' (or their probes saying it)' if probed else ''}: {', '.join(refs[:5])}",
        catalog.entry(NVML_LOST).cite(),
        "NVIDIA/nvidia-container-toolkit#48",
    ]
    action: Fix
    if links_disabled(ctx):
        # The operator would create them at every driver validation, but the policy turns that off.
        env = [e for e in _validator_env(ctx) if e.get("name") != DISABLE_LINKS]
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"validator": {"driver": {"env": env}}}})
        fix = (
            f"{ctx.stack.render(action)}   # remove {DISABLE_LINKS} from the validator's driver env so the GPU "
            f"Operator's driver validation creates the /dev/char links on every node start; then {again}"
        )
        evidence.append(f"ClusterPolicy spec.validator.driver.env: {DISABLE_LINKS}=true")
    else:
        first = f"{release.fix.removeprefix('# ')}; then " if release else ""
        if release is None and ctx.policy_obj is not None and not _operator_creates_links(ctx):
            first = (
                f"upgrade the GPU Operator to {OPERATOR_LINKS} or later, whose driver validation creates the /dev/char "
                "links on every node start; until then "
            )
        action = Fix(
            FixOp.NODE,
            view.name,
            {
                "action": f"{first}{CREATE_LINKS}, then delete the affected pods so they start with their device "
                f"rules: {again}",
                "drain": False,
                "fact": "dev-char",
            },
        )
        fix = ctx.stack.render(action)
    if release is not None:
        evidence += release.evidence
    return node_finding(
        view,
        fid="workload.nvml-lost",
        sev=Severity.ERROR,
        link="toolkit",
        cause="GPU pods on this node lost access to their GPUs while running: systemd reloaded its units and dropped "
        "the containers' device cgroup rules (the NVIDIA devices have no /dev/char links), so NVML fails inside "
        "them; the device plugin and the node look healthy.",
        evidence=evidence,
        fix=fix,
        action=action,
    )
