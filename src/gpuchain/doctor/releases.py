"""Operand releases with a known defect (releases.yaml), as data a finding cites to name the release to move to.

A check that sees a release's symptom (a ready plugin that keeps restarting after runs ending in error, a chart
release without the DaemonSet it should render, a message of the catalog, the MIG manager leaving a change
pending) asks which releases the components' own release notes say are broken that way; the answer names the fixed
release, so the fix is that release, not the diagnosis restated.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

SYMPTOMS = (
    "restarts",
    "no-gfd",
    "log",
    "mig-paused",
    "labels",
    "no-sys-admin",
    "probe-killed",
    "avoid",
    "no-tegra",
    "vm-unregistered",
    "vm-misnamed",
    "oom",
    "torn-down",
    "startup-taint",
    "validation",
    "sidecar-unlabelled",
)
#: image: the container image's tag carries the version; chart: helm.sh/chart of the DaemonSet; operator: the GPU
#: Operator's own release (the ClusterPolicy's Helm labels, else the operator pod's image tag), which renders every
#: operand and so carries defects no operand image has.
BY = ("image", "chart", "operator")
#: A release version as tags and charts write it (v0.7.1, 0.12.0, 1.0.0-beta6), and dcgm-exporter's
#: <DCGM version>-<exporter version> (2.4.6-2.6.8): its numbers.
VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:-(\d+)\.(\d+)\.(\d+))?")
#: Each operand image's newest release, read from its repository's tags (NVIDIA/k8s-device-plugin v0.20.0,
#: NVIDIA/gpu-feature-discovery v0.8.2 (its own image's last; GFD ships in the device plugin's image since v0.15.0),
#: NVIDIA/dcgm-exporter 4.5.3-4.8.2, NVIDIA/nvidia-container-toolkit v1.20.0, NVIDIA/mig-parted v0.15.0): the
#: release an error that no release note names is answered with, as the fixes a component ships after the one a
#: cluster runs are the repair its maintainers give first.
NEWEST = {
    "k8s-device-plugin": "v0.20.0",
    "gpu-feature-discovery": "v0.8.2",
    "dcgm-exporter": "4.5.3-4.8.2",
    "container-toolkit": "v1.20.0",
    "k8s-mig-manager": "v0.15.0",
}


@dataclass(frozen=True, kw_only=True)
class Move:
    """Where a component's releases went after its own image's last: the image that ships them since ``since``,
    and the command that runs the component in it."""

    image: str
    since: str
    command: str


#: Components whose own image ended, and the image that ships their later releases: GFD's own image ends at
#: v0.8.2 and its later releases are the device plugin's image run as /usr/bin/gpu-feature-discovery
#: (NVIDIA/k8s-device-plugin CHANGELOG.md@v0.15.0: "Import GPU Feature Discovery into the GPU Device Plugin repo.
#: This means that the same version and container image is used for both components."), which the
#: nvidia-device-plugin chart runs with gfd.enabled=true and the GPU Operator as its gfd operand.
MOVED = {
    "gpu-feature-discovery": Move(image="k8s-device-plugin", since="v0.15.0", command="/usr/bin/gpu-feature-discovery"),
}


#: A pre-release's mark right after the version's numbers (v25.3.0-rc.1, v0.7.0-rc.8, 1.0.0-beta6, v1.0.0-beta.1):
#: it comes before the release it leads to.
PRE = re.compile(r"-(?:rc|beta|alpha)\.?(\d*)(?![\w.])", re.IGNORECASE)
#: The first tags of the device plugin and of GPU feature discovery: each 1.0.0-betaN (1.0.0-beta.N) was cut with
#: v0.N.0 and is that release under its old name (NVIDIA/k8s-device-plugin tags 1.0.0-beta4 and v0.4.0, 2019-10-15;
#: 1.0.0-beta6 and v0.6.0, 2020-04-23; "1.0.0-beta" beside v0.0.0, 2019-03-15; NVIDIA/gpu-feature-discovery tags
#: 1.0.0-beta and v0.0.0 on commit 8f01957, 1.0.0-beta.1 and v0.1.0 on 4359233), and GFD's 1.0.0-alpha
#: (2019-04-29) came before them all, so they sort before v0.7.0 and v0.2.0, the first tags of the renumbered schemes.
_OLD_BETA = re.compile(r"v?1\.0\.0-(alpha|beta)\.?(\d*)$")
RENUMBERED = {"k8s-device-plugin": _OLD_BETA, "gpu-feature-discovery": _OLD_BETA}
#: Components that moved to a new name and restarted their numbering there, and the names (image, chart) of the
#: component they continue: the DRA driver for NVIDIA GPUs, whose releases up to v25.12.0 (2026-02-12) are
#: nvcr.io/nvidia/k8s-dra-driver-gpu and the chart nvidia-dra-driver-gpu, and from v0.4.0 (2026-05-15)
#: registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu and the chart dra-driver-nvidia-gpu
#: (NVIDIA/k8s-dra-driver-gpu VERSION, versions.mk REGISTRY and deployments/helm/dra-driver-nvidia-gpu/Chart.yaml
#: @v0.4.0; versions.mk and deployments/helm/nvidia-dra-driver-gpu/Chart.yaml@v25.12.0). Every release under the
#: new name comes after every release under the old, and a defect of the old name's releases holds for the new
#: name's unless a release fixed it.
RENAMED = {"dra-driver-nvidia-gpu": ("k8s-dra-driver-gpu", "nvidia-dra-driver-gpu")}
#: A precompiled driver image's tag, <driver branch>-<kernel>-<OS> (NVIDIA/gpu-operator
#: api/nvidia/v1alpha1/nvidiadriver_types.go@v26.7.0 GetPrecompiledImagePath appends "-<kernelVersion>-<osVersion>" to
#: the branch, its test expecting "driver:525-5.4.0-150-generic-ubuntu22.04"): it carries the branch only, its
#: release being that branch's newest when the image was built, so it names no release to compare.
PRECOMPILED = re.compile(r"(\d{3})-\d+\.\d+\.\d+-")


@functools.total_ordering
@dataclass(frozen=True, kw_only=True)
class Release:
    """A release's place in its component's order: its numbers, dcgm-exporter's own release where the tag is
    <DCGM>-<exporter> (4.5.3-4.8.2: DCGM 4.5.3, exporter 4.8.2; its chart's version is the exporter's alone, 4.8.2),
    and its pre-release rank (a release candidate comes before its release: v25.3.0-rc.5 < v25.3.0)."""

    numbers: tuple[int, ...]
    exporter: tuple[int, ...] = ()
    stage: tuple[int, int] = (1, 0)
    era: int = 0  #: 1 under the name a component moved to (`RENAMED`), whose numbering restarted

    def _keys(self, other: Release) -> tuple[tuple[object, ...], tuple[object, ...]]:
        """The keys the two compare by: a <DCGM>-<exporter> tag against a version of the exporter alone compares by
        the exporter's release (the chart's and the image's numbers name one release); else by all numbers."""
        if bool(self.exporter) != bool(other.exporter):
            return (self.era, self.exporter or self.numbers, self.stage), (
                other.era,
                other.exporter or other.numbers,
                other.stage,
            )
        return (self.era, self.numbers, self.stage), (other.era, other.numbers, other.stage)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Release):
            return NotImplemented
        mine, theirs = self._keys(other)
        return mine < theirs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Release):
            return NotImplemented
        mine, theirs = self._keys(other)
        return mine == theirs

    def __hash__(self) -> int:
        return hash((self.era, self.exporter or self.numbers, self.stage))


