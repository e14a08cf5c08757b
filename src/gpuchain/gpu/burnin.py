"""The burn-in's checks that run outside NVML: the CUDA kernel and memory test, and DCGM's diagnostic.

Both run as child processes with a deadline, through one injected ``ProcessRunner`` (tests pass a
recorder or point PATH at fake tools), so a hung kernel or a stuck host engine cannot stall the
repair loop, and nothing is loaded into the long-lived agent:

- ``cuda_checks``: ``python -m gpuchain.gpu.cuda --bus-id ID`` (gpuchain.gpu.cuda), which loads
  ``libcuda.so.1`` in the child. A child that overruns its deadline is killed and both checks
  fail: a kernel that never finishes is a GPU that is not ready.
- ``dcgm_diag``: ``dcgmi diag -r LEVEL -i GPU -j`` where ``dcgmi`` is installed. DCGM numbers GPUs
  in NVML's order (its cache manager gives detected GPU i the id i), so the NVML index names the
  same GPU. The JSON is DCGM 4's: ``"DCGM Diagnostic" > "test_categories" > "tests" > "results"``
  with an ``entity_group``/``entity_id`` and a ``status`` of Pass, Fail, Warn, Skip or Not Run per
  entity (NVIDIA/DCGM dcgmi/Diag.cpp, testing/python3/dcgm_diag_schema.json). dcgmi exits
  non-zero when a test fails, so the exit code is not read; the document is. When dcgmi cannot
  reach a host engine it prints one line of text and no document; a ``runtime_error`` in the
  document means DCGM could not run the diagnostic: both are "skipped" with that text, since they
  say nothing about the GPU.

A check that does not run is reported as skipped with its reason, never as passed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuchain.gpu.backend import BurnInCheck

ProcessRunner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]
"""Runs argv with a deadline in seconds; raises subprocess.TimeoutExpired or OSError."""

DCGM_STATUSES = {"Pass": True, "Warn": True, "Fail": False}
"""dcgmi's per-entity results that are a verdict (Diag.cpp HelperDisplayDiagResult); Skip and
Not Run are not, and any other word is treated as a failure rather than read as health."""


@dataclass(frozen=True, kw_only=True)
class BurnInConfig:
    """What the burn-in runs beyond NVML, and how long each part may take.

    Validated here; each error starts with the field's name (``gpu-health`` names its flag
    instead: ``--burn-in-*``, see commands/remediator.py) and says what would be accepted."""

    cuda: bool = True
    """Run gpuchain's CUDA kernel and memory test (gpu.cuda)."""
    memory_fraction: float = 0.5
    """Share of the GPU's free memory the memory test writes and reads back."""
    memory_cap_mib: int | None = None
    """At most this much memory (MiB), whatever the fraction."""
    cuda_budget_s: float = 60.0
    """The memory test starts no new pattern after this long."""
    cuda_deadline_s: float = 300.0
    """The CUDA check's process is killed after this long (a kernel that never returns)."""
    dcgm: bool = True
    """Run DCGM's diagnostic where dcgmi is installed."""
    dcgm_level: int = 1
    """``dcgmi diag -r``: 1 the quick checks (seconds), up to 4 the extended ones (hours)."""
    dcgm_host: str | None = None
    """``dcgmi --host``: a DCGM host engine elsewhere (e.g. the GPU operator's nvidia-dcgm service)."""
    dcgm_deadline_s: float = 300.0
    """dcgmi is stopped after this long (the diagnostic is then skipped, not failed)."""
    fabric_wait_s: float = 60.0
    """How long to wait for the GPU to rejoin the NVLink fabric after a reset; 0 looks once."""

    def __post_init__(self) -> None:
        if not 0 < self.memory_fraction <= 0.9:
            raise ValueError(f"memory_fraction {self.memory_fraction:g}: must be in (0, 0.9], e.g. 0.5")
        if self.dcgm_level not in (1, 2, 3, 4):
            raise ValueError(f"dcgm_level {self.dcgm_level}: must be 1, 2, 3 or 4 (dcgmi diag -r)")
        for name in ("cuda_budget_s", "cuda_deadline_s", "dcgm_deadline_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} {getattr(self, name):g}s: must be positive, e.g. 60s")
        if self.fabric_wait_s < 0:
            raise ValueError(f"fabric_wait_s {self.fabric_wait_s:g}s: must be 0 or more")
        if self.memory_cap_mib is not None and self.memory_cap_mib < 1:
            raise ValueError(f"memory_cap_mib {self.memory_cap_mib}: must be at least 1 (MiB)")
        if self.cuda_budget_s >= self.cuda_deadline_s:
            raise ValueError(
                f"cuda_budget_s {self.cuda_budget_s:g}s: must be below cuda_deadline_s "
                f"({self.cuda_deadline_s:g}s, the kill deadline); raise that or lower this"
            )


@dataclass
class Outcome:
    """Checks that ran, and the names of those that did not with why."""

    checks: list[BurnInCheck] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def add(self, other: Outcome) -> None:
        self.checks.extend(other.checks)
        self.skipped.update(other.skipped)


