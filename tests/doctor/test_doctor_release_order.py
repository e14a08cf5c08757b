"""Release order across the operands' real tag schemes (releases.release_of), so a defect's affected range and the
newest release hold for every tag a cluster can run.

Tags read from the repositories' own tag lists (git for-each-ref --sort=creatordate):
NVIDIA/k8s-dra-driver-gpu v25.3.0-rc.1 (2025-03-11) .. v25.3.0-rc.5, v25.3.0, v25.3.1, v25.3.2, v25.8.0, v25.8.1,
v25.12.0 (2026-02-12: nvcr.io/nvidia/k8s-dra-driver-gpu, chart nvidia-dra-driver-gpu), then v0.4.0-rc.1 and v0.4.0
(2026-05-15: registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu, chart dra-driver-nvidia-gpu, VERSION and
deployments/helm/dra-driver-nvidia-gpu/Chart.yaml@v0.4.0); NVIDIA/dcgm-exporter 2.3.6-2.6.6 (2022-05-20),
2.4.5-2.3.6 and 2.4.5-2.6.7 (both 2022-06-07), 3.3.9-3.6.1 (2024-11-18), 4.0.0-4.0.1 (2025-01-07), 4.5.3-4.8.2, its
chart deployment/Chart.yaml@4.5.3-4.8.2 version "4.8.2"; NVIDIA/k8s-device-plugin 1.0.0-beta4 and v0.4.0
(2019-10-15), 1.0.0-beta6 and v0.6.0 (2020-04-23), v0.7.0-rc.1 (2020-06-25); driver image tags
nvcr.io/nvidia/driver:570.133.20-ubuntu22.04 and the precompiled 525-5.4.0-150-generic-ubuntu22.04
(NVIDIA/gpu-operator api/nvidia/v1alpha1/nvidiadriver_types_test.go@v26.7.0).
"""

from __future__ import annotations

import itertools

import pytest

from gpuchain.doctor.releases import Defect, fixed_image, lineage, newer_image, release_of

OLD_DRA = ["v25.3.0-rc.1", "v25.3.0-rc.5", "v25.3.0", "v25.3.1", "v25.3.2", "v25.8.0", "v25.8.1", "v25.12.0"]
NEW_DRA = ["v0.4.0-rc.1", "v0.4.0", "v0.5.0"]
EXPORTER = ["2.3.6-2.6.6", "2.4.5-2.3.6", "2.4.5-2.6.7", "3.3.9-3.6.1-ubuntu22.04", "4.0.0-4.0.1", "4.5.3-4.8.2"]
#: NVIDIA/gpu-feature-discovery tags by date: 1.0.0-alpha (2019-04-29), v0.0.0 and 1.0.0-beta (2019-08-28, one
#: commit), 1.0.0-beta.1 and v0.1.0 (2020-05-06, one commit), v0.2.0-rc.1 (2020-07-14), v0.8.2.
GFD = ["1.0.0-alpha", "1.0.0-beta", "v0.0.0", "1.0.0-beta.1", "v0.1.0", "v0.2.0-rc.1", "v0.8.2"]
PLUGIN = ["1.0.0-beta4", "v0.4.0-ubi8", "1.0.0-beta6", "v0.7.0-rc.1", "v0.7.0", "v0.17.0-ubi9"]


@pytest.mark.parametrize(
    ("components", "tags"),
    [
        (["k8s-dra-driver-gpu"] * len(OLD_DRA) + ["dra-driver-nvidia-gpu"] * len(NEW_DRA), OLD_DRA + NEW_DRA),
        (["nvidia-dra-driver-gpu"] * len(OLD_DRA) + ["dra-driver-nvidia-gpu"] * len(NEW_DRA), OLD_DRA + NEW_DRA),
        (["dcgm-exporter"] * len(EXPORTER), EXPORTER),
        (["k8s-device-plugin"] * len(PLUGIN), PLUGIN),
        (["gpu-feature-discovery"] * len(GFD), GFD),
    ],
)
def test_tags_sort_in_the_order_they_were_released(components: list[str], tags: list[str]) -> None:
    releases = [release_of(t, c) for t, c in zip(tags, components, strict=True)]
    assert all(r is not None for r in releases)
    assert all(a <= b for a, b in itertools.pairwise(releases)), tags  # type: ignore[operator]
    assert release_of("v25.3.0-rc.5") < release_of("v25.3.0")  # type: ignore[operator]
    assert release_of("v25.12.0", "k8s-dra-driver-gpu") < release_of("v0.4.0-rc.1", "dra-driver-nvidia-gpu")  # type: ignore[operator]


