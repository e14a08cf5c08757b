"""The nvidia runtime on k3s and RKE2: configured by the distribution, never its default, so a device plugin that asks
for no RuntimeClass runs without it.

k3s and RKE2 write their containerd's config themselves at every start (config.toml under the agent's data dir) and
add a runtime named ``nvidia`` to it when they find nvidia-container-runtime on the node, in the GPU Operator's
/usr/local/nvidia/toolkit or the package's /usr/bin (k3s-io/k3s pkg/agent/containerd/runtimes.go,
findNvidiaContainerRuntimes) -- but as one runtime among others, not the default. ``nvidia-ctk runtime configure`` then
edits /etc/containerd/config.toml, which their containerd never reads, and an edit of the generated config.toml is lost
at the next start. What makes a pod run under it there is the pod's ``runtimeClassName: nvidia`` (k3s creates the
RuntimeClass since k3s-io/k3s#8751; NVIDIA's device plugin chart has the value ``runtimeClassName``) or the agent's
``--default-runtime`` option (``default-runtime: nvidia`` in its config.yaml, as a k3s maintainer answers in
k3s-io/k3s#9702).
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Result, node_finding
from gpuchain.doctor.model import Fix, FixOp, LinkState, Severity
from gpuchain.doctor.node import KUBEADM, distribution_of, runtime_scheme, runtime_version
from gpuchain.doctor.owners import owner_ds, toolkit_env
from gpuchain.doctor.unclassed import toolkit_not_default
from gpuchain.kube.objects import Obj, namespace_of
from gpuchain.operator.operands import DEVICE_PLUGIN, TOOLKIT

#: The runtime handler k3s and RKE2 name the nvidia-container-runtime they find, and the RuntimeClass for it.
NVIDIA = "nvidia"


def distribution_default(ctx: Context, *, view: NodeView, evidence: list[str]) -> Result | None:
    """The toolkit link broken under a device plugin that got no NVML on a k3s or RKE2 node, with the repair that
    holds there: the plugin's DaemonSet asks for RuntimeClass nvidia (created where the cluster lacks it), or the
    agent makes nvidia its default runtime. None on other distributions, or where the plugin already names a
    RuntimeClass (then the handler behind it is what fails, read elsewhere)."""
    dist = distribution_of(view.node)
    plugin = view.pod(DEVICE_PLUGIN)
    # k3s and RKE2 run with --docker hand pods to Docker, whose own default runtime is what the plugin gets.
    docker = runtime_scheme(view.node) == "docker"
    if dist is KUBEADM or docker or plugin is None or (plugin.get("spec") or {}).get("runtimeClassName"):
        return None
    ds = owner_ds(plugin)
    if not ds:
        return None
    action = Fix(
        FixOp.PATCH_DAEMONSET,
        f"{namespace_of(plugin) or ctx.namespace}/{ds}",
        {"spec": {"template": {"spec": {"runtimeClassName": NVIDIA}}}},
    )
    missing = NVIDIA not in ctx.runtime_classes and "runtimeclasses" not in ctx.snapshot.absent
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": NVIDIA}}
    create = ctx.stack.render(Fix(FixOp.CREATE, "", {**runtime_class, "handler": NVIDIA})) + " && " if missing else ""
    config = f"/etc/rancher/{dist.name}/config.yaml"
    return Result(
        LinkState.BROKEN,
        f"{dist.name}'s containerd runs the device plugin without the nvidia runtime",
        (
            node_finding(
                view,
                fid="toolkit.runtime-not-default",
                sev=Severity.ERROR,
                link="toolkit",
                cause=f"the device plugin runs without the NVIDIA container runtime: {dist.name} configures containerd "
                "itself and adds the nvidia runtime it finds on the node, but not as the default, and the plugin's pod "
                "asks for no RuntimeClass, so libnvidia-ml is not in its container, it finds no GPU and announces "
                "nothing to the kubelet: the runtime link, under the plugin.",
                evidence=[*evidence, f"node runs {dist.name} (its containerd config {dist.containerd_config})"],
                fix=create
                + ctx.stack.render(action)
                + f"   # or the plugin chart's value {ctx.stack.runtime_class_value}={NVIDIA}; or make nvidia "
                f"{dist.name}'s default runtime: default-runtime: {NVIDIA} in {config} (the agent's "
                f"--default-runtime={NVIDIA}), then "
                f"systemctl restart {dist.name if dist.name == 'k3s' else 'rke2-agent'} -- not nvidia-ctk on "
                "/etc/containerd/config.toml, which its containerd does not read",
                action=action,
            ),
        ),
    )


#: How a node whose kubelet runs pods through Docker (containerRuntimeVersion docker://: dockershim, cri-dockerd, k3s
#: or RKE2 with --docker) makes nvidia its default runtime: Docker's own "default-runtime" in /etc/docker/daemon.json,
#: which nvidia-ctk writes from the toolkit's v1.11.0 (NVIDIA/nvidia-container-toolkit CHANGELOG.md@v1.11.0: "Add
#: `nvidia-ctk runtime configure` command to configure the Docker config file (e.g. `/etc/docker/daemon.json`)";
#: cmd/nvidia-ctk/runtime/configure/configure.go@v1.12.0 --set-as-default), and older toolkits with the
#: nvidia-container-runtime that the nvidia-docker2 package registers there. containerd's config is not Docker's.
DOCKER_DEFAULT = (
    "nvidia-ctk runtime configure --runtime=docker --set-as-default && systemctl restart docker (it sets "
    '"default-runtime": "nvidia" in /etc/docker/daemon.json; with a toolkit before v1.11.0, install nvidia-docker2 '
    "and set that key by hand)"
)


def docker_setup(node: Obj) -> str:
    """The command that makes nvidia the default runtime of a node that runs pods through Docker; "" on others."""
    return DOCKER_DEFAULT if runtime_scheme(node) == "docker" else ""


#: The containerd releases whose CRI plugin picks its default runtime by ``default_runtime_name`` (added in 1.3.0) and
#: read a ``version = 2`` config, up to 2.0, which reads version 3 (plugin io.containerd.cri.v1.runtime) and no
#: version 1 at all.
NAMED_DEFAULT = ((1, 3, 0), (2, 0, 0))


def config_version_note(node: Obj) -> str:
    """Where a containerd 1.3 to 1.7 takes its default runtime from, for a fix that makes nvidia the default: the
    ``default_runtime_name`` of its version 2 config, which ``nvidia-ctk runtime configure`` writes. A version-1 config
    (no ``version`` line, ``[plugins.cri.containerd.default_runtime]``, the form containerd 1.2 read and older guides
    show) is not honoured as the default there (containerd/containerd#3843, #5042: the reporters' GPU pods ran under
    runc until the runtime was named in the version 2 form). "" on other runtimes and releases."""
    version = runtime_version(node)
    if runtime_scheme(node) != "containerd" or version is None or not NAMED_DEFAULT[0] <= version < NAMED_DEFAULT[1]:
        return ""
    shown = ".".join(str(n) for n in version)
    return (
        f'; containerd {shown} takes its default runtime from default_runtime_name = "nvidia" under '
        '[plugins."io.containerd.grpc.v1.cri".containerd] of a version = 2 config (the form nvidia-ctk writes): a '
        "version-1 config's [plugins.cri.containerd.default_runtime] section, as containerd 1.2 read it, does not "
        "make nvidia its default: where the file has no version = 2 line, write it again from containerd config "
        "default (a version 2 file) before nvidia-ctk adds the runtime"
    )


#: The file k3s and RKE2 render their containerd's config.toml from at every start, beside it, when it exists
#: (docs.k3s.io advanced "Configuring containerd"; docs.rke2.io advanced "Configuring containerd").
TEMPLATE_SUFFIX = ".tmpl"


def regenerated_config(ctx: Context, *, view: NodeView, toolkit: Obj | None) -> tuple[Fix, str, str] | None:
    """The repair where the operator's toolkit writes the nvidia runtime (as the default) into the config.toml k3s or
    RKE2 render again at every start: the runtime it set as the default is gone after their next restart (they add
    an ``nvidia`` runtime of their own, never as the default), so GPU pods that ask for no RuntimeClass get no
    driver. The toolkit's CONTAINERD_CONFIG pointed at the template they render from keeps it (the template must be
    plain TOML: `toolkit_template`). The fix, its text, and the evidence line; None on other distributions, without
    an operator's policy, or where the toolkit is not pointed at the rendered file."""
    dist = distribution_of(view.node)
    if dist is KUBEADM or ctx.policy_obj is None:
        return None
    env = {e.name: e.value for e in ctx.policy.toolkit.env}
    if env.get("CONTAINERD_CONFIG") != dist.containerd_config:
        return None
    template = dist.containerd_config + TEMPLATE_SUFFIX
    action = toolkit_env(ctx, pod=toolkit, values={"CONTAINERD_CONFIG": template})
    why = (
        f"   # {dist.name} renders {dist.containerd_config} again from its template at every start, dropping the "
        f"nvidia default runtime the toolkit wrote there: point the toolkit at the containerd template "
        f"{template} (plain TOML, no {{{{ }}}} expressions), then {dist.restart}; or give the GPU pods "
        f"runtimeClassName: {NVIDIA}"
    )
    return action, why, f"toolkit env CONTAINERD_CONFIG={dist.containerd_config} on {dist.name}"


