"""A GPU pod whose codec cannot load a driver library of a capability its container does not ask for: the NVIDIA
runtime injects only the libraries of NVIDIA_DRIVER_CAPABILITIES (utility,compute where unset), and libnvcuvid and
libnvidia-encode are the video capability's (NVIDIA/nvidia-container-toolkit internal/config/image/capabilities.go;
libnvidia-container src/nvc_info.c). FFmpeg's words: "Cannot load %s" (FFmpeg compat/cuda/dynlink_loader.h). The pod
runs ready; the doctor's probe of a ready GPU pod reads it, and the fix sets the variable on the owner's template.
"""

from __future__ import annotations

from typing import Any

from doctor.small_cluster import diagnosed
from doctor.test_unallocated_gpu_pods import _logs, _pod

from gpuchain.doctor.links.driver_caps import missing_capability
from gpuchain.doctor.model import Severity
from gpuchain.kube import POD
from gpuchain.sim.build import SimCluster

SCENARIO = (
    "name: t\nstack: gpu-operator\nnodes:\n  - {name: media-2, preset: t4-x4}\n"
    "workloads:\n  - {name: transcode, namespace: video, count: 2, gpus: 1, node: media-2}\n"
)
ENCODE_FAILED = (
    "ffmpeg -hwaccel cuda -i in.mp4 -c:v h264_nvenc out.mp4\n"
    "[h264_nvenc @ 0x5633d1c0] Cannot load libnvidia-encode.so.1\n"
    "[h264_nvenc @ 0x5633d1c0] The minimum required Nvidia driver for nvenc is 470.57.02 or newer\n"
)


def caps(value: str | None) -> Any:
    """An edit: the transcode pods' first container with NVIDIA_DRIVER_CAPABILITIES=``value`` (none where None)."""

    def edit(sim: SimCluster) -> None:
        for pod in sim.cluster.list(POD, namespace="video"):
            containers = pod["spec"]["containers"]
            env = [{"name": "LANG", "value": "C"}]
            if value is not None:
                env.append({"name": "NVIDIA_DRIVER_CAPABILITIES", "value": value})
            containers[0] = {**containers[0], "env": env}
            sim.cluster.patch(
                POD, name=pod["metadata"]["name"], namespace="video", patch={"spec": {"containers": containers}}
            )

    return edit


def said(text: str) -> dict[str, Any]:
    return {"do": "pod", "daemonset": "transcode", "namespace": "video", "node": "media-2", "logs": {"main": text}}


def test_an_encoder_without_the_video_capability_is_the_toolkit_link_with_the_variable_set() -> None:
    report = diagnosed(SCENARIO, caps("compute,utility"), said(ENCODE_FAILED))
    (found,) = [f for f in report.findings if f.id == "workload.driver-capability-missing"]
    assert found.node == "media-2" and found.link == "toolkit" and found.severity is Severity.ERROR
    assert '"name":"NVIDIA_DRIVER_CAPABILITIES","value":"compute,utility,video"' in found.fix
    assert "libnvidia-encode" in found.cause and "video" in found.cause


def test_an_unset_variable_is_the_runtime_default_without_video() -> None:
    report = diagnosed(SCENARIO, caps(None), said(ENCODE_FAILED))
    (found,) = [f for f in report.findings if f.id == "workload.driver-capability-missing"]
    assert "utility,compute" in found.cause and '"value":"utility,compute,video"' in found.fix


def test_a_container_that_asks_for_all_is_not_read_as_missing_a_capability() -> None:
    report = diagnosed(SCENARIO, caps("all"), said(ENCODE_FAILED))
    assert not [f for f in report.findings if f.id == "workload.driver-capability-missing"]


def test_a_healthy_transcoder_stays_quiet() -> None:
    report = diagnosed(
        SCENARIO, caps("compute,video,utility"), said("ffmpeg -c:v h264_nvenc out.mp4\nframe= 240 fps=480\n")
    )
    assert [f for f in report.findings if f.severity is Severity.ERROR] == []


def test_a_pod_without_a_gpu_is_not_read() -> None:
    pod = {"metadata": {"name": "cpu", "namespace": "video"}, "spec": {"containers": [{"name": "main"}]}}
    assert missing_capability(None, None, [pod]) is None  # type: ignore[arg-type]


#: FFmpeg 4.4 built against NVENC API 11.0 on a 450 driver, as libavcodec/nvenc.c prints it (nvenc_load_libraries,
#: then nvenc_print_driver_requirement): the API line, then the least driver that API needs on Linux.
API_TOO_NEW = (
    "Stream mapping:\n"
    "  Stream #0:0 -> #0:0 (h264 (native) -> h264 (h264_nvenc))\n"
    "[h264_nvenc @ 0x55e1c4a3f2c0] Driver does not support the required nvenc API version. Required: 11.0 Found: 10.0\n"
    "[h264_nvenc @ 0x55e1c4a3f2c0] The minimum required Nvidia driver for nvenc is 455.28 or newer\n"
    "Conversion failed!\n"
)


#: A transcoder's pod template: FFmpeg with the video capability, one GPU.
TRANSCODER = {
    "containers": [
        {
            "name": "main",
            "image": "registry.example/ffmpeg-nvenc:4.4",
            "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility,video"}],
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
        }
    ]
}


def test_an_encoder_newer_than_the_driver_is_the_driver_with_the_version_ffmpeg_names() -> None:
    report = diagnosed(
        SCENARIO,
        {"do": "node", "node": "media-2", "labels": {"nvidia.com/cuda.driver-version.full": "450.119.04"}},
        _pod("transcoder", "media-2", spec=TRANSCODER, ready=False),
        _logs("transcoder", "media-2", API_TOO_NEW),
    )
    (found,) = [f for f in report.findings if f.id == "workload.cuda-unusable"]
    assert found.node == "media-2" and found.link == "driver" and found.severity is Severity.ERROR
    assert "NVENC" in found.cause and "ffmpeg.nvenc-driver-too-old" in " ".join(found.evidence)
    assert "driver 455.28 or newer" in found.fix and "spec.driver.version" in found.fix
    assert "the node's driver is 450.119.04" in found.fix
    assert not [f for f in report.findings if f.id == "workload.driver-capability-missing"]


def test_the_requirement_line_after_a_library_it_cannot_load_is_not_read_as_an_old_driver() -> None:
    report = diagnosed(SCENARIO, caps("compute,utility"), said(ENCODE_FAILED))
    assert not [f for f in report.findings if f.id == "workload.cuda-unusable"]