def test_a_beta_tag_of_the_plugin_is_its_v0_release_and_elsewhere_a_pre_release() -> None:
    assert release_of("1.0.0-beta6", "k8s-device-plugin") == release_of("v0.6.0")
    assert release_of("1.0.0-beta.1", "gpu-feature-discovery") == release_of("v0.1.0")
    assert release_of("v1.0.0-beta.1") < release_of("v1.0.0")  # type: ignore[operator]
    assert release_of("1.0.0-beta6") > release_of("v0.7.0")  # type: ignore[operator]


def test_an_exporter_tag_compares_with_its_chart_version_by_the_exporter_release() -> None:
    assert release_of("3.3.9-3.6.1-ubuntu22.04") == release_of("3.6.1")
    assert release_of("4.5.3-4.8.2") > release_of("4.8.1")  # type: ignore[operator]
    assert release_of("4.0.0-4.0.1") < release_of("4.1.0")  # type: ignore[operator]


def _defect(component: str, affected: tuple[str, str]) -> Defect:
    return Defect(
        id="x.y", component=component, by="image", affected=affected, symptom="restarts", cause="", source="", line=""
    )


def test_a_range_holds_across_a_renumbering_and_release_candidates() -> None:
    fixed = _defect("k8s-dra-driver-gpu", ("v25.3.0", "v25.12.0"))
    assert fixed.covers("v25.8.1") and not fixed.covers("v25.3.0-rc.2") and not fixed.covers("v25.12.0")
    # The renamed image's v0.4.0 came after v25.12.0: a fixed defect does not hold for it, an open one does.
    assert not fixed.covers("v0.4.0", "dra-driver-nvidia-gpu")
    open_issue = _defect("k8s-dra-driver-gpu", ("v25.8.0", ""))
    assert open_issue.covers("v0.4.0", "dra-driver-nvidia-gpu") and not open_issue.covers("v25.3.2")
    assert "k8s-dra-driver-gpu" in lineage("dra-driver-nvidia-gpu") and lineage("dcgm-exporter") == ("dcgm-exporter",)
    exporter = _defect("dcgm-exporter", ("3.3.5-3.4.0", "3.3.9-3.6.1"))
    assert exporter.covers("3.3.8-3.6.0-ubuntu22.04") and exporter.covers("3.5.0")
    assert not exporter.covers("3.3.9-3.6.1-ubi9") and not exporter.covers("4.0.0-4.0.1-ubuntu22.04")


def test_driver_images_keep_their_os_and_a_precompiled_tag_names_no_release() -> None:
    driver = _defect("driver", ("570.0.0", "570.172.08"))
    assert driver.covers("570.133.20-ubuntu22.04") and not driver.covers("570.172.08-ubuntu22.04")
    assert fixed_image("nvcr.io/nvidia/driver:570.133.20-ubuntu22.04", driver) == (
        "nvcr.io/nvidia/driver:570.172.08-ubuntu22.04"
    )
    assert release_of("525-5.4.0-150-generic-ubuntu22.04") is None
    assert not driver.covers("570-5.15.0-1048-nvidia-ubuntu22.04")


def test_the_newest_release_is_not_offered_to_a_release_candidate_of_a_later_one() -> None:
    assert newer_image("nvcr.io/nvidia/k8s-device-plugin:1.0.0-beta6") == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    assert newer_image("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04") is None
    assert newer_image("nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04") == (
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-ubuntu22.04"
    )
