"""Prepare and Unprepare are all or nothing when the plugin's state directory is full (issue 25,
item 2), through the real gRPC path (the kubelet's DRA peer to ``DraPluginServer``) on a real tiny
file system: a 16 KiB tmpfs mounted in a mount namespace of the scenario's own
(tests/dra/full_state_scenario.py), filled to the last byte.

Before the fix the first Prepare failed but left the claim's CDI spec and its entry in memory, the
kubelet's retry then succeeded with nothing on disk and a restart forgot the claim; a failed
Unprepare removed the spec and the memory entry, and the claim came back, spec-less, after a restart.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuchain.dra import cdi
from gpuchain.dra.driver import ClaimRef, DraDriver
from gpuchain.dra.errors import PrepareError
from gpuchain.gpu.sim import SimBackend

SCENARIO = Path(__file__).with_name("full_state_scenario.py")


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a tmpfs in a mount namespace of its own")
    root = Path("/tmp") / f"dra-full-{os.getpid()}"  # unix socket paths must stay short
    root.mkdir()
    try:
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", sys.executable, str(SCENARIO), str(root)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


NOTHING = {"memory": False, "disk": False, "spec": False}
PREPARED = {"memory": True, "disk": True, "spec": True}


def _where(step: dict[str, Any]) -> dict[str, bool]:
    return {k: step[k] for k in ("memory", "disk", "spec")}


def test_a_prepare_that_cannot_be_recorded_fails_and_leaves_nothing(seen: dict[str, Any]) -> None:
    for step in ("prepare_full", "prepare_full_retry"):
        answer = seen[step]
        assert answer["devices"] == [] and _where(answer) == NOTHING, (step, answer)
        assert "No space left on device" in answer["error"] and "nothing was prepared" in answer["error"], answer
    assert seen["restart_after_failed_prepare"] == NOTHING


def test_a_prepare_reported_done_is_on_disk(seen: dict[str, Any]) -> None:
    answer = seen["prepare"]
    assert answer["error"] == "" and _where(answer) == PREPARED, answer
    assert [d[1] for d in answer["devices"]] == ["gpu-2"]


def test_an_unprepare_that_cannot_be_recorded_fails_and_the_claim_stays_prepared_across_a_restart(
    seen: dict[str, Any],
) -> None:
    failed = seen["unprepare_full"]
    assert _where(failed) == PREPARED, failed
    assert "No space left on device" in failed["error"] and "stays prepared" in failed["error"], failed
    again = seen["restart_after_failed_unprepare"]
    assert again["error"] == "" and again["devices"] == seen["prepare"]["devices"] and _where(again) == PREPARED


def test_an_unprepare_reported_done_is_gone_after_a_restart(seen: dict[str, Any]) -> None:
    done = seen["unprepare"]
    assert done["error"] == "" and _where(done) == NOTHING, done
    assert seen["restart_after_unprepare"] == NOTHING


def test_an_unprepare_whose_spec_cannot_be_removed_keeps_the_claim_recorded(
    h100_sim: SimBackend,
    make_driver: Callable[[SimBackend], DraDriver],
    allocate: Callable[[str, str, list[str]], ClaimRef],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CDI directory refuses the removal (read-only, EBUSY): the record goes back, so the claim
    stays prepared on disk, in memory and as a spec, and the kubelet is told it failed."""
    driver = make_driver(h100_sim)
    ref = allocate("train", "h100-node", ["gpu-4"])
    prepared = driver.prepare(ref)

    def refuse(cdi_dir: Path, uid: str) -> bool:
        raise PermissionError(errno.EROFS, "Read-only file system", str(cdi.spec_path(cdi_dir, uid)))

    monkeypatch.setattr(cdi, "remove_spec", refuse)
    with pytest.raises(PrepareError, match="cannot remove its CDI spec.*stays prepared"):
        driver.unprepare(ref)
    assert driver.checkpoint.get(ref.uid) == prepared
    assert make_driver(h100_sim).checkpoint.get(ref.uid) == prepared  # a restart finds it
    assert cdi.spec_path(driver.config.cdi_dir, ref.uid).exists()
