"""`gpuchain doctor --local`: the driver link asked of NVML on the node (through the fake pynvml)."""

from __future__ import annotations

import json

import pytest
from fakes.fake_pynvml import FakeNvml, nvml_over
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.doctor import LinkState
from gpuchain.doctor.local import LocalAnswer, ask, local_chain
from gpuchain.doctor.model import NOT_SIMULATED
from gpuchain.gpu.errors import DriverNotLoadedError, GpuLostError
from gpuchain.gpu.nvml import NvmlBackend
from gpuchain.gpu.sim import SimBackend


def test_nvml_answering_is_an_ok_driver_link(h100_sim: SimBackend) -> None:
    answer = ask(lambda: nvml_over(h100_sim), node="gpu-1", kernel="5.15.0-105-generic")
    assert (answer.driver, len(answer.gpus), answer.error) == ("570.86.15", 8, None)
    chain = local_chain(answer)
    assert chain.state("driver") is LinkState.OK and chain.healthy


def test_missing_library_is_the_chapters_command_not_found(h100_sim: SimBackend) -> None:
    answer = ask(lambda: NvmlBackend(nvml=FakeNvml(h100_sim, library_missing=True)), node="gpu-1", kernel="6.8.0")
    chain = local_chain(answer)
    assert answer.error == "library"
    assert chain.findings[0].id == "driver.nvml-missing" and chain.state("driver") is LinkState.BROKEN
    # The fix is work on the host (install the driver), said as such and marked as not simulated.
    f = chain.findings[0]
    assert f.fix.startswith("# on node gpu-1 (outside the cluster): install the NVIDIA driver")
    assert f.action is not None and f.action.outside_cluster and f.action.changes[NOT_SIMULATED]


@pytest.mark.parametrize(
    ("error", "fid"),
    [(DriverNotLoadedError("driver not loaded"), "driver.not-loaded"), (GpuLostError("gone"), "gpu.lost")],
)
def test_each_nvml_error_has_its_finding(error: Exception, fid: str) -> None:
    def broken() -> NvmlBackend:
        raise error

    chain = local_chain(ask(broken, node="n", kernel="6.8.0-51-generic"))
    assert chain.findings[0].id == fid and chain.findings[0].root


def test_no_gpu_visible_is_broken() -> None:
    chain = local_chain(LocalAnswer(node="n", kernel="k", driver="570.86.15", cuda="12.8", gpus=()))
    assert chain.findings[0].id == "driver.no-gpus"


def test_cli_local_with_the_simulated_backend_exits_0() -> None:
    result = CliRunner().invoke(app, ["doctor", "--local", "--backend", "sim", "-o", "json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["broken"] is False and data["nodes"][0]["links"]["driver"]["state"] == "ok"


def test_an_nvml_error_the_catalog_knows_gets_its_cause_and_repair() -> None:
    """NVML's "Driver/library version mismatch" on the node: a reboot (or module reload), cited to
    the catalog entry, not the generic 'NVML answered with an error'."""
    chain = local_chain(LocalAnswer(node="n", kernel="k", error="other", message="Driver/library version mismatch"))
    found = chain.findings[0]
    assert found.id == "driver.nvml-error" and "version than the driver's user-space libraries" in found.cause
    assert "reboot the node" in found.fix and any(
        e.startswith("catalog: nvml.version-mismatch") for e in found.evidence
    )