def release_of(text: str, component: str = "") -> Release | None:
    """Where ``text`` (a tag or chart version of ``component``) sorts among its component's releases: "v25.3.0-rc.1"
    before "v25.3.0" before "v25.8.0", "1.0.0-beta6" of the device plugin as v0.6.0, "3.3.9-3.6.1-ubuntu22.04" of
    dcgm-exporter before "4.0.0-4.0.1" and as its chart "3.6.1"; None if it names no release ("latest", a
    precompiled driver's branch tag)."""
    renumbered = RENUMBERED.get(component)
    old = renumbered.match(text) if renumbered else None
    if old is not None:
        alpha = old.group(1) == "alpha"
        return Release(numbers=(0, 0 if alpha else int(old.group(2) or 0), 0), stage=(0, 0) if alpha else (1, 0))
    if PRECOMPILED.match(text):
        return None
    found, numbers = VERSION.match(text), version_of(text)
    if found is None or numbers is None:
        return None
    pre = PRE.match(text, found.end())
    stage = (0, int(pre.group(1) or 0)) if pre else (1, 0)
    exporter = numbers[3:] if len(numbers) == 6 else ()
    return Release(numbers=numbers, exporter=exporter, stage=stage, era=int(component in RENAMED))


def lineage(name: str) -> tuple[str, ...]:
    """The component names whose defects hold for a release of ``name``: its own, and the names it continues where
    it moved (`RENAMED`)."""
    return (name, *RENAMED.get(name, ()))


def version_of(text: str) -> tuple[int, ...] | None:
    """The numbers of a release version ("v0.7.1" (0, 7, 1), "0.12" (0, 12, 0), "v0.17.0-ubi9" (0, 17, 0),
    "2.4.6-2.6.8-ubuntu20.04" (2, 4, 6, 2, 6, 8)); None if it is none."""
    found = VERSION.match(text)
    if found is None:
        return None
    head = (int(found.group(1)), int(found.group(2)), int(found.group(3) or 0))
    return head + tuple(int(g) for g in found.groups()[3:] if g is not None)


