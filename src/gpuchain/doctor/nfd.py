"""Node Feature Discovery's master, as the doctor reads it: NVIDIA's GFD hands its nvidia.com labels to NFD (a
features file or a NodeFeature object) and nfd-master writes them to the node, so a node without GFD's labels while
GFD runs may be nfd-master refusing them, which only its own log says ("ignoring label", catalog.yaml)."""

from __future__ import annotations

from gpuchain.kube.objects import Obj, name_of

#: The link a finding of Node Feature Discovery's is filed on: its labels are feature discovery's (the layer GFD
#: shares, whose labels nfd-master writes), whichever operand their absence keeps off the node; the walk still stops
#: at that operand's link, the finding says which.
NFD_LINK = "gfd"
#: The catalog entry of nfd-master's line for a label it drops (kubernetes-sigs/node-feature-discovery
#: pkg/nfd-master/nfd-master.go@v0.17.3).
LABEL_DENIED = "node-feature-discovery.label-denied"


def is_nfd_master(pod: Obj) -> bool:
    """A pod of NFD's master: an image of node-feature-discovery in a pod named for its master (the NFD chart's
    ``<release>-master-*`` Deployment, bundled or not by the GPU Operator's chart)."""
    containers = (pod.get("spec") or {}).get("containers") or []
    image = any("node-feature-discovery" in str(c.get("image", "")) for c in containers)
    return image and "master" in name_of(pod)


def master_containers(pods: list[Obj]) -> list[tuple[Obj, str]]:
    """Each nfd-master pod with each of its containers' names, for reading their logs."""
    return [
        (p, str(c.get("name", "")))
        for p in pods
        if is_nfd_master(p)
        for c in (p.get("spec") or {}).get("containers") or []
    ]


def is_nfd(pod: Obj) -> bool:
    """A pod of Node Feature Discovery (its master, worker or garbage collector): a node-feature-discovery image.
    A loop, not ``any`` over a generator: a diagnosis asks it of every pod once (75,000 at 10,000 nodes)."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        if "node-feature-discovery" in str(c.get("image", "")):
            return True
    return False


def nfd_containers(pods: list[Obj]) -> list[tuple[Obj, str]]:
    """Each Node Feature Discovery pod with each of its containers' names, for reading their logs."""
    return [
        (p, str(c.get("name", ""))) for p in pods if is_nfd(p) for c in (p.get("spec") or {}).get("containers") or []
    ]
