"""The device plugin's Xid line, by the class NVIDIA's Xid catalog gives the Xid (gpuchain.gpu.xid's table, from
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html): the repair is the one that class needs.

- Xid 94 (contained ECC error, bucket RESTART_APP): the driver contained the error to the process it hit and the GPU
  serves again, but NVIDIA's plugin (internal/rm/health.go, which skips only its ignoredXids and those named in
  DP_DISABLE_HEALTHCHECKS) marked the GPU unhealthy for good: restart the plugin, and name the Xid in
  DP_DISABLE_HEALTHCHECKS so the next one does not take the GPU out again.
- Xid 79 (GPU fallen off the bus, bucket RESTART_BM): no setting of the plugin brings the GPU back; the node's
  hardware is the link, and its restart (then its hardware) the repair.
- Xid 48 (double-bit ECC error, bucket RESET_GPU): the GPU itself needs the reset, then its row remapper and ECC
  counts read; the same repair the kernel's own Xid line gets (links/xid_events.py), on the GPU the plugin names.

The log lines are the plugin's own (catalog k8s-device-plugin.xid-critical, health.go@v0.17.1); the exporter's series
naming a GPU by index, UUID and bus id are dcgm-exporter's (test_doctor_kernel_xids._metric, which cites them).
"""

from __future__ import annotations

import time

from doctor.small_cluster import diagnosed
from doctor.test_doctor_beneath_the_plugin import LOST, V017, plugin_release
from doctor.test_doctor_kernel_xids import _metric

from gpuchain.doctor import diagnose
from gpuchain.doctor.model import FixOp, Report
from gpuchain.doctor.snapshot import timed_gather
from gpuchain.doctor.structs import Scrape, Snapshot
from gpuchain.gpu import xid as xids
from gpuchain.sim import build, parse_scenario

#: The GPU the exporter's series in ``_metric`` name: index 3 at bus 00000000:3B:00.0.
UUID = "GPU-5d8ac4be-0c1d-4e0c-9e4f-28b25f2a4a11"

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1, lostGpus: [2]}\n"


def _found(report: Report, fid: str) -> list:
    return [f for f in report.findings if f.id == fid]


def test_the_catalog_classes_the_xids_apart() -> None:
    assert xids.still_serves(94) and xids.still_serves(13) and xids.still_serves(109)
    assert not xids.still_serves(79) and not xids.still_serves(48) and not xids.still_serves(95)
    assert xids.describe(79).needs() is xids.Resolution.REBOOT_NODE


def test_a_contained_ecc_error_is_a_plugin_restart_and_the_variable_that_skips_it() -> None:
    report = diagnosed(LOST, plugin_release("v0.17.4", V017.format(xid=94)))
    (found,) = _found(report, "device-plugin.xid-marked")
    assert (found.link, found.node, found.root) == ("device-plugin", "n1", True)
    assert found.action is not None and found.action.op is FixOp.DELETE
    assert found.fix.startswith("kubectl -n kube-system delete pod nvidia-device-plugin")
    assert "set env ds/nvidia-device-plugin-daemonset DP_DISABLE_HEALTHCHECKS=94" in found.fix
    assert "nvidia-smi -r" not in found.fix and not _found(report, "gpu.lost")


def test_under_the_operator_the_variable_goes_to_the_policy() -> None:
    (found,) = _found(diagnosed(OPERATOR, plugin_release("v0.17.4", V017.format(xid=94))), "device-plugin.xid-marked")
    assert '{"name":"DP_DISABLE_HEALTHCHECKS","value":"94"}' in found.fix


def test_a_gpu_off_the_bus_is_the_node_and_its_restart() -> None:
    report = diagnosed(LOST, plugin_release("v0.17.4", V017.format(xid=79)))
    (found,) = _found(report, "gpu.lost")
    assert (found.link, found.node, found.root) == ("node", "n1", True)
    assert found.action is not None and found.action.op is FixOp.HARDWARE
    # The one Xid table's repair for 79 (a reboot, then the GPU's seating, power and cooling), not the plugin's own.
    assert "Xid 79 (GPU has fallen off the bus" in found.fix and "reboot the node" in found.fix
    assert "reseat the GPU" in found.fix and "replace the GPU" in found.fix and "nvidia-smi -r" not in found.fix
    assert "DP_DISABLE_HEALTHCHECKS" not in found.fix and not _found(report, "device-plugin.xid-marked")


def test_an_application_xid_beside_a_gpu_off_the_bus_is_still_the_node() -> None:
    line = V017.format(xid=94) + "\n" + V017.format(xid=79)
    (found,) = _found(diagnosed(LOST, plugin_release("v0.17.4", line)), "gpu.lost")
    assert found.link == "node"


def test_a_hardware_xid_the_plugin_logged_gets_the_xid_tables_repair_on_the_gpu_it_names() -> None:
    """The plugin's line names the GPU by UUID; the exporter's scrape gives its index and bus id, so the reset and the
    checks after it name that GPU, as the kernel's own Xid line would (and the scrape's Xid is not told twice)."""
    sim = build(parse_scenario(LOST))
    plugin_release("v0.17.4", V017.format(xid=48).replace("GPU-0b1c2d3e", UUID))(sim)
    snap, _, _ = timed_gather(sim.cluster, reader=sim.read_log)
    report = diagnose(Snapshot(**{**snap.__dict__, "scrapes": {"n1": Scrape(_metric("n1", 48), time.time())}}))
    (found,) = _found(report, "gpu.lost")
    assert found.link == "device-plugin" and found.action is not None and found.action.op is FixOp.HARDWARE
    assert f"GPU 3 (PCI 00000000:3B:00.0, {UUID}), Xid 48 (Double Bit ECC Error" in found.fix
    assert "nvidia-smi -r -i 3 " in found.fix and "nvidia-smi -q -d ROW_REMAPPER,ECC -i 3)" in found.fix
    assert "reset the GPU (nvidia-smi -r) or reboot" not in found.fix
    assert not _found(report, "node.gpu-xid")


def test_with_no_scrape_the_gpu_goes_unnamed_and_a_gpu_lost_with_no_xid_keeps_the_general_repair() -> None:
    (found,) = _found(diagnosed(LOST, plugin_release("v0.17.4", V017.format(xid=48))), "gpu.lost")
    assert "a GPU, Xid 48 (Double Bit ECC Error" in found.fix and "nvidia-smi -r -i <GPU>" in found.fix
    (lost,) = _found(diagnosed(LOST, plugin_release("v0.17.4", "")), "gpu.lost")
    assert lost.fix.endswith("reset the GPU (nvidia-smi -r) or reboot the node; replace the GPU if it falls off again")
