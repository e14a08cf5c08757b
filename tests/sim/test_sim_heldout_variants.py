"""Each held-out case diagnosed from a dump of its cluster (`sim.heldout.variants`), beside the live answer.

gpuchain's own dump (``gpuchain doctor dump``) carries what the live doctor reads, so from it every case must be
answered exactly as live. A plain ``kubectl cluster-info dump`` lacks the ClusterPolicy, NVIDIADriver, RuntimeClass,
ResourceSlice and ConfigMap listings and every previous run's log, so some answers differ; ``KUBECTL_DIFFERS`` names
each case whose answer differs and what differs (``root``: its root link or nodes; ``fix``: the root is right and the
repairing fix is lost; ``healthy``: a healthy case's error findings come or go). It is the open work of answering a
user's kubectl dump as well as the live cluster: a new difference fails here, and so does one that is gone, so the
entry is removed when the doctor learns to answer without the listing.
"""

from __future__ import annotations

import pytest
from sim.heldout import variants

#: Case -> what a plain kubectl dump of it changes in the doctor's answer (see the module's docstring).
#: Why, as found when the list was last cut: h19-13's toolkit env names CONTAINERD_CONFIG and CONTAINERD_SOCKET, which
#: NVIDIA's operator also writes itself, so the policy read back from the toolkit DaemonSet cannot tell the user's
#: from the operator's; h33-02's fix differs only by the note that the ClusterPolicy's name is a guess. Only a
#: listing a kubectl dump lacks tells h9-05 (ResourceSlices), h39-07 (the plugin's ConfigMap: no GFD sharing label, no
#: "Running with config:" line in the simulated plugin log) and h40-05's second fault (the plugin's ConfigMap).
#: h8-18's live answer is the wrong one (a false error with no ResourceSlice at all).
KUBECTL_DIFFERS = {
    "h8-18-healthy-dra-gpus-plugin-device-plugin-off": "healthy",
    "h9-05-dra-empty-resourceslice-gke-cos": "root",
    "h19-13-k0s-operator-249-toolkit-config-dump": "fix",
    "h33-02-gke-operator-driver-install-dir-override-loops": "fix",
    "h39-07-two-faults-k3s-runtime-unwired-and-t4-vram-hog": "root",
    "h40-05-two-faults-openshift-plugin-validation-and-rename": "fix",
}


def _differs(live: tuple[bool, bool | None], got: tuple[bool, bool | None], healthy: bool) -> str | None:
    if got == live:
        return None
    return "healthy" if healthy else ("root" if got[0] != live[0] else "fix")


@pytest.mark.parametrize("directory", variants.sets(), ids=lambda d: d.name)
def test_a_dump_is_answered_as_the_live_cluster(directory):
    rows = list(variants.rows([directory]))
    assert rows, f"{directory}: no case"
    gpuchain = {r.case: r.variants["gpuchain"] for r in rows if r.variants["gpuchain"] != r.live}
    assert not gpuchain, f"gpuchain's dump answers otherwise than live (root right, fix right): {gpuchain}"
    kubectl = {r.case: what for r in rows if (what := _differs(r.live, r.variants["kubectl"], r.healthy)) is not None}
    known = {r.case: KUBECTL_DIFFERS[r.case] for r in rows if r.case in KUBECTL_DIFFERS}
    assert kubectl == known, (
        "a kubectl dump's answers changed; new differences are defects to fix, and a difference that is gone "
        f"leaves KUBECTL_DIFFERS: now {kubectl}, listed {known}"
    )


def test_every_listed_case_exists():
    names = {p.stem for d in variants.sets() for p in d.glob("*.yaml")}
    assert set(KUBECTL_DIFFERS) <= names, set(KUBECTL_DIFFERS) - names


@pytest.mark.parametrize("variant", sorted(variants.STRIPPED))
def test_a_stripped_variant_reads_back_a_kubectl_dump_without_its_events_or_logs(variant, monkeypatch):
    seen = []

    def diagnose(snapshot):
        seen.append(snapshot)
        return real(snapshot)

    real = variants.diagnose
    monkeypatch.setattr(variants, "diagnose", diagnose)
    path = next(p for p in variants.sets(["heldout4"])[0].glob("h4-13-*.yaml"))
    case = variants.loader(path.parent)(path)
    variants.via_dump(case, variant)
    (snapshot,) = seen
    assert "clusterpolicies" in snapshot.absent
    logs = [text for text in snapshot.logs.values() if text.strip()]
    if variant == "kubectl-noevents":
        assert not snapshot.events and logs
    else:
        assert snapshot.events and not logs
