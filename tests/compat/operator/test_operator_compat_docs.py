"""docs/operator.md carries the table of NVIDIA's ClusterPolicy sections and the figures this suite measures."""

from __future__ import annotations

from pathlib import Path

from operator_docs_table import feature_table, figures

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_operator_docs_have_the_feature_table() -> None:
    assert feature_table() in (DOCS / "operator.md").read_text(), "regenerate with operator_docs_table.feature_table()"


def test_operator_docs_state_the_measured_figures() -> None:
    assert figures() in (DOCS / "operator.md").read_text(), "regenerate with operator_docs_table.figures()"


def test_migration_page_exists_and_is_linked() -> None:
    page = (DOCS / "migrating-from-gpu-operator.md").read_text()
    assert "gpuchain operator import" in page and "Rollback" in page
    assert "migrating-from-gpu-operator.md" in (DOCS / "operator.md").read_text()