@dataclass(frozen=True, kw_only=True)
class Defect:
    """One release range of one component with a known defect, and the release that fixed it."""

    id: str
    component: str
    by: str
    affected: tuple[str, str]  #: [first affected, first fixed)
    symptom: str
    cause: str
    source: str
    line: str
    title: str = ""  #: how a fix names the component (the component's own name when empty)
    entries: tuple[str, ...] = ()  #: for symptom log: the catalog entries whose message shows it
    last_good: str = ""  #: the release before the first affected, to move back to
    #: for symptom labels: the node labels it writes wrongly, each a regex its value fully matches
    labels: tuple[tuple[str, str], ...] = ()
    #: the release notes' documented workaround for it, with its exact key or command (a known issue's
    #: "To work around this issue, ..."), the repair until the fixed release runs; the only one where none is fixed
    workaround: str = ""
    #: for symptoms probe-killed (by the operator) and oom: the containers it shows in, a regex the container's name
    #: fully matches
    container: str = ""
    #: the fewest replicas of the pod's role it shows under, where the release note ties it to replicas beside a
    #: leader (a leak of non-leaders: a lone replica is always the leader); 0 where any number shows it
    replicas: int = 0
    #: the ClusterPolicy settings it shows under (dotted spec path: value), where the release note names a
    #: configuration only; a cluster whose policy says otherwise does not have it
    policy: tuple[tuple[str, object], ...] = ()
    #: [first, first not) driver releases it shows under, where the release notes tie it to a driver branch (a
    #: release that does not support the branch's device names); () where any driver shows it
    driver: tuple[str, ...] = ()
    #: (runtime, first, first not) container runtime releases it shows under, where the release notes tie it to
    #: them (the node's containerRuntimeVersion, "containerd://1.6.9"); () where any runtime shows it
    runtime: tuple[str, ...] = ()

    @property
    def fixed_in(self) -> str:
        """The release that fixed it ("" where the release notes name none yet: an open known issue)."""
        return self.affected[1]

    @property
    def name(self) -> str:
        """The component as a fix names it."""
        return self.title or self.component

    def covers(self, version: str, name: str = "") -> bool:
        """Is ``version`` (of ``name``: the component's own name where empty, or one that continues it, `RENAMED`)
        one this defect affects, in its component's release order (`release_of`)?"""
        seen, low = release_of(version, name or self.component), release_of(self.affected[0], self.component)
        high = release_of(self.affected[1], self.component)
        if seen is None or low is None:
            return False
        if high is None:
            return low <= seen and not self.fixed_in
        return low <= seen < high

    def shows(self, labels: dict[str, str]) -> bool:
        """Do a node's ``labels`` carry this defect's label state (every label it names, its value matching)?"""
        return bool(self.labels) and all(
            key in labels and re.fullmatch(value, str(labels[key])) for key, value in self.labels
        )

    def kills(self, container: str) -> bool:
        """Is ``container`` one this probe-killed defect names (every container where it names none)?"""
        return not self.container or re.fullmatch(self.container, container) is not None

    def holds(self, policy: dict[str, Any] | None) -> bool:
        """Does ``policy`` (a ClusterPolicy object; None: none runs) carry every setting this defect shows under?"""
        for path, value in self.policy:
            node: Any = policy or {}
            for key in path.split("."):
                node = node.get(key) if isinstance(node, dict) else None
            if node != value:
                return False
        return True

    def under(self, driver: tuple[int, ...] | None) -> bool:
        """Does it show under a node whose driver release is ``driver`` (None: not known)? Any driver where it
        names no driver range; where it names one, only a known release inside it."""
        if not self.driver:
            return True
        low, high = version_of(self.driver[0]), version_of(self.driver[1]) if self.driver[1] else None
        return driver is not None and low is not None and low <= driver and (high is None or driver < high)

    def runs_under(self, runtime: str) -> bool:
        """Does it show under a node whose container runtime is ``runtime`` (its containerRuntimeVersion,
        "containerd://1.6.12"; "" not known)? Any runtime where it names none; where it names one, only that runtime
        at a known release inside its range."""
        if not self.runtime:
            return True
        name, _, version = runtime.partition("://")
        seen, low = version_of(version), version_of(self.runtime[1])
        high = version_of(self.runtime[2]) if self.runtime[2] else None
        if name != self.runtime[0] or seen is None or low is None:
            return False
        return low <= seen and (high is None or seen < high)

    def cite(self) -> str:
        """The evidence line a finding carries for this entry."""
        return f"release: {self.id} ({self.source})"


