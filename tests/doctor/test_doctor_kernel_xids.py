"""The kernel's Xids, wherever the doctor sees them, through the one Xid table (gpuchain.gpu.xid) to a finding on the
link the Xid names, with its resolution's action on the GPU it names.

Fixtures, with their sources:
- Xid lines in the NVIDIA kernel module's format, "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s%s" / "NVRM:
  Xid (PCI:%04x:%02x:%02x): %d, %s%s" (NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c
  @595.45.04); the 94 and 95 lines are the examples that source gives word for word
  (src/nvidia/src/kernel/gpu/arch/ampere/kern_gpu_error_cont_ga100.c@595.45.04); the 79 line's text is the one
  osinit.c@595.45.04 logs with it ("GPU has fallen off the bus."); the 31 and 63 lines' texts after the code are
  stand-ins (the GPU's firmware writes those, whose source is not public).
- node-problem-detector's Events: a temporary rule's match is a Warning Event on the Node, source its monitor's
  (kernel-monitor), reason the rule's (the shipped kernel-monitor.json has no NVRM rule: "GPUXid" here stands for a
  cluster's own), message the kernel line; a permanent rule's is a Node condition holding the line and the Event
  "Node condition %s is now: %s, reason: %s, message: %q" (kubernetes/node-problem-detector
  pkg/systemlogmonitor/log_monitor.go, pkg/util/helpers.go@v1.34.4).
- The exporter's DCGM_FI_DEV_XID_ERRORS (NVIDIA/dcgm-exporter etc/default-counters.csv
  @00d6d344ea4a39112b211b9ff5af3d97e0bb51c2) with the labels gpuchain's exporter writes as dcgm-exporter does (gpu,
  UUID, pci_bus_id, device, modelName, Hostname; exporter/metrics.py gpu_labels).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from doctor.small_cluster import diagnosed
from doctor.test_doctor_beneath_the_plugin import LOST as PLUGIN_LOST
from doctor.test_doctor_beneath_the_plugin import V017, plugin_release
from doctor.test_doctor_mig_and_lost_gpus import LOST
from doctor.test_doctor_upper_catalog import _refused

from gpuchain.doctor import diagnose
from gpuchain.doctor.kernel_log import bus_key, bus_text
from gpuchain.doctor.model import Finding, FixOp, Report, Severity
from gpuchain.doctor.snapshot import gather
from gpuchain.doctor.structs import Scrape, Snapshot
from gpuchain.kube import NODE
from gpuchain.sim import build, parse_scenario
from gpuchain.sim.build import SimCluster

HOST = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: w1, preset: a100-80gb-x8, hostDriver: 570.195.03}\n"
OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, preset: a100-80gb-x8}\n"
UNCONTAINED = "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No"
CONTAINED = "NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No"
MIG_CONTAINED = (
    "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No"
)
OFF_THE_BUS = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
PAGE_FAULT = "NVRM: Xid (PCI:0000:86:00): 31, pid=2468, name=trainer, Ch 00000010, intr 10000000"
REMAPPED = "NVRM: Xid (PCI:0000:01:00): 63, pid=2468, name=trainer, row remapping event"


def _event(
    node: str, message: str, *, count: int = 1, kind: str = "Warning", name: str = "xid", **more: str
) -> Callable[..., None]:
    """An edit: the Event node-problem-detector's kernel-monitor posts on ``node`` for a kernel line (``more``: its
    firstTimestamp and lastTimestamp, as the event recorder keeps them for a repeated Event)."""

    def edit(sim: SimCluster) -> None:
        sim.cluster.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{node}.{name}", "namespace": "default"},
                "involvedObject": {"kind": "Node", "name": node, "uid": node},
                "reason": "GPUXid",
                "type": kind,
                "count": count,
                "source": {"component": "kernel-monitor", "host": node},
                "message": message,
                **more,
            }
        )

    return edit


def _found(report: Report, fid: str) -> list[Finding]:
    return [f for f in report.findings if f.id == fid]


def _errors(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.severity is Severity.ERROR]


def test_bus_ids_in_the_kernels_and_nvmls_spelling_are_one_gpu() -> None:
    assert bus_key("0000:3b:00") == bus_key("00000000:3B:00.0") == (0, 0x3B, 0)
    assert bus_text((0, 0x3B, 0)) == "00000000:3B:00.0"
    assert bus_key("not a bus") is None


def test_an_uncontained_memory_error_is_the_gpu_reset_on_the_node() -> None:
    report = diagnosed(HOST, _event("w1", UNCONTAINED))
    (found,) = _found(report, "node.gpu-xid")
    assert (found.link, found.node, found.severity, found.root) == ("node", "w1", Severity.ERROR, True)
    assert "nvidia-smi -r -i 00000000:01:00.0" in found.fix and "kubectl cordon w1" in found.fix
    assert "replace the GPU" in found.fix and "memory" in found.cause
    assert "nvidia-smi -q -d ROW_REMAPPER,ECC -i 00000000:01:00.0" in found.fix
    assert found.action is not None and found.action.op is FixOp.NODE


def test_a_gpu_off_the_bus_in_a_node_event_is_a_reboot_of_the_node() -> None:
    (found,) = _found(diagnosed(HOST, _event("w1", OFF_THE_BUS)), "node.gpu-xid")
    assert "kubectl drain w1" in found.fix and "reboot the node" in found.fix and "nvidia-smi -r" not in found.fix
    assert "reseat the GPU" in found.fix


def test_an_application_xid_is_a_warning_on_the_workload_not_an_error() -> None:
    report = diagnosed(HOST, _event("w1", PAGE_FAULT))
    (found,) = _found(report, "workload.gpu-xid")
    assert (found.link, found.severity) == ("workload", Severity.WARNING)
    assert "restart the application running trainer (pid 2468)" in found.fix and "5 within 1h: reset-gpu" in found.fix
    assert not _errors(report) and not _found(report, "driver.gsp-xid")


def test_an_application_xid_past_its_threshold_is_the_gpus() -> None:
    report = diagnosed(HOST, _event("w1", CONTAINED, count=3))
    (found,) = _found(report, "node.gpu-xid")
    assert found.severity is Severity.ERROR and "it repeated (3 times, threshold 3 within 1d: reset-gpu)" in found.fix
    assert not _found(report, "workload.gpu-xid")
    (mig,) = _found(diagnosed(HOST, _event("w1", MIG_CONTAINED, count=2)), "workload.gpu-xid")
    assert "its MIG GPU instance 05" in mig.cause


def test_an_xid_the_catalog_leaves_alone_is_information() -> None:
    report = diagnosed(HOST, _event("w1", REMAPPED))
    (found,) = _found(report, "node.gpu-xid-noted")
    assert found.severity is Severity.INFO and not _errors(report)


def _condition(node: str, line: str) -> Callable[[SimCluster], None]:
    """An edit: node-problem-detector's permanent rule's condition on ``node`` and the Event it posts with it."""

    def edit(sim: SimCluster) -> None:
        node_obj = sim.cluster.get(NODE, name=node)
        conditions = [*(node_obj.get("status") or {}).get("conditions", [])]
        conditions.append({"type": "GpuXid", "status": "True", "reason": "GPUXid", "message": line})
        sim.cluster.patch_status(NODE, name=node, status={"conditions": conditions})
        quoted = line.replace('"', '\\"')
        _event(node, f'Node condition GpuXid is now: True, reason: GPUXid, message: "{quoted}"', name="cond")(sim)

    return edit


def test_a_permanent_rules_condition_and_its_event_are_one_fault() -> None:
    (found,) = _found(diagnosed(HOST, _condition("w1", UNCONTAINED)), "node.gpu-xid")
    assert "Xid 95" in found.cause and "2 times" not in found.cause


def _snapshot(scenario: str, **more: Any) -> Snapshot:
    snap = gather(build(parse_scenario(scenario)).cluster)
    return Snapshot(**{**snap.__dict__, **more})


def _metric(node: str, xid: int) -> str:
    labels = (
        'gpu="3",UUID="GPU-5d8ac4be-0c1d-4e0c-9e4f-28b25f2a4a11",pci_bus_id="00000000:3B:00.0",device="nvidia3",'
        f'modelName="NVIDIA A100-SXM4-80GB",Hostname="{node}"'
    )
    return (
        f'# TYPE DCGM_FI_DEV_XID_ERRORS gauge\nDCGM_FI_DEV_XID_ERRORS{{{labels},err_code="{xid}"}} {xid}\n'
        f"# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{{{labels}}} 41\n"
    )


def test_the_exporter_names_the_gpu_by_index_and_alone_is_a_warning() -> None:
    scrape = {"w1": Scrape(_metric("w1", 48), time.time())}
    alone = diagnose(_snapshot(HOST, scrapes=scrape))
    (found,) = _found(alone, "node.gpu-xid")
    assert found.severity is Severity.WARNING and "GPU 3 (PCI 00000000:3B:00.0" in found.fix
    assert "nvidia-smi -r -i 3 " in found.fix and "dmesg" in found.cause


def test_a_kernel_line_names_the_gpu_the_exporter_indexes() -> None:
    sim = build(parse_scenario(HOST))
    _event("w1", OFF_THE_BUS.replace("79", "48").replace("GPU has fallen off the bus.", "DBE"))(sim)
    snap = gather(sim.cluster)
    report = diagnose(Snapshot(**{**snap.__dict__, "scrapes": {"w1": Scrape(_metric("w1", 48), time.time())}}))
    (found,) = _found(report, "node.gpu-xid")
    assert found.severity is Severity.ERROR and "nvidia-smi -r -i 3 " in found.fix and "1 times" not in found.cause


def test_the_driver_containers_log_is_read_for_xids() -> None:
    snap = _snapshot(OPERATOR)
    driver = next(p for p in snap.pods if p["metadata"]["name"].startswith("nvidia-driver-daemonset"))
    key = (driver["metadata"]["namespace"], driver["metadata"]["name"], "nvidia-driver-ctr")
    report = diagnose(Snapshot(**{**snap.__dict__, "logs": {key: f"[ 8812.1] {UNCONTAINED}\n"}}))
    (found,) = _found(report, "node.gpu-xid")
    assert "driver container log" in " ".join(found.evidence)


def test_a_gsp_xid_stays_the_driver_and_names_the_gpu_to_reset() -> None:
    gsp = "NVRM: Xid (PCI:0000:3b:00): 119, pid=812, name=python3, Timeout waiting for RPC from GSP0! Expected function 76"
    report = diagnosed(HOST, _event("w1", gsp), _event("w1", UNCONTAINED, name="b"))
    roots = [f for f in report.findings if f.root]
    assert [f.id for f in roots] == ["driver.gsp-xid"] and "nvidia-smi -r -i 00000000:3B:00.0" in roots[0].fix
    assert _found(report, "node.gpu-xid"), "the GPU's own Xid is still told, under the driver's"


def test_a_healthy_cluster_has_no_xid_finding() -> None:
    report = diagnosed(HOST)
    assert not [f for f in report.findings if "xid" in f.id]


#: NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osapi.c@595.45.04 (RmCheckVersion), first line.
API_MISMATCH = "NVRM: API mismatch: the client 'nvidia-smi' (pid 4242)"
#: NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osinit.c@595.45.04, NV_DEV_PRINTF's prefix.
INIT_FAILED = "NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x56:1017)"


def test_the_kernel_modules_own_errors_in_node_events_are_the_driver() -> None:
    for line, entry in ((API_MISMATCH, "nvidia-kernel.api-mismatch"), (INIT_FAILED, "nvidia-kernel.rm-init-adapter")):
        roots = [f for f in diagnosed(HOST, _event("w1", line)).findings if f.root]
        assert [(f.id, f.link) for f in roots] == [("driver.kernel-line", "driver")]
        assert entry in " ".join(roots[0].evidence) and "reboot the node" in roots[0].fix


def test_the_line_that_names_the_loaded_module_is_no_error() -> None:
    loading = "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  (dvs-builder@U22)"
    assert not _errors(diagnosed(HOST, _event("w1", loading)))


def test_a_lost_gpu_is_told_once_with_the_kernels_line_for_it() -> None:
    """Pods refused on NVML's GPU_IS_LOST (links/hardware.py's node.gpu-lost) and node-problem-detector's Xid 79 Event
    for the same GPU: one finding, the lost GPU's, which quotes the kernel's line."""
    n1 = "name: t\nstack: nvidia-device-plugin\nnodes:\n  - {name: n1, preset: a100-80gb-x8}\n"
    report = diagnosed(n1, _refused(LOST), _event("n1", OFF_THE_BUS))
    (root,) = [f for f in report.findings if f.root]
    assert root.id == "node.gpu-lost" and OFF_THE_BUS in " ".join(root.evidence)
    assert not _found(report, "node.gpu-xid")


def test_an_xid_the_device_plugin_logged_is_left_to_its_count_check() -> None:
    """The plugin's "XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy." (NVIDIA/k8s-device-plugin
    internal/rm/health.go@v0.20.0) for the Xid a Node Event also shows: the plugin's finding names the GPU it took
    out, and the kernel's Event adds no second one; another Xid on the node is still told."""
    xid48 = "NVRM: Xid (PCI:0000:3b:00): 48, pid=977, name=train, DBE"
    report = diagnosed(
        PLUGIN_LOST,
        plugin_release("v0.17.4", V017.format(xid=48)),
        _event("n1", xid48),
        _event("n1", UNCONTAINED, name="b"),
    )
    assert _found(report, "gpu.lost")
    (found,) = _found(report, "node.gpu-xid")
    assert "Xid 95" in found.cause and "Xid 48" not in found.cause


