"""The driver pod's nvidia-peermem sidecar (GPUDirect RDMA) failing on a module that is there but wrong, or not
there, while MOFED is loaded: each names what repairs that failure (the rebuild against the loaded ib_core, the
driver container's full install), not the "load MOFED first" of a node without MOFED, which stays the repair of the
sidecar's own words when nothing more specific is said."""

from __future__ import annotations

from doctor.small_cluster import crashing_pod, diagnosed

from gpuchain.doctor import Severity
from gpuchain.doctor.model import Finding, Report

OPERATOR = "name: t\nstack: gpu-operator\nnodes:\n  - {name: n1}\n  - {name: n2}\n"
#: kmod tools/modprobe.c@v30 "could not insert '%s': %s" with strerror(EINVAL), then the sidecar's own line
#: (gpu-driver-container ubuntu22.04/nvidia-driver@b81f587 "failed to load nvidia-peermem module").
EINVAL = "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\nfailed to load nvidia-peermem module\n"
#: kmod tools/modprobe.c@v30 "Module %s not found in directory %s".
MISSING = "modprobe: FATAL: Module nvidia-peermem not found in directory /lib/modules/6.8.0-85-generic\n"


def _roots(report: Report) -> dict[str, Finding]:
    return {str(f.node): f for f in report.findings if f.root and f.severity is Severity.ERROR}


def _cites(finding: Finding, entry: str) -> bool:
    return any(e.startswith(f"catalog: {entry} (") for e in finding.evidence)


def _sidecar(node: str, log: str) -> dict[str, object]:
    return crashing_pod("nvidia-driver-daemonset", "nvidia-peermem-ctr", node, log)


def test_a_peermem_refused_with_einval_is_rebuilt_against_the_loaded_ib_core_not_sent_to_load_mofed() -> None:
    roots = _roots(diagnosed(OPERATOR, _sidecar("n1", EINVAL)))
    root = roots["n1"]
    assert root.link == "driver" and _cites(root, "kmod.peermem-symbol-mismatch")
    assert "kubectl drain n1" in root.fix and "delete pod nvidia-driver-daemonset-" in root.fix
    assert "useHostMofed" not in root.fix


def test_a_peermem_module_missing_after_the_userspace_only_install_forces_the_full_install() -> None:
    root = _roots(diagnosed(OPERATOR, _sidecar("n1", MISSING)))["n1"]
    assert root.link == "driver" and _cites(root, "kmod.peermem-module-missing")
    assert "FORCE_REINSTALL=true" in root.fix and "reboot the node" in root.fix
    assert "delete pod nvidia-driver-daemonset-" in root.fix and "usePrecompiled" not in root.fix


def test_two_nodes_with_the_two_peermem_failures_each_get_their_own_repair() -> None:
    roots = _roots(diagnosed(OPERATOR, _sidecar("n1", EINVAL), _sidecar("n2", MISSING)))
    assert _cites(roots["n1"], "kmod.peermem-symbol-mismatch") and "FORCE_REINSTALL" not in roots["n1"].fix
    assert _cites(roots["n2"], "kmod.peermem-module-missing") and "FORCE_REINSTALL" in roots["n2"].fix


def test_the_sidecars_own_line_alone_keeps_the_mofed_keys_and_names_the_rebuild() -> None:
    root = _roots(diagnosed(OPERATOR, _sidecar("n1", "failed to load nvidia-peermem module\n")))["n1"]
    assert _cites(root, "driver-container.peermem-load-failed")
    assert "useHostMofed=true" in root.fix and "rdma.enabled=false" in root.fix
    assert "kubectl drain n1" in root.fix and "recompiles nvidia-peermem" in root.fix