def _defect(raw: dict[str, Any]) -> Defect:
    found = Defect(
        **{
            **raw,
            "affected": (str(raw["affected"][0]), str(raw["affected"][1] or "")),
            "entries": tuple(raw.get("entries") or ()),
            "labels": tuple((str(k), str(v)) for k, v in (raw.get("labels") or {}).items()),
            "policy": tuple((str(k), v) for k, v in (raw.get("policy") or {}).items()),
            "driver": (str(raw["driver"][0]), str(raw["driver"][1] or "")) if raw.get("driver") else (),
            "runtime": tuple(str(v or "") for v in raw["runtime"]) if raw.get("runtime") else (),
        }
    )
    if found.symptom not in SYMPTOMS or found.by not in BY or not found.covers(found.affected[0]):
        raise ValueError(f"release entry {found.id}: symptom, by or affected range is not one gpuchain reads")
    if (found.symptom in ("log", "validation")) != bool(found.entries):
        raise ValueError(
            f"release entry {found.id}: a log or validation symptom names its catalog entries, no other does"
        )
    if (found.symptom == "labels") != bool(found.labels):
        raise ValueError(f"release entry {found.id}: a labels symptom names the labels it writes, no other does")
    if not found.fixed_in and not found.workaround:
        raise ValueError(f"release entry {found.id}: a defect no release fixed names its documented workaround")
    return found


@functools.cache
def defects() -> tuple[Defect, ...]:
    """Every entry of releases.yaml."""
    text = resources.files("gpuchain.doctor").joinpath("releases.yaml").read_text()
    return tuple(_defect(raw) for raw in yaml.safe_load(text))


@functools.lru_cache(maxsize=4096)
def defect(component: str, version: str, symptom: str) -> Defect | None:
    """The known defect of ``component`` at ``version`` that shows as ``symptom`` (None: none is known). Remembered:
    a diagnosis asks it of each node's operands, which run the same few releases, and each answer walks every entry."""
    return next(
        (
            d
            for d in defects()
            if d.component in lineage(component) and d.symptom == symptom and d.covers(version, component)
        ),
        None,
    )


def showing(symptom: str, entry: str = "") -> tuple[Defect, ...]:
    """The defects that show as ``symptom`` (for ``log``, as the message of catalog entry ``entry``), at any
    release: which of them a cluster runs is for its image tag or chart version to say."""
    return tuple(d for d in defects() if d.symptom == symptom and (not entry or entry in d.entries))


def image_version(image: str) -> tuple[str, str]:
    """An image reference's name (its repository's last part) and tag ("latest" when it has none)."""
    name, _, tag = image.rpartition("/")[2].partition(":")
    return name, tag or "latest"


def fixed_image(image: str, found: Defect) -> str:
    """``image`` at the release that fixed ``found``, its tag's suffix kept (the OS of
    "v1.14.5-ubuntu20.04" or "2.4.6-2.6.8-ubuntu20.04")."""
    return _at(image, found.fixed_in)


def newer_image(image: str) -> str | None:
    """``image`` at its component's newest release (`NEWEST`), its tag's suffix kept; None where the component has
    none known, or its tag names no release ("latest", a digest) or one not older than the newest."""
    name, tag = image_version(image)
    newest, running = NEWEST.get(name), release_of(tag, name)
    if newest is None or running is None or running >= (release_of(newest, name) or running):
        return None
    return _at(image, newest)


def moved_image(image: str) -> tuple[str, Move] | None:
    """``image`` moved to the image that ships its component's releases after its own image's last (`MOVED`), at
    that image's newest release (the registry path kept, the tag's suffix dropped: the two images' suffixes
    differ), with the move; None where the component's image did not end or ``image`` runs an older release than
    its own image's last (that release is the nearer move)."""
    name, tag = image_version(image)
    move, running, last = MOVED.get(name), release_of(tag, name), release_of(NEWEST.get(name, ""), name)
    if move is None or running is None or last is None or running < last:
        return None
    return f"{image.rpartition('/')[0]}/{move.image}:{NEWEST[move.image]}".lstrip("/"), move


def _at(image: str, release: str) -> str:
    """``image`` with its tag's release replaced by ``release``, the tag's suffix kept (its OS, not a pre-release
    mark: v0.20.0 for 1.0.0-beta6, v25.8.0 for v25.3.0-rc.1)."""
    repo, _, tag = image.rpartition(":") if ":" in image.rpartition("/")[2] else (image, "", "")
    current = VERSION.match(tag)
    pre = PRE.match(tag, current.end()) if current else None
    suffix = tag[(pre or current).end() :] if current else ""
    return f"{repo}:{release}{suffix}"
