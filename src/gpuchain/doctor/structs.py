"""The doctor's shared types: the snapshot it reads and the stack it finds there.

`gpuchain.doctor.snapshot` gathers a `Snapshot`; the adapters of `gpuchain.doctor.stacks` read one and
answer a `Stack`. Both live here, below both, so neither imports the other's module to name them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpuchain.doctor.model import NOT_SIMULATED, Fix, FixOp
from gpuchain.kube.objects import Obj, name_of
from gpuchain.operator.policy import ClusterPolicySpec

LogKey = tuple[str, str, str]  #: (namespace, pod, container)


@dataclass(frozen=True)
class Scrape:
    """One exporter's ``/metrics`` answer and when it was read (Unix time): the age of a GPU's last
    sample is ``at`` minus its ``gpuchain_gpu_last_sample_timestamp_seconds``."""

    text: str
    at: float


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The cluster as the doctor saw it; every check is a pure function of this.

    ``namespace`` is the stack namespace the user named (``--namespace``), "" to let the stack
    adapter find it. The objects may be the cluster's own (`gather` reads with
    ``list_readonly``): read them, never change them.
    """

    namespace: str
    policies: list[Obj]
    nodes: list[Obj]
    pods: list[Obj]
    daemonsets: list[Obj]
    configmaps: list[Obj]
    runtime_classes: list[Obj]
    events: list[Obj]
    logs: dict[LogKey, str] = field(default_factory=dict)
    #: the last terminated run's log of containers that restarted (``kubectl logs --previous``)
    previous_logs: dict[LogKey, str] = field(default_factory=dict)
    drivers: list[Obj] = field(default_factory=list)  #: NVIDIADriver objects (GPU Operator)
    resource_slices: list[Obj] = field(default_factory=list)  #: DRA ResourceSlices (resource.k8s.io/v1)
    #: PodDisruptionBudgets (policy/v1), read only where a node drains (`snapshot.draining`): what an eviction obeys
    pdbs: list[Obj] = field(default_factory=list)
    #: the stack's pods the kubelet refused at admission (Failed), read only where a GPU node announces no GPU
    #: (`admission.refusals_worth_reading`): the pod list leaves Failed pods out
    refused: list[Obj] = field(default_factory=list)
    #: GPU workload pods that ended Failed on a GPU node, the newest few (`finished.split_finished`): the pod list
    #: leaves them out, and a workload that fails at its first run and restarts Never shows its failure only there
    finished: list[Obj] = field(default_factory=list)
    absent: frozenset[str] = frozenset()  #: what the source did not have (a dump without extras)
    #: the exporter's scrape by node name, where one was read (`gpuchain.doctor.trust`)
    scrapes: dict[str, Scrape] = field(default_factory=dict)
    unscraped: int = 0  #: gpuchain exporters beyond ``MAX_SCRAPES``, whose scrapes were not read


#: The validations NVIDIA's validator runs as init containers (gpu-operator's
#: assets/state-operator-validation, cmd/nvidia-validator): the init container's name -> the link
#: it proves. Operand pods carry the same names as init containers that only wait for the ready file.
#: ``cuda-validation`` runs after ``toolkit-validation`` has run nvidia-smi in a container the toolkit set up
#: (the init containers' order in 0500_daemonset.yaml), so what its vectorAdd sample fails at is past the toolkit:
#: the driver's side of CUDA (a fabric manager, a driver too old for the sample, missing kernel modules).
VALIDATIONS = {
    "driver-validation": "driver",
    "toolkit-validation": "toolkit",
    "cuda-validation": "driver",
    "plugin-validation": "device-plugin",
    "mofed-validation": "driver",
}


#: gpuchain's log line (commands/_output): text ``<asctime> <LEVEL> <logger>: <message>`` or JSON
#: ``{"ts": ..., "level": ..., "logger": ..., "msg": ...}``.
_LOG_LINE = re.compile(r'\s(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) ([\w.-]+): |"logger": "([\w.-]+)"')


def _logger_of(line: str) -> str:
    """The logger that wrote a gpuchain log line ("" for any other line)."""
    found = _LOG_LINE.search(line)
    return (found.group(1) or found.group(2)) if found else ""


