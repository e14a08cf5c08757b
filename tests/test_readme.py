"""The README stays true: its two opening commands, its XID table, its links and its command tour."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuchain.cli import app
from gpuchain.remediation.xidtable import xid_markdown

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def test_opens_with_exactly_the_two_setup_commands() -> None:
    first = _blocks()[0].strip().splitlines()
    assert first == ["scripts/setup && .venv/bin/gpuchain demo", "scripts/test"]
    assert README.index("```bash") < README.index("\n## ")
    for script in ("scripts/setup", "scripts/test", ".ci/run"):
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} must be executable"
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_xid_table_is_the_shared_policy_table() -> None:
    assert xid_markdown() in README


def test_local_links_exist() -> None:
    links = re.findall(r"\]\(((?!http|#)[^)]+)\)", README)
    assert links
    for link in links:
        assert (ROOT / link).exists(), link


TOUR = sorted({line.split()[1] for block in _blocks() for line in block.splitlines() if line.startswith("gpuchain ")})


@pytest.mark.parametrize("command", TOUR)
def test_every_command_in_the_readme_exists(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
