"""An operand's image whose tag the registry does not have, where no policy key names it: the fix names the image
and the key (or command) that sets its tag, on whatever installed the DaemonSet.

The kubelet pulls the reference the pod spec names; a reference without a tag is pulled as ``:latest`` (the
distribution reference's default tag, which containerd's and Docker's resolvers add). A registry that has no such
tag answers MANIFEST_UNKNOWN (opencontainers/distribution-spec spec.md error codes), which the runtime quotes as
"not found" / "manifest unknown" in the kubelet's "Failed to pull image" Event, and the pod stays in
ErrImagePull/ImagePullBackOff: a restart pulls the same reference. What repairs is a reference that exists, set where
the DaemonSet comes from:

- a minikube addon (label ``kubernetes.io/minikube-addons``, beside ``addonmanager.kubernetes.io/mode: Reconcile``,
  as kubernetes/minikube deploy/addons/gpu/nvidia-driver-installer.yaml.tmpl labels it; or a node minikube labels
  ``minikube.k8s.io/*``): the
  addon's image is one of its named images, set with ``minikube addons enable <addon> --images=<name>=<image>``
  (minikube docs handbook/addons/custom-images; ``minikube addons images <addon>`` lists the names), or a minikube
  release whose addon names a published tag (kubernetes/minikube pkg/minikube/assets/addons.go);
- an addon manager's object (label ``addonmanager.kubernetes.io/mode: Reconcile``) is put back from its manifest, so the
  manifest is what changes;
- a Helm release (annotation ``meta.helm.sh/release-name``): its chart's image value, with ``helm upgrade``;
- else the DaemonSet itself (a strategic patch of the container's image).
"""

from __future__ import annotations

from gpuchain.doctor.context import Context, NodeView
from gpuchain.doctor.links.common import Known
from gpuchain.doctor.model import Fix, FixOp
from gpuchain.doctor.owners import owner_daemonset
from gpuchain.doctor.pods import PodState
from gpuchain.kube.objects import Obj, labels_of, name_of, namespace_of

#: The registry's and the runtimes' words for a reference it does not have.
MISSING = ("not found", "manifest unknown")
#: Words of a registry that refuses the caller rather than lacks the reference (Docker Hub's "pull access denied ...
#: may require 'docker login'", a 401/403): those keep the pull secret's repair.
REFUSED = ("denied", "unauthorized", "authentication required", "docker login", "forbidden")
MINIKUBE_ADDON = "kubernetes.io/minikube-addons"
MINIKUBE_NODE = "minikube.k8s.io/"
ADDON_MODE = "addonmanager.kubernetes.io/mode"
HELM_RELEASE = "meta.helm.sh/release-name"
#: The tag placeholder the fix leaves to the user: gpuchain cannot list a registry's tags.
SOME_TAG = "<a tag the registry has>"


def _repository(image: str) -> str:
    """The reference without its tag or digest."""
    last = image.rpartition("/")[2]
    if "@" in last:
        return image.rpartition("@")[0]
    return image.rpartition(":")[0] if ":" in last else image


def _declared(ds: Obj, state: PodState, image: str) -> tuple[str, str, str]:
    """(the list the container is in, its name, its image) as the DaemonSet's template names it: the container the
    pod's status is about, else the one that names the pulled image's repository."""
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    listed = [(key, c) for key in ("initContainers", "containers") for c in spec.get(key) or []]
    found = next(((k, c) for k, c in listed if c.get("name") == state.container), None)
    found = found or next(
        ((k, c) for k, c in listed if _repository(str(c.get("image", ""))) == _repository(image)), None
    )
    if found is None:
        key = "initContainers" if state.waiting_init == state.container and state.container else "containers"
        return key, state.container, ""
    return found[0], str(found[1].get("name", state.container)), str(found[1].get("image", ""))


def _untagged(image: str) -> bool:
    last = image.rpartition("/")[2]
    return bool(image) and ":" not in last and "@" not in last


def tag_gone(ctx: Context, *, view: NodeView, pod: Obj, state: PodState, image: str, said: str) -> Known | None:
    """The repair where the registry has no ``image`` (the reference the kubelet pulls) for the operand's ``pod``;
    None where the pull error does not say the reference is missing, or no DaemonSet owns the pod."""
    words = said.lower()
    if not image or not any(w in words for w in MISSING) or any(w in words for w in REFUSED):
        return None
    ds = owner_daemonset(ctx, pod)
    if not ds:
        return None
    key, container, declared = _declared(ds, state, image)
    wanted = f"{_repository(image)}:{SOME_TAG}"
    target = f"{namespace_of(ds)}/{name_of(ds)}"
    action = Fix(
        FixOp.PATCH_DAEMONSET,
        target,
        {"spec": {"template": {"spec": {key: [{"name": container, "image": wanted}]}}}},
    )
    why = (
        f"DaemonSet {target} names {declared} with no tag, so the runtime pulls {image}, which the registry does not "
        "publish"
        if _untagged(declared)
        else f"the registry has no {image}"
    )
    labels = labels_of(ds)
    addon = labels.get(MINIKUBE_ADDON, "")
    minikube = addon or any(k.startswith(MINIKUBE_NODE) for k in view.labels)
    release = str(((ds.get("metadata") or {}).get("annotations") or {}).get(HELM_RELEASE) or "")
    if minikube:
        name = addon or name_of(ds)
        how = (
            f"set the image tag of {name_of(ds)} where minikube's {name} addon names it: upgrade minikube to a "
            f"release whose addon names a published tag and re-enable the addon (minikube addons disable {name} && "
            f"minikube addons enable {name}), or minikube addons enable {name} --images=<its image name, from "
            f"minikube addons images {name}>={wanted}; a hand patch of the DaemonSet (above) lasts until the addon is "
            "enabled again"
        )
    elif labels.get(ADDON_MODE) == "Reconcile":
        how = (
            f"set the image tag of {name_of(ds)} in the addon manifest it comes from (the addon manager puts the "
            "DaemonSet back from it, so the patch above does not last)"
        )
    elif release:
        how = (
            f"set the image tag of {name_of(ds)} in Helm release {release}'s values (helm -n {namespace_of(ds)} "
            f"upgrade {release} <chart> --reuse-values --set <its image tag value>=<a tag the registry has>), so "
            "the next upgrade keeps it"
        )
    else:
        how = f"set the image tag of {name_of(ds)} to one the registry has (the patch above)"
    how += (
        "; where that tag does exist and the registry hides it from the node (a private repository that answers "
        "not found without credentials), the registry's pull secret in the DaemonSet's imagePullSecrets instead"
    )
    return Known(
        cause=f"the kubelet cannot pull the image: {why}; every restart pulls the same reference.",
        evidence=(f"image of {container} in DaemonSet {target}: {declared or image}",),
        action=action,
        fix=ctx.stack.render(action) + f"   # {how}",
    )