def run_process(argv: Sequence[str], deadline_s: float) -> subprocess.CompletedProcess[str]:
    """The real runner: the child is killed at the deadline (subprocess.run does that)."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=deadline_s, check=False)


def cuda_checks(bus_id: str, *, config: BurnInConfig, run: ProcessRunner = run_process) -> Outcome:
    """The "cuda" and "memory" checks of the GPU at ``bus_id``, in a child process."""
    if not config.cuda:
        why = "turned off in the burn-in configuration"
        return Outcome(skipped={"cuda": why, "memory": why})
    argv = [
        sys.executable,
        "-m",
        "gpuchain.gpu.cuda",
        "--bus-id",
        bus_id,
        "--memory-fraction",
        str(config.memory_fraction),
        "--time-budget",
        str(config.cuda_budget_s),
    ]
    if config.memory_cap_mib is not None:
        argv += ["--memory-cap-mib", str(config.memory_cap_mib)]
    try:
        done = run(argv, config.cuda_deadline_s)
    except subprocess.TimeoutExpired:
        detail = f"did not finish within {config.cuda_deadline_s:g} s (a kernel that never returns); killed"
        return Outcome([BurnInCheck("cuda", False, detail), BurnInCheck("memory", False, detail)])
    except OSError as exc:
        return Outcome(skipped={"cuda": f"could not start the check: {exc}", "memory": "not run"})
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
        checks = [BurnInCheck(str(c["name"]), bool(c["passed"]), str(c["detail"])) for c in report["checks"]]
        skipped = {str(k): str(v) for k, v in report["skipped"].items()}
    except (IndexError, ValueError, KeyError, TypeError, AttributeError):
        said = " ".join((done.stderr or done.stdout or "").strip().splitlines()[-3:])[:300]
        detail = f"the check process ended without a result (exit {done.returncode}): {said or 'no output'}"
        return Outcome([BurnInCheck("cuda", False, detail)], {"memory": "not run"})
    return Outcome(checks, skipped)


def dcgm_diag(
    gpu_index: int,
    *,
    config: BurnInConfig,
    run: ProcessRunner = run_process,
    which: Callable[[str], str | None] = shutil.which,
) -> Outcome:
    """DCGM's diagnostic on one GPU, where ``dcgmi`` is installed; skipped (with why) elsewhere."""
    if not config.dcgm:
        return Outcome(skipped={"dcgm": "turned off in the burn-in configuration"})
    dcgmi = which("dcgmi")
    if dcgmi is None:
        return Outcome(skipped={"dcgm": "dcgmi is not installed in this container"})
    argv = [dcgmi, "diag", "-r", str(config.dcgm_level), "-i", str(gpu_index), "-j"]
    if config.dcgm_host:
        argv += ["--host", config.dcgm_host]
    try:
        done = run(argv, config.dcgm_deadline_s)
    except subprocess.TimeoutExpired:
        return Outcome(skipped={"dcgm": f"dcgmi diag did not finish within {config.dcgm_deadline_s:g} s"})
    except OSError as exc:
        return Outcome(skipped={"dcgm": f"dcgmi could not run: {exc}"})
    return parse_dcgm_diag(done.stdout, gpu_index=gpu_index, fallback=done.stderr)


def parse_dcgm_diag(text: str, *, gpu_index: int, fallback: str = "") -> Outcome:
    """One "dcgm" check from ``dcgmi diag -j`` output, for entity GPU ``gpu_index``."""
    start, end = text.find("{"), text.rfind("}")
    try:
        doc: Any = json.loads(text[start : end + 1]) if start >= 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        said = " ".join((text or fallback).strip().splitlines()[:2])[:300] or "no output"
        return Outcome(skipped={"dcgm": f"dcgmi diag gave no result: {said}"})
    diag = doc.get("DCGM Diagnostic")
    if not isinstance(diag, dict):
        return Outcome(skipped={"dcgm": "dcgmi output without a 'DCGM Diagnostic' document (DCGM older than 4.0?)"})
    if diag.get("runtime_error"):
        return Outcome(skipped={"dcgm": f"DCGM could not run the diagnostic: {diag['runtime_error']}"})
    verdicts: list[tuple[str, bool, str]] = []
    for category in diag.get("test_categories") or ():
        for test in category.get("tests") or ():
            verdicts.extend(_test_verdicts(test, gpu_index))
    if not verdicts:
        return Outcome(skipped={"dcgm": f"DCGM ran no test on GPU {gpu_index}"})
    failed = [f"{name}: {why}" for name, ok, why in verdicts if not ok]
    if failed:
        return Outcome([BurnInCheck("dcgm", False, "; ".join(failed)[:500])])
    warned = [f"{name} warned: {why}" for name, _, why in verdicts if why]
    level = f"{len(verdicts)} tests passed" + (f" ({'; '.join(warned)[:300]})" if warned else "")
    return Outcome([BurnInCheck("dcgm", True, level)])


def _test_verdicts(test: dict[str, Any], gpu_index: int) -> list[tuple[str, bool, str]]:
    """(test name, passed, what DCGM said) for each verdict on this GPU; a test without
    per-entity results is judged by its summary (the run covered only this GPU)."""
    name = str(test.get("name", "?"))
    mine = [
        r
        for r in test.get("results") or ()
        if str(r.get("entity_group", "")).upper() == "GPU" and r.get("entity_id") == gpu_index
    ]
    if not test.get("results") and isinstance(test.get("test_summary"), dict):
        mine = [test["test_summary"]]
    out = []
    for result in mine:
        status = str(result.get("status", ""))
        if status in ("Skip", "Not Run"):
            continue
        said = "; ".join(str(w.get("warning", "")) for w in result.get("warnings") or () if isinstance(w, dict))
        if status not in DCGM_STATUSES:
            out.append((name, False, f"unknown status {status!r}"))
        else:
            out.append((name, DCGM_STATUSES[status], said or ("" if status != "Fail" else "failed")))
    return out
