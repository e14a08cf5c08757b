"""User-facing text speaks of gpuchain and the user's cluster, never of the book it came from.

The check is the issue's own: no line under src/, docs/ or the README names "chapter" (help,
docstrings shown by ``--help``, finding texts, scenario descriptions and docs are all there).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".py", ".md", ".yaml", ".yml", ".txt", ".tpl", ".json")


def test_no_user_facing_text_mentions_the_chapter() -> None:
    files = [
        ROOT / "README.md",
        *(p for d in ("src", "docs", "charts") for p in (ROOT / d).rglob("*") if p.suffix in TEXT),
    ]
    hits = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in files
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if "chapter" in line.lower()
    ]
    assert not hits, hits