def distribution_default_runtime(node: Obj) -> str:
    """How a k3s or RKE2 node makes nvidia its containerd's default runtime, so GPU pods that name no RuntimeClass get
    the driver: the agent's ``default-runtime`` option, or ``default_runtime_name`` in the template its config.toml is
    rendered from (an edit of config.toml itself, or nvidia-ctk on /etc/containerd/config.toml, is not read or is
    lost at its next start). "" on other distributions, and where pods reach Docker (its own default runtime)."""
    dist = distribution_of(node)
    if dist is KUBEADM or runtime_scheme(node) == "docker":
        return ""
    return (
        f"make nvidia {dist.name}'s containerd default runtime: default-runtime: {NVIDIA} in /etc/rancher/{dist.name}/"
        f'config.yaml (the agent\'s --default-runtime={NVIDIA}), or default_runtime_name = "{NVIDIA}" under '
        f'[plugins."io.containerd.grpc.v1.cri".containerd] in {dist.containerd_config}{TEMPLATE_SUFFIX}, then '
        f"{dist.restart}"
    )


def keeps_runc_default(ctx: Context, *, view: NodeView) -> bool:
    """Does the node's containerd most likely keep runc its default runtime: a k3s or RKE2 node (they add the nvidia
    runtime, never as the default, unless told) whose GPU Operator's toolkit, where there is one, is not pointed at
    the template its config is rendered from (the one place a default the toolkit writes lasts there)? Then what CUDA
    says in a pod that names no RuntimeClass is what it says with no driver library (cudaErrorInsufficientDriver with
    no libcuda), not a driver too old."""
    if toolkit_kept_off(ctx):
        return True  # the toolkit is told not to make nvidia the default, on any distribution
    if not distribution_default_runtime(view.node):
        return False
    if ctx.policy_obj is None:
        return True
    env = {e.name: e.value for e in ctx.policy.toolkit.env}
    return not str(env.get("CONTAINERD_CONFIG") or "").endswith(TEMPLATE_SUFFIX)


def toolkit_kept_off(ctx: Context) -> str:
    """``NAME=value`` of the stack's toolkit env that keeps nvidia from being the runtime's default
    (`unclassed.toolkit_not_default`), "" where the toolkit makes it the default or no policy sets its env."""
    if ctx.policy_obj is None:
        return ""
    return toolkit_not_default({e.name: str(e.value) for e in ctx.policy.toolkit.env})


def toolkit_default_fix(ctx: Context, *, view: NodeView) -> str:
    """Where the stack's toolkit is told not to make nvidia the default runtime, the change of that setting that makes
    it the default on every node the toolkit configures (its env variable set true); "" elsewhere."""
    said = toolkit_kept_off(ctx)
    if not said:
        return ""
    name = said.partition("=")[0]
    action = toolkit_env(ctx, pod=view.pod(TOOLKIT), values={name: "true"})
    return (
        f"make nvidia the default runtime through the toolkit, which is told not to ({said}): "
        f"{ctx.stack.render(action)}"
    )
