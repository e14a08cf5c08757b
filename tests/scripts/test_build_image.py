"""scripts/build-image: its arguments, the engine it picks and the commands it runs.

No container engine runs here, so each engine is a stand-in script on PATH that records its
arguments; what is checked is the command line the real engine would get.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build-image"


def run(*args: str, path: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def fake_engines(tmp_path: Path, *names: str) -> tuple[str, Path]:
    """A PATH holding only stand-in engines that append their argv to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for name in names:
        exe = bin_dir / name
        exe.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n')
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(bin_dir), log


def test_the_dockerfile_it_builds_exists_and_installs_gpuchain() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM " in text and "gpuchain --version" in text
    assert SCRIPT.stat().st_mode & stat.S_IXUSR


def test_default_tag_is_the_charts_app_version(tmp_path: Path) -> None:
    app_version = yaml.safe_load((ROOT / "charts" / "gpuchain" / "Chart.yaml").read_text())["appVersion"]
    result = run("--dry-run", "--engine", "docker")
    assert result.returncode == 0, result.stderr
    assert f"image: ghcr.io/gpuchain/gpuchain:{app_version}" in result.stdout


@pytest.mark.parametrize(
    ("installed", "build", "push"),
    [
        (("docker", "podman", "buildah"), "docker build", "docker push"),
        (("podman", "buildah"), "podman build", "podman push"),
        (("buildah",), "buildah bud", "buildah push"),
    ],
)
def test_picks_the_first_engine_installed_and_passes_registry_and_tag(
    tmp_path: Path, installed: tuple[str, ...], build: str, push: str
) -> None:
    path, log = fake_engines(tmp_path, *installed)
    result = run("--registry", "registry.example.com:5000/team", "--tag", "0.2.0-rc1", "--push", path=path)
    assert result.returncode == 0, result.stderr
    ref = "registry.example.com:5000/team/gpuchain:0.2.0-rc1"
    calls = log.read_text().splitlines()
    assert calls == [f"{build} -f {ROOT / 'Dockerfile'} -t {ref} {ROOT}", f"{push} {ref}"]
    assert "--set operator.repository=registry.example.com:5000/team --set operator.version=0.2.0-rc1" in result.stdout


def test_without_push_only_builds_and_platform_is_passed(tmp_path: Path) -> None:
    path, log = fake_engines(tmp_path, "podman")
    result = run("--tag", "dev", "--platform", "linux/amd64", path=path)
    assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines() == [
        f"podman build --platform linux/amd64 -f {ROOT / 'Dockerfile'} -t ghcr.io/gpuchain/gpuchain:dev {ROOT}"
    ]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--registry", "https://ghcr.io/x"], "--registry"),
        (["--registry", "GHCR.io/Team"], "--registry"),
        (["--tag", "-bad"], "--tag"),
        (["--tag", "a b"], "--tag"),
        (["--engine", "rkt"], "--engine"),
        (["--bogus"], "--bogus"),
        ([], "no container engine found"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    result = run(*args, path=str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: build-image:") and needle in lines[0], result.stderr
    assert result.stdout == ""


def test_a_failing_build_stops_before_push(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "docker"
    exe.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "calls.log"}\nexit 3\n')
    exe.chmod(0o755)
    result = run("--push", path=str(bin_dir))
    assert result.returncode == 1 and "docker build failed (exit 3)" in result.stderr
    assert len((tmp_path / "calls.log").read_text().splitlines()) == 1
