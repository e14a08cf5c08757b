"""The walk: every GPU node bottom-up, stopping at the first broken link; then cluster-wide checks.

``diagnose(snapshot)`` is pure. The first broken foundation link (driver, toolkit, device plugin)
on a node is that node's root cause; the links above it are "not reached" and what they show
(pods waiting in Init, no nvidia.com/gpu in capacity, Pending workloads) is listed as its
consequences rather than reported as more faults. ``run_doctor`` is the shell: gather, diagnose.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from typing import cast

from gpuchain.common.gcpause import collector_paused
from gpuchain.common.labels import DEPLOY_PREFIX, OPERANDS_LABEL
from gpuchain.common.remember import answers_remembered
from gpuchain.doctor.admission import FINDING as ADMISSION_REFUSED
from gpuchain.doctor.admission import admission_refused
from gpuchain.doctor.bottlerocket import beside_host_plugin, host_plugin, unregistered
from gpuchain.doctor.context import Context, NodeView, index
from gpuchain.doctor.dra_conflict import dra_conflicts
from gpuchain.doctor.evidence import failure_at, failures, unrecognised, witnesses
from gpuchain.doctor.links.aks_engine import NO_PLUGIN, provisioned_without_driver
from gpuchain.doctor.links.bundled_runc import FINDING as BUNDLED_RUNC
from gpuchain.doctor.links.bundled_runc import runc_release_defect
from gpuchain.doctor.links.common import DRIVER_VERSION, Result, opted_out
from gpuchain.doctor.links.default_left import default_left, default_off_gpu_nodes
from gpuchain.doctor.links.device_plugin import check_device_plugin, plugin_off_gpu_nodes
from gpuchain.doctor.links.driver import skew_target
from gpuchain.doctor.links.driver_defects import check_driver_defects
from gpuchain.doctor.links.driver_pools import driver_pools
from gpuchain.doctor.links.exporter_gpu_pv import on_gpu_pv
from gpuchain.doctor.links.gfd import check_gfd
from gpuchain.doctor.links.hardware import gpu_faults
from gpuchain.doctor.links.host_plugin import announcing_host_plugin, plugin_beside
from gpuchain.doctor.links.k3s_cgroup import check_toolkit_and_cgroup
from gpuchain.doctor.links.mig import check_mig, mig_root
from gpuchain.doctor.links.nfd_failing import failing_nfd
from gpuchain.doctor.links.operator_idle import nothing_placed
from gpuchain.doctor.links.plugin_pair import beside_another_plugin
from gpuchain.doctor.links.reload_marked import reload_marked
from gpuchain.doctor.links.sandbox import sandbox_walk, serves_vms
from gpuchain.doctor.links.validation import waiting_on
from gpuchain.doctor.links.validation_pending import untolerated_validation
from gpuchain.doctor.links.workload import check_workloads
from gpuchain.doctor.model import FOUNDATION, Finding, Fix, FixOp, Link, LinkState, NodeChain, Report, Severity
from gpuchain.doctor.node import check_node
from gpuchain.doctor.pods import pod_state, unschedulable_message
from gpuchain.doctor.quarantine import quarantined
from gpuchain.doctor.resource_names import misnamed
from gpuchain.doctor.scheduling import dra_plugin_daemonsets, unplaced
from gpuchain.doctor.snapshot import MAX_SCRAPES, LogReader, Scraper, timed_gather
from gpuchain.doctor.stacks.base import provider_of
from gpuchain.doctor.stacks.gpu_operator import UPGRADE_STATE
from gpuchain.doctor.stacks.inferred_policy import unread_keys
from gpuchain.doctor.structs import CHARTS, Chart, Snapshot
from gpuchain.doctor.trust import check_exporter
from gpuchain.doctor.unlabelled import placed_nowhere
from gpuchain.kube import Cluster
from gpuchain.kube.gpu_resources import node_gpu_resources, pod_gpu_requests
from gpuchain.kube.objects import name_of, namespace_of
from gpuchain.operator.operands import (
    DCGM_EXPORTER,
    DEVICE_PLUGIN,
    DRIVER,
    GFD,
    MIG_MANAGER,
    TOOLKIT,
    VALIDATOR,
    Operand,
)
from gpuchain.operator.policy import parse_policy

Check = Callable[[Context, NodeView], Result]
CHECKS: tuple[tuple[str, Check, tuple[Operand, ...]], ...] = (
    ("driver", check_driver_defects, (DRIVER,)),
    ("toolkit", check_toolkit_and_cgroup, (TOOLKIT, VALIDATOR)),
    ("device-plugin", beside_another_plugin(beside_host_plugin(check_device_plugin)), (DEVICE_PLUGIN,)),
    ("gfd", check_gfd, (GFD,)),
    ("exporter", on_gpu_pv(check_exporter), (DCGM_EXPORTER,)),
    ("mig", check_mig, (MIG_MANAGER,)),
)
#: Each operand's link, by its state name.
LINK_OF = {op.state: name for name, _, operands in CHECKS for op in operands}


def _consequence(view: NodeView, link: str, operands: tuple[Operand, ...]) -> list[str]:
    out = []
    for op in operands:
        pod = view.pod(op)
        if pod is None:
            continue
        st = pod_state(pod)
        waiting = f" (waiting in {st.waiting_init})" if st.waiting_init else ""
        out.append(f"{link}: pod {st.name} {st.status}{waiting}")
    return out


def _opted_out(ctx: Context, view: NodeView, driver: Result) -> Finding | None:
    if "false" not in view.labels.values():
        return None  # no label opts anything out (most nodes): one search in C instead of a pass over every label
    labels = sorted(k for k, v in view.labels.items() if v == "false" and k.startswith(DEPLOY_PREFIX))
    if driver.state is LinkState.OK:
        labels = [k for k in labels if k != DEPLOY_PREFIX + DRIVER.deploy]
    if announcing_host_plugin(view.node):
        # The node image's own plugin serves its GPUs: keeping the operator's off is the intended layout (and the
        # repair of device-plugin.beside-host-plugin), not an opt-out to question.
        labels = [k for k in labels if k != DEPLOY_PREFIX + DEVICE_PLUGIN.deploy]
    if not labels:
        return None
    everything = OPERANDS_LABEL in labels
    action = Fix(FixOp.LABEL_NODE, view.name, dict.fromkeys(labels))
    return Finding(
        id="node.opted-out",
        severity=Severity.WARNING,
        link="driver" if everything else labels[0].removeprefix(DEPLOY_PREFIX),
        cause=f"the node is labelled {', '.join(f'{k}=false' for k in labels)}, so the operator "
        + (
            "deploys nothing on it and its GPUs are never offered to pods."
            if everything
            else "skips those operands on it."
        ),
        evidence=tuple(f"label {k}=false" for k in labels),
        fix=ctx.stack.render(action) + "   # if the opt-out is not intended",
        node=view.name,
        action=action,
    )


#: Node findings under which no link can be judged (the kubelet is gone, or no runtime to configure).
STOPS_THE_WALK = (
    "node.not-ready",
    "node.runtime-unsupported",
    "node.sandbox-failed",
    "toolkit.cri-unloaded",
    "toolkit.runtime-stopped",
    "node.gpu-lost",
    "node.gpu-inforom-corrupted",
    "node.device-plugins-disabled",
    "node.kubelet-socket-unseen",
    ADMISSION_REFUSED,
    BUNDLED_RUNC,
)


def walk(ctx: Context, view: NodeView) -> NodeChain:
    """One node bottom-up: the node itself, then foundation links until the first broken one, then the
    links above."""
    links: list[Link] = []
    built = cast("dict[tuple[str, LinkState, str], Link]", ctx.memo.setdefault("links", {}))
    # Every failing container here, and what else witnesses a link, read once for all the links.
    found = failures(ctx, view)
    witnessed = witnesses(ctx, view=view, found=found)
    under = check_node(ctx, view)
    under += gpu_faults(ctx, view, witnessed)
    under += quarantined(ctx, view)
    under += admission_refused(ctx, view)
    under += [f for f in (runc_release_defect(ctx, view),) if f is not None]
    root: Finding | None = next((f for f in under if f.id in STOPS_THE_WALK), None)
    sandboxed = sandbox_walk(ctx, view, under=under, root=root)
    if sandboxed is not None:
        return sandboxed  # a VM node: the sandbox operands' chain, not the container operands'
    node_root = root is not None
    findings: list[Finding] = [f for f in under if f is not root]
    consequences: list[str] = []
    driver_result: Result | None = None
    for name, check, operands in CHECKS:
        if root is not None or (
            driver_result is not None
            and driver_result.state is LinkState.SKIPPED
            and view.labels.get(OPERANDS_LABEL) == "false"
        ):
            if root is not None:
                if name == "mig" and root.id.startswith("mig."):
                    links.append(Link(name, LinkState.BROKEN, root.cause.split(";")[0]))
                    continue
                consequences += _consequence(view, name, operands)
                links.append(Link(name, LinkState.NOT_REACHED, f"waiting for {root.link}"))
            else:
                links.append(Link(name, LinkState.SKIPPED, f"opted out ({OPERANDS_LABEL}=false)"))
            continue
        if name == "device-plugin":
            # The plugin, GFD and exporter wait for the MIG layout: a MIG state that stops them is the root.
            stuck = mig_root(ctx, view, found=found)
            if stuck is not None:
                root = stuck
                findings.append(stuck)
                consequences += _consequence(view, name, operands)
                links.append(Link(name, LinkState.NOT_REACHED, "waiting for mig"))
                continue
        result = check(ctx, view)
        if (
            name in FOUNDATION
            and result.state is not LinkState.BROKEN
            and not (name == "driver" and announcing_host_plugin(view.node))
        ):
            # A failure this link's own check does not see: a validation of it that fails, or a
            # message that proves it broken in another link's pod (the catalog).
            early = failure_at(ctx, view=view, link=name, found=witnessed)
            if (
                early is not None
                and early.id in VALIDATION_FAILED
                and view.pod(DEVICE_PLUGIN) is not None
                and not any(f.init and f.container == "driver-validation" for f in witnessed)
            ):
                # A validation past the driver's own (nvidia-smi, which MIG mode does not stop) that fails with no
                # message the catalog knows, on a node whose MIG state stops the GPUs' users: the CUDA workload
                # fails for want of a MIG layout, not for the runtime or the driver.
                early = mig_root(ctx, view, found=found) or early
            if early is None and result.state is LinkState.OK:
                # Operands waiting (not failing) behind this link's validation, which the validator never completes.
                early = waiting_on(ctx, view=view, link=name)
            if early is None:
                # The operator's own validation pod of this link, kept off the node by a taint it does not tolerate.
                early = untolerated_validation(ctx, view=view, link=name)
            if early is not None:
                result = Result(LinkState.BROKEN, early.cause.split(":")[0].split(";")[0][:80], (early,))
        if name == "driver":
            driver_result = result
        links.append(_link(built, name, result.state, result.summary))
        findings += result.findings
        if result.state is LinkState.BROKEN and name in FOUNDATION and result.findings:
            root = result.findings[0]
    if node_root:
        # Under the chain: what the pods show is their last state (or waits on the node), not news.
        consequences = [f"{len(view.operand_pods)} operand pod(s) on {view.name} show their last reported state"]
    if root is not None:
        if not node_gpu_resources(view.node):
            consequences.append(f"node {view.name}: no nvidia.com/gpu in capacity")
        findings = [dataclasses.replace(root, root=True, consequences=tuple(consequences))] + [
            f for f in findings if f is not root
        ]
    else:
        findings = [dataclasses.replace(f, root=f.severity is Severity.ERROR) for f in findings]
    if node_root:
        links = [Link(lk.name, LinkState.NOT_REACHED, "waiting for the node") for lk in links]
    opted = _opted_out(ctx, view, driver_result) if driver_result is not None else None
    if opted is not None:
        findings.append(opted)
    for f in check_workloads(ctx, view):
        findings.append(dataclasses.replace(f, root=root is None and f.severity is Severity.ERROR))
    findings += unrecognised(ctx, view=view, link_of=LINK_OF, found=found)
    if view.unmarked:
        findings = [unmarked_root(view, f) if f.root else f for f in findings]
    return NodeChain(view.name, tuple(links), tuple(reload_marked(view, findings)))


def unmarked_root(view: NodeView, found: Finding) -> Finding:
    """The root found on a node that nothing marks as a GPU node, walked because the device plugin fails on it: a
    plugin on a node without GPUs fails the same way (NVIDIA's own says "If this is not a GPU node, you should set up
    a toleration or nodeSelector"), so the repair names that reading too."""
    return dataclasses.replace(
        found,
        evidence=(*found.evidence, f"no label or capacity marks {view.name} as a GPU node; its device plugin fails"),
        fix=f"{found.fix}   # if {view.name} has no GPU: keep the device plugin off it (a nodeSelector or node "
        "affinity on the plugin's DaemonSet for the GPU nodes' label)",
    )


def _link(built: dict[tuple[str, LinkState, str], Link], name: str, state: LinkState, summary: str) -> Link:
    """``Link(name, state, summary)``, built once a diagnosis (``built``) for each such link: at 10,000 nodes most
    links read alike ("gpu 8/8"), and a frozen dataclass costs three ``object.__setattr__`` to build."""
    key = (name, state, summary)
    link = built.get(key)
    if link is None:
        link = built[key] = Link(name, state, summary)
    return link


def _install(chart: Chart, namespace: str = "", upgrade: bool = False) -> Fix:
    """Install a stack by its chart, or upgrade it in place (into ``namespace``, else the chart's own)."""
    changes: dict[str, object] = {
        "release": chart.release,
        "chart": chart.chart,
        "namespace": namespace or chart.namespace,
    }
    if upgrade:
        changes |= {"upgrade": True, "flags": "--reuse-values", "fact": "policy"}
    else:
        changes["fact"] = f"stack:{chart.stack}"
    return Fix(FixOp.INSTALL, "", changes)


#: A cloud's own way to a device plugin it installs and keeps (learn.microsoft.com/azure/aks/aks-managed-gpu-nodes:
#: a managed GPU node pool, gpuProfile.nvidia.managementMode Managed; its first preview was the node pool tag
#: EnableManagedGPUExperience=true). On AKS Automatic it is the only way: a safeguard refuses objects of your own in
#: its managed kube-system, the namespace a plugin manifest applies to.
CLOUD_PLUGIN = {
    "aks": "or let AKS install and keep the device plugin (and driver) itself: a managed GPU node pool "
    "(gpuProfile.nvidia.managementMode=Managed; the node pool tag EnableManagedGPUExperience=true in its first "
    "preview), the way on AKS Automatic, which refuses a plugin DaemonSet in its managed kube-system",
}


def _policy_findings(ctx: Context) -> list[Finding]:
    stack = ctx.stack
    if stack.id == "none":
        # Nodes whose image runs the device plugin itself need no stack: only the others are missing one.
        hosted = unregistered(ctx, ctx.views)
        views = [v for v in ctx.views if not host_plugin(v) and not serves_vms(ctx, v) and not plugin_beside(v)]
        # aks-engine agents provisioned with its nvidia-device-plugin addon off lack the driver too: the addon is it.
        unprovisioned = [f for v in views if (f := provisioned_without_driver(ctx, v, evidence=NO_PLUGIN)) is not None]
        provisioned = {f.node for f in unprovisioned}
        views = [v for v in views if v.name not in provisioned]
        hosted = [*hosted, *unprovisioned]
        if not views:
            return hosted
        # Managed clouds' GPU images bring the driver and the runtime: NVIDIA's plugin is all they need.
        cloud = provider_of(ctx.snapshot.nodes)
        install = _install(CHARTS["nvidia-device-plugin" if cloud in ("eks", "aks") else "gpuchain"])
        return [
            Finding(
                id="stack.missing",
                severity=Severity.ERROR,
                link="device-plugin",
                cause=f"{len(views)} node(s) have NVIDIA GPUs but no GPU stack runs in the cluster: no device "
                "plugin announces them to the kubelet, so no pod can ask for one.",
                evidence=tuple(
                    e
                    for e in (
                        "no ClusterPolicy (gpuchain.io or nvidia.com), no NVIDIA or GKE device plugin DaemonSet",
                        f"GPU nodes: {', '.join(v.name for v in views[:5])}{' ...' if len(views) > 5 else ''}",
                        f"cloud: {cloud} (spec.providerID)" if cloud else "",
                    )
                    if e
                ),
                fix=stack.render(install)
                + (
                    "   # the node image brings driver and runtime"
                    + (f"; {CLOUD_PLUGIN[cloud]}" if cloud in CLOUD_PLUGIN else "")
                    if cloud
                    else "   # driver, toolkit and plugin; NVIDIA's plugin chart alone where the nodes have a driver"
                ),
                root=True,
                action=install,
            ),
            *hosted,
            *default_left(ctx),
            *default_off_gpu_nodes(ctx),
        ]
    if ctx.policy_obj is None and stack.policy_resource and "clusterpolicies" not in ctx.snapshot.absent:
        install = _install(stack.chart or CHARTS["gpuchain"], stack.namespace, upgrade=True)
        return [
            Finding(
                id="policy.missing",
                severity=Severity.ERROR,
                link="driver",
                cause=f"{stack.title} runs but there is no ClusterPolicy ({stack.policy_resource}), so its operator "
                "reconciles nothing: the operand DaemonSets left behind are never updated or repaired.",
                evidence=(f"kubectl get {stack.policy_resource}: none", f"namespace {stack.namespace}"),
                fix=stack.render(install) + "   # the chart creates the ClusterPolicy again",
                root=True,
                action=install,
            )
        ]
    if ctx.policy_problems:
        reset = _reset_fields(ctx)
        return [
            Finding(
                id="policy.invalid",
                severity=Severity.ERROR,
                link="driver",
                cause="the ClusterPolicy spec is invalid, so the operator refuses to act on it.",
                evidence=tuple(ctx.policy_problems),
                fix=(stack.render(reset) + "   # back to gpuchain's defaults; or set valid values")
                if reset
                else f"kubectl edit {ctx.policy_ref}",
                root=True,
                action=reset,
            )
        ]
    return []


def _reset_fields(ctx: Context) -> Fix | None:
    """A merge patch that removes every field the policy validation refused (its default applies)."""
    parsed = parse_policy(((ctx.policy_obj or {}).get("spec")) or {})
    if not isinstance(parsed, list):
        return None
    patch: dict[str, object] = {}
    for problem in parsed:
        keys = [k for k in problem.field.split("[", 1)[0].split(".") if k]
        if not keys:
            return None
        node = patch
        for key in keys[:-1]:
            sub = node.setdefault(key, {})
            if not isinstance(sub, dict):
                break
            node = sub
        else:
            node[keys[-1]] = None
    return Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": patch}) if patch else None


def _host_beside_operator(ctx: Context, versions: dict[str, list[str]]) -> str:
    """The nodes keeping a host driver of their own (no driver pod, the driver container opted out there) when
    the versions split exactly between them and the nodes with an operator driver pod ("" otherwise)."""
    with_pod = {v.name for v in ctx.views if v.pod(DRIVER) is not None}
    own = {v.name: opted_out(v, DRIVER) for v in ctx.views if v.pod(DRIVER) is None and opted_out(v, DRIVER)}
    if not with_pod or not own:
        return ""
    for nodes in versions.values():
        if not (set(nodes) <= with_pod or set(nodes) <= own.keys()):
            return ""
    if len({k for k, ns in versions.items() if set(ns) <= with_pod}) > 1:
        return ""
    shown = sorted(set(own) & {n for ns in versions.values() for n in ns})
    return ", ".join(f"{n} ({own[n]})" for n in shown[:5])


def _skew_layout(*, cause: str, evidence: tuple[str, ...], fix: str) -> list[Finding]:
    """A driver version skew that a supported layout explains (host drivers beside the operator's, NVIDIADriver pools,
    host releases of one branch): a warning with no action, said the same way whichever layout it is."""
    return [
        Finding(
            id="driver.version-skew", severity=Severity.WARNING, link="driver", cause=cause, evidence=evidence, fix=fix
        )
    ]


def _version_skew(ctx: Context) -> list[Finding]:
    versions: dict[str, list[str]] = {}
    for v in ctx.views:
        version = v.labels.get(DRIVER_VERSION)
        if version:
            versions.setdefault(version, []).append(v.name)
    if len(versions) < 2:
        return []
    counts = Counter({k: len(v) for k, v in versions.items()})
    majority, skipped = skew_target(versions, counts.most_common(1)[0][0])
    minority = sorted(n for k, ns in versions.items() if k != majority for n in ns)
    evidence = (
        tuple(
            f"driver {k} on {len(ns)} node(s): {', '.join(sorted(ns)[:5])}{' ...' if len(ns) > 5 else ''}"
            for k, ns in sorted(versions.items())
        )
        + skipped
    )
    branches = sorted({k.split(".")[0] for k in versions})
    upgrade = sorted(
        f"{v.name}: {UPGRADE_STATE}={v.labels[UPGRADE_STATE]}"
        for v in ctx.views
        if v.name in minority and UPGRADE_STATE in v.labels
    )
    first = minority[0]
    containers = ctx.deploys(DRIVER)
    mixed = _host_beside_operator(ctx, versions)
    if mixed:
        # Nodes that keep their own driver (the driver container opted out there, e.g. DGX OS) beside nodes
        # whose driver the operator installs: a supported layout whose versions follow two owners.
        return _skew_layout(
            cause=f"GPU nodes run {len(versions)} driver versions ({', '.join(sorted(versions))}) because {mixed} "
            "keep their own host driver beside nodes whose driver the operator installs: a supported layout; "
            "an image built for the newer CUDA may not run on the older driver.",
            evidence=evidence,
            fix="# none needed; to align them, upgrade the host driver with the node's OS image (it is not the "
            "operator's to change), or keep CUDA images within the older driver's branch",
        )
    pools = driver_pools(ctx, versions) if containers else ()
    if pools:
        # NVIDIADriver resources, each with its version and node pool: every node runs its own resource's image.
        return _skew_layout(
            cause=f"GPU nodes run {len(versions)} driver versions ({', '.join(sorted(versions))}), each the one "
            "its pool's NVIDIADriver resource names: a supported layout; an image built for the newer CUDA may "
            "not run on the older driver's pool.",
            evidence=(*pools, *evidence),
            fix="# none needed; to move a pool to another driver, change spec.version of its NVIDIADriver "
            "resource (kubectl edit nvidiadrivers.nvidia.com <name>), or schedule CUDA images onto the pool "
            "whose driver supports them",
        )
    if not containers and len(branches) == 1 and not skipped:
        # Host drivers of one branch: every release of a branch supports the same CUDA versions and each container
        # gets its own node's user-space libraries, so a rolling host upgrade halfway through breaks no image.
        return _skew_layout(
            cause=f"GPU nodes run {len(versions)} host driver releases of the {branches[0]} branch "
            f"({', '.join(sorted(versions))}): one branch supports the same CUDA versions, so images run alike "
            "on all of them; only a fix made in one release differs.",
            evidence=evidence,
            fix=f"# none needed; to align them, upgrade the host driver to {majority} with the node image",
        )
    # A policy read back from these same DaemonSets (`Stack.policy_inferred`) names what they run, not what the
    # user asked for: only a listed policy's version is compared with the majority's.
    listed = not ctx.policy_unknown and not ctx.stack.policy_inferred
    if containers and listed and ctx.policy.driver.version != majority:
        action = Fix(FixOp.PATCH_POLICY, ctx.policy_name, {"spec": {"driver": {"version": majority}}})
        fix = ctx.stack.render(action) + "   # the upgrade controller rolls it node by node"
    elif containers:
        # The policy names the majority's version (or is not in the dump while driver containers
        # run): the minority's driver pods are stale.
        pod = next((v.pod(DRIVER) for v in ctx.views if v.name == first and v.pod(DRIVER) is not None), None)
        restart = ctx.stack.render(
            Fix.delete_pod(
                (namespace_of(pod) or ctx.namespace) if pod else ctx.namespace, name_of(pod) if pod else "<driver pod>"
            )
        )
        action = Fix(
            FixOp.NODE,
            first,
            {"action": f"{restart} (it restarts with the policy's {majority})", "fact": "driver-version:"},
        )
        fix = ctx.stack.render(action)
    else:
        action = Fix(
            FixOp.NODE, first, {"action": f"upgrade the host driver to {majority}", "fact": f"host-driver:{majority}"}
        )
        fix = ctx.stack.render(action) + (f"; the same on {', '.join(minority[1:5])}" if len(minority) > 1 else "")
    return [
        Finding(
            id="driver.version-skew",
            severity=Severity.ERROR,
            link="driver",
            cause=f"GPU nodes run {len(versions)} different driver versions ({', '.join(sorted(versions))}"
            + (f"; branches {', '.join(branches)}" if len(branches) > 1 else "")
            + "): CUDA user-space libraries built against one may not resolve symbols of another, so the same image "
            "behaves differently depending on the node it lands on.",
            evidence=(*evidence, *upgrade),
            fix=fix,
            root=True,
            action=action,
        )
    ]


#: A validation's failure that no catalog entry explains (`evidence.failure_at`), of the links whose validations run
#: a GPU's user: the toolkit's nvidia-smi in a runtime-made container, the CUDA sample (`structs.VALIDATIONS`).
VALIDATION_FAILED = frozenset({"toolkit.validation-failed", "driver.validation-failed"})
#: The links whose fault takes GPUs away from the scheduler (the node itself, the foundation, MIG's layout).
OFFERS_GPUS = frozenset({"node", *FOUNDATION, "mig"})
#: Faults of those links that take no GPU away: the node still offers all its GPUs (pods that requested none use
#: them beside the pods the plugin gave them to; a pod that requested none runs without them).
KEEPS_GPUS = frozenset({"workload.gpu-without-request", "workload.gpu-not-requested"})


def _pending(ctx: Context, chains: list[NodeChain]) -> list[Finding]:
    """Pending GPU pods: those every GPU node keeps off (a taint, a selector, claims no device meets) get the
    change that lets them on (`scheduling.unplaced`); the rest wait on Insufficient GPUs, a consequence of the
    walk's roots, or capacity."""
    placed, explained = unplaced(ctx, chains)
    renamed, named = misnamed(ctx, chains, OFFERS_GPUS)
    nowhere, waiting = placed_nowhere(ctx)
    placed, explained = [*placed, *renamed, *nowhere], explained | named | waiting
    stuck = []
    for pod in ctx.pending:
        msg = unschedulable_message(pod)
        if msg and "Insufficient nvidia.com/" in msg and pod_gpu_requests(pod) and id(pod) not in explained:
            stuck.append((pod, msg))
    if not stuck:
        return placed
    roots = Counter(f.id for c in chains for f in c.findings if f.root and f.id not in KEEPS_GPUS)
    # A node whose root takes its GPUs away (the node itself, the foundation, MIG's layout): its pods wait on that
    # root, named as their cause, never as a second root of their own.
    no_gpu = [
        c.node
        for c in chains
        if c.broken_link in OFFERS_GPUS
        or any(
            f.root and f.severity is Severity.ERROR and f.link in OFFERS_GPUS and f.id not in KEEPS_GPUS
            for f in c.findings
        )
    ]
    if ctx.stack.id == "none":
        # No device plugin DaemonSet anywhere: every GPU node that announces no GPU offers nothing, because of
        # stack.missing, or of its own image's plugin service not registered where the image runs one (Bottlerocket);
        # a node whose image's plugin announces its GPUs offers them.
        silent = {
            v.name: host_plugin(v) for v in ctx.views if not any(n > 0 for n in node_gpu_resources(v.node).values())
        }
        no_gpu = [c.node for c in chains if c.node in silent]
        roots = Counter("device-plugin.not-registered" if silent[n] else "stack.missing" for n in no_gpu)
    names = [f"{p['metadata'].get('namespace')}/{p['metadata']['name']}" for p, _ in stuck]
    requested = Counter(r for p, _ in stuck for r in pod_gpu_requests(p))
    resources = ", ".join(sorted(requested))
    if no_gpu:
        cause = (
            f"{len(stuck)} pod(s) are Pending on Insufficient {resources} because {len(no_gpu)} GPU node(s) offer no "
            f"GPUs: a consequence of {', '.join(f'{k} ({n} node(s))' for k, n in roots.most_common())}, "
            "not a lack of GPUs."
        )
        fix = (
            f"# fix the root cause ({roots.most_common(1)[0][0]}); "
            "the pods schedule by themselves once capacity appears"
        )
    else:
        cause = f"{len(stuck)} pod(s) are Pending on Insufficient {resources}: " + (
            "every schedulable GPU is in use; the links that offer GPUs work on every GPU node, so this is capacity, "
            "not a fault."
            if ctx.views
            else "the cluster has no GPU node now (a GPU node pool scaled to zero, which an autoscaler grows for "
            "them, or none at all); no link of the GPU chain is broken."
        )
        fix = (
            f"# add GPU nodes (scale the GPU node pool up) for the {len(stuck)} pod(s) waiting on {resources}, or "
            "lower their GPU requests; they schedule as soon as GPUs are free"
        )
    # A cluster whose GPUs are all allocated is information; only GPUs that cannot be offered (or none at
    # all) make the waiting pods an error. A fault of a link that offers no GPU (the exporter, feature
    # discovery) is its own finding and takes no GPU away from the scheduler.
    offering = {
        c.node for c in chains for f in c.findings if f.root and f.link in OFFERS_GPUS and f.id not in KEEPS_GPUS
    }
    healthy_full = bool(ctx.views) and not no_gpu and not offering
    # With no GPU node at all there is no chain to be broken: a pool scaled to zero (grown on demand by an
    # autoscaler) looks the same as one never added, so the waiting pods are a warning, not a fault.
    severity = Severity.INFO if healthy_full else Severity.ERROR if ctx.views else Severity.WARNING
    return [
        *placed,
        Finding(
            id="workload.insufficient-gpu",
            severity=severity,
            link="device-plugin",
            cause=cause,
            evidence=(f"pods: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}", f"scheduler: {stuck[0][1]}"),
            fix=fix,
            root=not no_gpu and not healthy_full,
            consequences=tuple(f"node {n}: no nvidia.com/gpu" for n in no_gpu[:8]),
        ),
    ]


def not_judged(ctx: Context) -> list[str]:
    """What the source (a dump) lacks that this stack's checks read, and what was therefore not judged."""
    absent, stack = ctx.snapshot.absent, ctx.stack
    lines = []
    if stack.policy_inferred:
        lines.append(
            f"the dump has no ClusterPolicy ({stack.policy_resource}; clusterpolicies.json): gpuchain read its "
            "switches back from the operand DaemonSets the operator rendered from it "
            f"({'; '.join(stack.policy_inferred)}); "
            f"not judged: {', '.join(unread_keys(stack))}, the policy's name, and whether the policy asks for "
            "other than what those DaemonSets run; "
            f"fixes name the policy {ctx.policy_name}, a guess (kubectl get {stack.policy_resource} names it)"
        )
    if ctx.policy_unknown:
        lines.append(
            f"the dump has no ClusterPolicy ({stack.policy_resource}; clusterpolicies.json): not judged whether "
            "the policy enables an operand whose DaemonSet is missing, the device plugin config it names, "
            "the toolkit's environment"
        )
    if "configmaps" in absent and stack.namespace:
        lines.append(
            f"the dump has no ConfigMaps of {stack.namespace} ({stack.namespace}/configmaps.json): not judged "
            "whether the device plugin config a node's label or the policy names exists, nor whether a node's "
            "GPUs are time-sliced where neither a GFD sharing label nor the plugin's 'Running with config:' log "
            "line says so"
        )
    if "resourceslices" in absent and dra_plugin_daemonsets(ctx.snapshot.daemonsets):
        lines.append(
            "the dump has no ResourceSlices (resourceslices.json): not judged whether the DRA kubelet plugin "
            "published each node's GPUs (a ready plugin whose slice carries no device)"
        )
    if "runtimeclasses" in absent and stack.policy_resource:
        lines.append(
            "the dump has no RuntimeClasses (runtimeclasses.json): not judged whether the operands' "
            f"RuntimeClass {ctx.policy.operator.runtime_class} exists"
        )
    if "nvidiadrivers" in absent and stack.driver_resource:
        lines.append("the dump has no NVIDIADrivers (nvidiadrivers.json): not judged which of them drives a node")
    if lines:
        lines.append("gpuchain doctor dump DIR writes all of these (kubectl cluster-info dump writes none of them)")
    if ctx.snapshot.unscraped:
        lines.append(
            f"{ctx.snapshot.unscraped} exporter(s) beyond the first {MAX_SCRAPES} (by node name) were not scraped: "
            "not judged whether their GPUs' metrics are current and complete"
        )
    return lines


def diagnose(snapshot: Snapshot) -> Report:
    """Walk every GPU node and check the cluster; pure, so any snapshot (live, simulated, saved) works."""
    with answers_remembered():
        ctx = index(snapshot)
        chains = [walk(ctx, v) for v in ctx.views]
        findings = _policy_findings(ctx) + nothing_placed(ctx)
        findings += [f for c in chains for f in c.findings]
        findings += [dataclasses.replace(f, root=True) for f in plugin_off_gpu_nodes(ctx)]
        findings += default_off_gpu_nodes(ctx)
        findings += failing_nfd(ctx, findings)
        findings += _version_skew(ctx)
        findings += dra_conflicts(snapshot, ctx.stack)
        findings += _pending(ctx, chains)
    return Report(
        chains=chains,
        findings=findings,
        gpu_nodes=len(ctx.views),
        cluster_nodes=len(snapshot.nodes),
        stack=ctx.stack.to_dict(),
        not_judged=not_judged(ctx),
    )


def run_doctor(
    cluster: Cluster,
    *,
    namespace: str | None = None,
    reader: LogReader | None = None,
    progress: Callable[[str], None] | None = None,
    scraper: Scraper | None = None,
    keep: Callable[[Snapshot], object] | None = None,
) -> Report:
    """Gather (a fixed handful of list calls) and diagnose; the report carries the calls made and the
    time. The cyclic collector is paused meanwhile (`collector_paused`: it would only walk the
    snapshot again and again). ``keep`` is handed the snapshot before this lets go of it: the
    console command keeps it until its process ends (`gpuchain.common.fastexit`), so that its
    millions of objects are never freed one by one; without ``keep`` it is freed on return."""
    started = time.perf_counter()
    with collector_paused():
        snap, calls, _ = timed_gather(cluster, namespace=namespace, reader=reader, progress=progress, scraper=scraper)
        report = diagnose(snap)
    if keep is not None:
        keep(snap)
    report.api_calls = calls
    report.seconds = time.perf_counter() - started
    return report