def test_nvlink_xids_old_and_new_are_a_reset_and_the_links_state() -> None:
    """Xid 74 (NVLINK_ERROR) and, on NVLink 5 GPUs, 144-150 (NVLINK_*_ERROR): NVIDIA's NVLink workflows, a reset.
    The text after the code is a stand-in (the GPU's firmware writes it)."""
    for code in (74, 145):
        line = f"NVRM: Xid (PCI:0000:07:00): {code}, pid=0, name=kworker, NVLink: fatal error detected on link 3"
        (found,) = _found(diagnosed(HOST, _event("w1", line)), "node.gpu-xid")
        assert "nvidia-smi -r -i 00000000:07:00.0" in found.fix and "nvlink -s -i 00000000:07:00.0" in found.fix
        assert "nvlink" in found.cause


def test_repeats_spread_wider_than_the_threshold_window_stay_the_applications() -> None:
    """Five page faults on one GPU over three hours are not "5 within 1h": still the workload's warning."""
    spread = {"firstTimestamp": "2026-12-01T08:00:00Z", "lastTimestamp": "2026-12-01T11:00:00Z"}
    report = diagnosed(HOST, _event("w1", PAGE_FAULT, count=5, **spread))
    assert _found(report, "workload.gpu-xid") and not _errors(report)
    close = {"firstTimestamp": "2026-12-01T08:00:00Z", "lastTimestamp": "2026-12-01T08:20:00Z"}
    assert _found(diagnosed(HOST, _event("w1", PAGE_FAULT, count=5, **close)), "node.gpu-xid")


def test_an_xid_in_a_normal_event_is_no_error() -> None:
    """node-problem-detector posts a condition's return to False as a Normal Event (GenerateConditionChangeEvent's
    Info severity) whose message still quotes the line: no error comes of it."""
    back = f'Node condition GpuXid is now: False, reason: GPUXid, message: "{UNCONTAINED}"'
    assert not _errors(diagnosed(HOST, _event("w1", back, kind="Normal")))


def test_the_modules_fallen_off_the_bus_line_alone_is_xid_79_and_beside_it_one_fault() -> None:
    """osinit.c@595.45.04 writes "NVRM: GPU %04x:%02x:%02x.%x: GPU has fallen off the bus." beside the Xid 79 line."""
    fallen = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
    (alone,) = _found(diagnosed(HOST, _event("w1", fallen)), "node.gpu-xid")
    assert "Xid 79" in alone.cause and "reboot the node" in alone.fix
    (both,) = _found(diagnosed(HOST, _event("w1", f"{OFF_THE_BUS}\n{fallen}")), "node.gpu-xid")
    assert "times" not in both.cause