@dataclass(frozen=True, kw_only=True)
class Chart:
    """A stack's Helm chart, as a fix installs or upgrades it."""

    stack: str  #: the id of the stack it installs
    release: str
    chart: str
    namespace: str  #: the namespace its docs install it in
    #: the values key of the Node Feature Discovery it bundles, turned on by ``<key>.enabled`` ("" = none)
    nfd_values: str = ""


#: The charts a fix installs a stack with, by stack id (NVIDIA/k8s-device-plugin README: helm repo nvdp,
#: release nvdp in namespace nvidia-device-plugin; NVIDIA/gpu-operator: nvidia/gpu-operator, whose
#: values turn its bundled NFD on under nfd).
CHARTS = {
    "gpuchain": Chart(stack="gpuchain", release="gpuchain", chart="charts/gpuchain", namespace="gpuchain"),
    "gpu-operator": Chart(
        stack="gpu-operator",
        release="gpu-operator",
        chart="nvidia/gpu-operator",
        namespace="gpu-operator",
        nfd_values="nfd",
    ),
    "nvidia-device-plugin": Chart(
        stack="nvidia-device-plugin",
        release="nvdp",
        chart="nvdp/nvidia-device-plugin",
        namespace="nvidia-device-plugin",
    ),
}


@dataclass(frozen=True, kw_only=True)
class Stack:
    """One stack's names for the links, as the checks and the fixes need them, and its quirks as data:
    a check reads a field here, never the stack's ``id``."""

    id: str  #: gpuchain, gpu-operator, nvidia-device-plugin, gke, eks, aks, none
    title: str  #: what the output calls it
    namespace: str
    daemonsets: dict[str, str]  #: operand state -> DaemonSet name (the names this stack uses)
    containers: dict[str, str]  #: operand state -> main container name
    policy: ClusterPolicySpec  #: the switches: which links this stack deploys
    policy_obj: Obj | None = None
    policy_resource: str = ""  #: e.g. clusterpolicies.nvidia.com (for kubectl), "" without a policy
    policy_problems: tuple[str, ...] = ()
    #: where `policy_obj` was read back from the operand DaemonSets (the source lists no policy): each field read and
    #: from where; () for a policy the source lists. A check comparing the policy with those DaemonSets asks this.
    policy_inferred: tuple[str, ...] = ()
    host_driver: bool = False  #: the driver is the node's own (managed image, pre-installed)
    prefixes: dict[str, str] = field(default_factory=dict)  #: DaemonSet name prefix -> operand state
    notes: tuple[str, ...] = ()  #: what the adapter saw, for the report header
    #: validator init container name -> the link it proves (NVIDIA's names by default)
    validations: dict[str, str] = field(default_factory=lambda: dict(VALIDATIONS))
    #: what to put on a node whose image should carry the driver and runtime and does not ("" when
    #: the stack installs them itself or the image is the user's own)
    node_image: str = ""
    #: the pod sandbox (pause) image the node image's containerd config names, where it names its own ("" = the
    #: runtime's built-in default): a sandbox refused for that default means the config lost the image's setting
    sandbox_image: str = ""
    #: where the node image installs the driver on the host, for operands that must mount it ("" = /)
    driver_root: str = ""
    #: how a user installs the driver on a node of this stack where it is missing ("" = the generic advice)
    driver_install: str = ""
    #: operand state -> how a user deploys that operand's DaemonSet where it is missing, on a stack whose operands
    #: no operator reconciles (a cloud's addon); absent: the operator brings it back when it reconciles
    operand_install: dict[str, str] = field(default_factory=dict)
    #: prefix of driver DaemonSets made per kernel and OS for precompiled drivers ("" = none)
    precompiled_prefix: str = ""
    #: the OS families the stack publishes driver container images for (() = it publishes none)
    driver_image_os: tuple[str, ...] = ()
    #: "namespace/name" of an operand DaemonSet outside the stack's namespace -> its operand state
    #: (a second release of an operand, e.g. dcgm-exporter's own chart beside the operator)
    elsewhere: dict[str, str] = field(default_factory=dict)
    #: the chart that installs the stack, for a fix that installs or upgrades it (None: no chart of its own)
    chart: Chart | None = None
    #: whether its feature discovery hands the nvidia.com/gpu.* labels to Node Feature Discovery
    #: (NVIDIA's GFD: features.d or a NodeFeature object) rather than writing them itself (gpuchain's)
    gfd_via_nfd: bool = True
    #: whether its policy names each operand's image (repository, image, version), so a patch can swap one
    policy_names_images: bool = False
    #: whether its policy's spec.cdi.enabled hands GPUs to containers through the runtime's CDI support
    policy_cdi: bool = False
    #: the resource that puts drivers on node groups beside the policy ("" = none; NVIDIA's NVIDIADriver)
    driver_resource: str = ""
    #: operand state -> the node label whose ``false`` keeps it off a node, where that is not the
    #: operand's own ``nvidia.com/gpu.deploy.<operand>`` (gpuchain's node agent: one label for its roles)
    deploy_labels: dict[str, str] = field(default_factory=dict)
    #: whether the cluster's API server runs the ExtendedResourceToleration admission plugin, which gives every pod
    #: that requests an extended resource (nvidia.com/gpu) a toleration of the NoSchedule taint of that name
    #: (kubernetes plugin/pkg/admission/extendedresourcetoleration/admission.go): such a taint never keeps those
    #: pods off, whatever their spec as written says
    extended_resource_toleration: bool = False
    #: operand state -> the logger its lines carry where one container serves several operands
    #: (gpuchain's node agent), so each link reads its own lines of the shared log
    loggers: dict[str, str] = field(default_factory=dict)
    #: the Helm value of the stack's chart that gives the device plugin's pods a RuntimeClass (NVIDIA's plugin chart:
    #: runtimeClassName; HAMi's: devicePlugin.runtimeClassName)
    runtime_class_value: str = "runtimeClassName"

    def operands_in(self, namespace: str, ds_name: str) -> tuple[str, ...]:
        """Every operand state DaemonSet ``namespace/ds_name`` runs: one for an operand's own
        DaemonSet, each role's for a DaemonSet that serves several (gpuchain's node agent)."""
        if namespace != self.namespace:
            other = self.elsewhere.get(f"{namespace}/{ds_name}")
            return (other,) if other else ()
        served = tuple(state for state, name in self.daemonsets.items() if name == ds_name)
        if served:
            return served
        return tuple(state for prefix, state in self.prefixes.items() if ds_name.startswith(prefix))[:1]

    def operand_of(self, ds_name: str) -> str | None:
        """The operand state a DaemonSet of this stack stands for, the first in chain order where it
        serves several (None: not one of the chain's)."""
        return next(iter(self.operands_in(self.namespace, ds_name)), None)

    def own_lines(self, state: str, log: str) -> str:
        """The lines of a container's log that concern ``state``: where the container serves several
        operands, the other operands' lines (by the logger each line names) are left out, so one
        role's error is not quoted as another link's; the whole log otherwise."""
        others = {name for s, name in self.loggers.items() if s != state}
        if state not in self.loggers or not others:
            return log
        return "\n".join(ln for ln in log.splitlines() if _logger_of(ln) not in others)

    def speaker(self, states: list[str], line: str) -> str:
        """Which of ``states`` (the operands one pod serves) wrote ``line``: the one whose logger it
        carries, else the first ("" for none)."""
        logger = _logger_of(line)
        return next((s for s in states if logger and self.loggers.get(s) == logger), states[0] if states else "")

    def ds(self, state: str) -> str:
        """The DaemonSet name of an operand in this stack."""
        return self.daemonsets.get(state, state)

    def container(self, state: str) -> str:
        """The main container name of an operand in this stack."""
        return self.containers.get(state, self.ds(state))

    @property
    def policy_name(self) -> str:
        """The active policy's name ("" when the stack has none)."""
        return name_of(self.policy_obj) if self.policy_obj else ""

    def render(self, fix: Fix) -> str:
        """The fix as the commands a person runs on this stack (its names, its namespace)."""
        ch = fix.changes
        if fix.op in (FixOp.LABEL_NODE, FixOp.LABEL_NAMESPACE):
            labels = {k: v for k, v in ch.items() if k != NOT_SIMULATED}
            parts = [f"{k}-" if v is None else f"{k}={v}" for k, v in labels.items()]
            overwrite = " --overwrite" if any(v is not None for v in labels.values()) else ""
            kind = "node" if fix.op is FixOp.LABEL_NODE else "namespace"
            return f"kubectl label {kind} {fix.target} {' '.join(parts)}{overwrite}"
        if fix.op is FixOp.PATCH_POLICY:
            fields = {k: v for k, v in ch.items() if k != NOT_SIMULATED}  # a note to the simulator, not a field
            resource = self.policy_resource or "clusterpolicy"
            # A policy read back from its DaemonSets has no name in the source: the one given is the likeliest.
            guessed = (
                f"   # {fix.target} is the likeliest name; kubectl get {resource} names yours"
                if self.policy_inferred and fix.target == self.policy_name
                else ""
            )
            return (
                f"kubectl patch {resource} {fix.target} --type merge "
                f"-p '{json.dumps(fields, separators=(',', ':'))}'{guessed}"
            )
        if fix.op is FixOp.PATCH_DAEMONSET:
            ns, _, name = fix.target.partition("/")
            # A merge patch replaces a list whole: a template's containers and volumes are merged by name (strategic).
            template = ((ch.get("spec") or {}).get("template") or {}).get("spec") or {}
            kind = "strategic" if {"containers", "initContainers", "volumes"} & template.keys() else "merge"
            return f"kubectl -n {ns} patch ds {name} --type {kind} -p '{json.dumps(ch, separators=(',', ':'))}'"
        if fix.op is FixOp.SET_ENV:
            ns, _, name = fix.target.partition("/")
            return f"kubectl -n {ns} set env ds/{name} " + " ".join(f"{k}={v}" for k, v in ch["env"].items())
        if fix.op is FixOp.SET_LIMITS:
            ns, _, name = fix.target.partition("/")
            limits = ",".join(f"{k}={v}" for k, v in ch["limits"].items())
            kind = ch.get("kind", "ds")  # a Deployment's pods (nfd-master, nfd-gc) take theirs from deploy/<name>
            return f"kubectl -n {ns} set resources {kind}/{name} -c {ch['container']} --limits={limits}"
        if fix.op is FixOp.PATCH_WORKLOAD:
            kind, ns, name = fix.target.split("/", 2)
            patch = json.dumps(ch["patch"], separators=(",", ":"))
            kind_of = ch.get("type", "merge")  # a JSON patch where list items change (a container's resources)
            if ch.get("recreate"):
                return (
                    f"kubectl -n {ns} get {kind.lower()} {name} -o json | kubectl patch --local -f - --type {kind_of} "
                    f"-p '{patch}' -o json | kubectl replace --force -f -   # {kind} {name} takes no change in place"
                )
            return f"kubectl -n {ns} patch {kind.lower()} {name} --type {kind_of} -p '{patch}'"
        if fix.op is FixOp.TAINT_NODE:
            return f"kubectl taint node {fix.target} " + " ".join(f"{t}-" for t in ch["remove"])
        if fix.op is FixOp.UNINSTALL:
            return f"helm -n {ch['namespace']} uninstall {ch['release']}"
        if fix.op is FixOp.CREATE:
            return f"kubectl apply -f - <<< '{json.dumps(ch, separators=(',', ':'))}'"
        # Work outside the cluster is said as a shell comment, so the whole line still pastes.
        if fix.op is FixOp.NODE and ch.get("drain") is False:
            return f"# on node {fix.target} (outside the cluster): {ch['action']}"
        if fix.op is FixOp.NODE:
            drain = f"kubectl cordon {fix.target} && kubectl drain {fix.target} --ignore-daemonsets"
            return f"{drain}   # then on the node (outside the cluster): {ch['action']}"
        if fix.op is FixOp.HARDWARE:
            return f"# hardware, no command fixes it: {ch['action']}"
        if fix.op is FixOp.DELETE:
            scope = f"-n {ch['namespace']} " if ch.get("namespace") else ""  # cluster-scoped: no namespace
            # a pod stuck terminating goes only without its grace period
            force = " --force --grace-period=0" if ch.get("force") else ""
            return f"kubectl {scope}delete {str(ch['kind']).lower()} {ch['name']}{force}"
        verb = "upgrade --install" if ch.get("upgrade") else "install"
        flags = f" {ch['flags']}" if ch.get("flags") else ""
        return f"helm {verb} {ch['release']} {ch['chart']} -n {ch['namespace']} --create-namespace{flags}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``doctor -o json``)."""
        return {
            "id": self.id,
            "title": self.title,
            "namespace": self.namespace,
            "policy": f"{self.policy_resource}/{self.policy_name}" if self.policy_obj else None,
            "policyInferred": list(self.policy_inferred),
            "hostDriver": self.host_driver,
            "daemonsets": dict(self.daemonsets),
            "notes": list(self.notes),
        }
