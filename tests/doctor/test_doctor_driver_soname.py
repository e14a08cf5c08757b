"""A driver library missing by its SONAME, in each component's words (gpuchain.doctor.driver_soname): the DRA
plugin's rule for a host driver without its ldconfig links reads any of them, not only the plugin's "error locating".

Fixtures are the components' formats with glibc's dlerror text for a name found nowhere ("%s: cannot open shared
object file: No such file or directory"):
- NVIDIA/k8s-dra-driver-gpu nvml DriverRoot.findFile ``error locating %q``, wrapped by nvlib.go newDeviceLib;
- NVIDIA/libnvidia-container src/xfuncs.h@13521978755666801855113e6bc4626a36a55c03 ``load library failed`` (xdlopen,
  dlerror appended), under src/cli/configure.c's ``initialization error: %s``;
- NVIDIA/go-nvlib pkg/nvlib/info/property-extractor.go (NVIDIA/k8s-device-plugin vendor@v0.17.1)
  ``could not load NVML library: %v``;
- NVIDIA/go-nvml pkg/nvml/lib.go (NVIDIA/nvidia-container-toolkit vendor@v1.17.4) ``error opening %s: %w``;
- NVIDIA/nvidia-container-toolkit pkg/nvcdi/lib.go@v1.17.4 ``Ignoring error in locating libnvidia-ml.so.1: %v``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from doctor.small_cluster import diagnosed
from test_doctor_silent_pods import CRASH, DONE, DRA_DS, DRA_NS, HOST_DRA, dra_release

from gpuchain.doctor import Severity
from gpuchain.doctor.driver_soname import unlocated
from gpuchain.sim.build import SimCluster

DLERROR = "{lib}: cannot open shared object file: No such file or directory"
WORDINGS = {
    "k8s-dra-driver-gpu": 'failed to locate driver libraries: error locating "libnvidia-ml.so.1"',
    "nvidia-container-cli": "nvidia-container-cli: initialization error: load library failed: "
    + DLERROR.format(lib="libnvidia-ml.so.1").lower(),
    "go-nvlib": "could not load NVML library: " + DLERROR.format(lib="libnvidia-ml.so.1"),
    "go-nvml": "error opening libcuda.so.1: " + DLERROR.format(lib="libcuda.so.1"),
    "nvidia-ctk cdi": "Ignoring error in locating libnvidia-ml.so.1: pattern libnvidia-ml.so.1 not found",
}


@pytest.mark.parametrize("component", sorted(WORDINGS))
def test_each_components_wording_names_the_library_it_looked_for(component: str) -> None:
    found = unlocated(f"I1206 12:00:00 starting\n{WORDINGS[component]}\n")
    assert found is not None and found.lib == ("libcuda.so.1" if component == "go-nvml" else "libnvidia-ml.so.1")
    assert found.said in WORDINGS[component]


def test_the_toolkits_own_helper_and_other_failures_are_no_driver_library() -> None:
    """The toolkit's libnvidia-container-go.so.1 is its package's, and a library that loads but fails is no
    missing name: neither is read as the driver's SONAME."""
    assert unlocated("load library failed: " + DLERROR.format(lib="libnvidia-container-go.so.1")) is None
    assert unlocated("could not load NVML library: libnvidia-ml.so.1: undefined symbol: nvmlInit_v2") is None
    assert unlocated("Failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND") is None


def _dra_log(text: str) -> Callable[[SimCluster], None]:
    def edit(sim: SimCluster) -> None:
        sim.cluster.set_logs(f"{DRA_DS}-7xk2p", namespace=DRA_NS, container="gpus", text=text)

    return edit


def test_the_dra_plugins_host_library_rule_reads_glibcs_words_too() -> None:
    """The plugin's NVML loader says it in go-nvml's words: the same host driver without its link, the same repair."""
    log = "Error: failed to create device library: " + WORDINGS["go-nvml"].replace("libcuda", "libnvidia-ml")
    report = diagnosed(HOST_DRA, dra_release("n1", DONE, CRASH, "/"), _dra_log(log))
    (root,) = [f for f in report.findings if f.root and f.severity is Severity.ERROR]
    assert (root.id, root.link, root.node) == ("driver.library-unlinked", "driver", "n1")
    assert "run ldconfig on the host" in root.fix and "libnvidia-ml.so.1" in root.fix
