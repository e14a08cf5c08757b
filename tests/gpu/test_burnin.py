"""gpu.burnin: DCGM's diagnostic read from what dcgmi really prints (tests/gpu/fixtures/dcgm, see
its README for where each document comes from), the CUDA child's report read back, and the
reset decision for NVLink/NVSwitch systems from nvidia-smi(1)'s table."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import jsonschema
import pytest

from gpuchain.gpu.burnin import BurnInConfig, cuda_checks, dcgm_diag, parse_dcgm_diag
from gpuchain.gpu.reset import NvLink, plan_reset

DCGM = Path(__file__).parent / "fixtures" / "dcgm"
GB10 = (DCGM / "diag-r1-gb10-dcgm-4.2.3.json").read_text()
ISSUE_215 = (DCGM / "diag-r3-8gpu-diagnostic-test-dcgm-issue-215.json").read_text()


@pytest.mark.parametrize("name", ["diag-r1-gb10-dcgm-4.2.3.json", "diag-r3-8gpu-diagnostic-test-dcgm-issue-215.json"])
def test_the_fixtures_are_what_dcgms_own_schema_describes(name: str) -> None:
    schema = json.loads((DCGM / "dcgm_diag_schema.json").read_text())
    # The schema names no draft ("http://json-schema.org/schema#"); draft 7 reads it as written.
    jsonschema.Draft7Validator(schema).validate(json.loads((DCGM / name).read_text()))


def test_a_dcgm_failure_on_the_gpu_fails_the_check_with_dcgms_words() -> None:
    outcome = parse_dcgm_diag(GB10, gpu_index=0)
    [check] = outcome.checks
    assert not check.passed
    assert check.detail.startswith("software: Persistence Mode: Persistence mode for GPU 0 is disabled.")


def test_only_the_results_of_the_gpu_being_burned_in_count() -> None:
    for gpu in range(8):
        [check] = parse_dcgm_diag(ISSUE_215, gpu_index=gpu).checks
        assert check.passed and check.detail == "1 tests passed"
    assert parse_dcgm_diag(ISSUE_215, gpu_index=8).skipped == {"dcgm": "DCGM ran no test on GPU 8"}
    assert parse_dcgm_diag(GB10, gpu_index=1).skipped == {"dcgm": "DCGM ran no test on GPU 1"}


def test_warn_passes_with_the_warning_and_an_unknown_status_fails() -> None:
    doc = json.loads(ISSUE_215)
    results = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]
    results[2]["status"] = "Warn"
    results[2]["warnings"] = [{"warning": "clocks throttled", "error_id": 1, "error_category": 1, "error_severity": 1}]
    results[3]["status"] = "Inconclusive"
    [warned] = parse_dcgm_diag(json.dumps(doc), gpu_index=2).checks
    assert warned.passed and "diagnostic warned: clocks throttled" in warned.detail
    [unknown] = parse_dcgm_diag(json.dumps(doc), gpu_index=3).checks
    assert not unknown.passed and "unknown status 'Inconclusive'" in unknown.detail
    results[4]["status"] = "Skip"
    assert parse_dcgm_diag(json.dumps(doc), gpu_index=4).skipped  # skipped is not a verdict


def test_dcgmi_that_cannot_reach_a_host_engine_is_skipped_not_failed() -> None:
    # dcgmi/Command.cpp prints this line (and no JSON) when no host engine answers.
    text = "Error: unable to establish a connection to the specified host: localhost\n"
    assert parse_dcgm_diag(text, gpu_index=0).skipped == {"dcgm": f"dcgmi diag gave no result: {text.strip()}"}
    # Diag.cpp HelperDisplayFailureMessage: the version and a runtime_error, nothing else.
    runtime = json.dumps({"DCGM Diagnostic": {"version": "4.2.3", "runtime_error": "The GPU is in use"}})
    assert parse_dcgm_diag(runtime, gpu_index=0).skipped == {
        "dcgm": "DCGM could not run the diagnostic: The GPU is in use"
    }
    legacy = json.dumps({"DCGM GPU Diagnostic": {"test_categories": []}})
    assert "DCGM older than 4.0" in parse_dcgm_diag(legacy, gpu_index=0).skipped["dcgm"]


class Runner:
    def __init__(self, answer: subprocess.CompletedProcess[str] | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[list[str], float]] = []

    def __call__(self, argv: Sequence[str], deadline: float) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), deadline))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_dcgmi_is_asked_for_one_gpu_at_the_configured_level_and_host() -> None:
    runner = Runner(subprocess.CompletedProcess([], 0, ISSUE_215, ""))
    config = BurnInConfig(dcgm_level=2, dcgm_host="nvidia-dcgm.gpu-operator.svc:5555", dcgm_deadline_s=600)
    outcome = dcgm_diag(5, config=config, run=runner, which=lambda _: "/usr/bin/dcgmi")
    assert outcome.checks[0].passed
    assert runner.calls == [
        (["/usr/bin/dcgmi", "diag", "-r", "2", "-i", "5", "-j", "--host", "nvidia-dcgm.gpu-operator.svc:5555"], 600)
    ]
    late = dcgm_diag(
        5, config=config, run=Runner(subprocess.TimeoutExpired("dcgmi", 600)), which=lambda _: "/usr/bin/dcgmi"
    )
    assert late.skipped == {"dcgm": "dcgmi diag did not finish within 600 s"}
    assert dcgm_diag(5, config=BurnInConfig(dcgm=False), run=runner).skipped == {
        "dcgm": "turned off in the burn-in configuration"
    }


def test_a_cuda_child_that_dies_without_a_report_fails_the_cuda_check() -> None:
    crashed = Runner(subprocess.CompletedProcess([], -11, "", "Segmentation fault"))
    outcome = cuda_checks("00000000:17:00.0", config=BurnInConfig(), run=crashed)
    assert [(c.name, c.passed) for c in outcome.checks] == [("cuda", False)]
    assert "exit -11" in outcome.checks[0].detail and "Segmentation fault" in outcome.checks[0].detail
    argv, deadline = crashed.calls[0]
    assert argv[-4:] == ["--memory-fraction", "0.5", "--time-budget", "60.0"] and deadline == 300


def test_the_burn_in_configuration_is_validated() -> None:
    with pytest.raises(ValueError, match="memory_fraction"):
        BurnInConfig(memory_fraction=1.0)
    with pytest.raises(ValueError, match="dcgm_level"):
        BurnInConfig(dcgm_level=5)
    with pytest.raises(ValueError, match="kill deadline"):
        BurnInConfig(cuda_budget_s=300, cuda_deadline_s=300)


# ---- the reset decision (nvidia-smi(1), -r/--gpu-reset: NVSwitch and direct NVLink tables) ----


@pytest.mark.parametrize(
    ("cc", "nvlink", "allowed"),
    [
        ((7, 0), NvLink.NVSWITCH, False),  # DGX-2 / HGX-2 V100: all peers in one command
        ((7, 0), NvLink.DIRECT, False),  # pre-Ampere direct NVLink: likewise
        ((7, 0), NvLink.NONE, True),
        ((8, 0), NvLink.NVSWITCH, True),  # A100 HGX: alone, with Fabric Manager running
        ((8, 0), NvLink.DIRECT, True),
        ((9, 0), NvLink.NVSWITCH, True),  # H100/H200 HGX: alone, no Fabric Manager needed
        ((10, 0), NvLink.NVSWITCH, True),
    ],
)
def test_which_gpus_can_be_reset_alone(cc: tuple[int, int], nvlink: NvLink, allowed: bool) -> None:
    assert plan_reset(0, compute_capability=cc, nvlink=nvlink).allowed is allowed


def test_the_refusal_says_a_reboot_is_needed_and_ampere_names_fabric_manager() -> None:
    assert "needs a reboot" in plan_reset(4, compute_capability=(7, 0), nvlink=NvLink.NVSWITCH).reason
    assert "Fabric Manager" in plan_reset(4, compute_capability=(8, 0), nvlink=NvLink.NVSWITCH).reason
