"""The one-shot commands that read a whole cluster run without the cyclic garbage collector, and
leave it as they found it (the same process may go on, as under CliRunner)."""

from __future__ import annotations

import gc

import pytest
import typer

from gpuchain.commands._cluster import reads_a_whole_cluster


def test_the_collector_is_off_while_the_command_runs_and_back_after_an_exit() -> None:
    seen: list[bool] = []

    @reads_a_whole_cluster
    def command() -> None:
        seen.append(gc.isenabled())
        raise typer.Exit(1)

    assert gc.isenabled()
    with pytest.raises(typer.Exit):
        command()
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    try:
        reads_a_whole_cluster(lambda: None)()
        assert not gc.isenabled()
    finally:
        gc.enable()
