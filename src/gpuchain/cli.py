"""The one `gpuchain` command. Thin by design: each subcommand lives in ``gpuchain.commands.<name>``
and only parses arguments, calls a layer and renders the answer.

Commands load lazily. ``COMMANDS`` names each one's module (which exposes ``register(app)``) and
its one-line help, so parsing, ``--help`` and ``--version`` import no command code, and running
one command imports that command's module alone: a node agent never pays for kopf, aiohttp or
the operator. A test checks the table against what every module registers.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from gpuchain import __version__
from gpuchain.common import fastexit


@dataclass(frozen=True)
class Entry:
    """One command: the module whose ``register(app)`` adds it, and its one-line help."""

    module: str
    help: str


COMMANDS: dict[str, Entry] = {
    "demo": Entry(
        "gpuchain.commands.demo",
        "Run the device plugin chain on a simulated H100 node: capacity, a pod, an XID 79, recovery.",
    ),
    "device-plugin": Entry(
        "gpuchain.commands.device_plugin", "Serve nvidia.com/gpu (and MIG / shared resources) to the kubelet."
    ),
    "doctor": Entry(
        "gpuchain.commands.doctor",
        "Walk each GPU node's chain bottom-up and name the first broken link, its evidence and the fix.",
    ),
    "dra-plugin": Entry(
        "gpuchain.commands.dra_plugin", "Serve GPUs and MIG devices to Kubernetes DRA as driver gpu.gpuchain.io."
    ),
    "dra-demo": Entry(
        "gpuchain.commands.dra_plugin",
        "Run the DRA path on a simulated node: ResourceSlice, registration, a claim prepared, an XID.",
    ),
    "exporter": Entry(
        "gpuchain.commands.exporter", "Serve DCGM-compatible GPU metrics with pod attribution on :9400/metrics."
    ),
    "gfd": Entry(
        "gpuchain.commands.gfd",
        "Compute NVIDIA GFD-compatible labels and write them as an NFD feature file or onto the Node.",
    ),
    "gpus": Entry("gpuchain.commands.gpus", "List GPUs, MIG devices and the GPU-to-GPU topology."),
    "mig-manager": Entry(
        "gpuchain.commands.mig_manager", "Watch this node's `nvidia.com/mig.config` label and apply that MIG layout."
    ),
    "node-agent": Entry(
        "gpuchain.commands.node_agent",
        "Serve the node side of the chain (device plugin, GFD, exporter, GPU health, MIG manager, DRA plugin, "
        "validator) from one process sharing one GPU backend.",
    ),
    "remediator": Entry(
        "gpuchain.commands.remediator",
        "Move workloads off failed GPUs: evict the pods on them (PDBs respected), taint the node.",
    ),
    "gpu-health": Entry(
        "gpuchain.commands.remediator",
        "Publish this node's GPU health for the remediator: condition GPUHealthy, Events, GPU/pod annotations.",
    ),
    "verify": Entry(
        "gpuchain.commands.verify", "Run the production checklist on your cluster, each item pass/fail with evidence."
    ),
    "mig": Entry(
        "gpuchain.commands.mig",
        "Declarative MIG layouts (mig-parted v1 config): apply one, assert one, print the built-in config.",
    ),
    "operator": Entry("gpuchain.commands.operator", "The gpuchain operator (ClusterPolicy gpuchain.io/v1)."),
    "plan": Entry(
        "gpuchain.commands.plan",
        "Capacity planning: whole GPU vs MIG vs time-slicing for one model (and `plan fleet`, `plan stack`).",
    ),
    "sim": Entry("gpuchain.commands.sim", "Simulated clusters built from scenario YAML (no GPU, no cluster needed)."),
    "top": Entry(
        "gpuchain.commands.top",
        "Per node: the GPUs, the pods on each and their own memory and SM share, what no pod owns.",
    ),
    "validate": Entry(
        "gpuchain.commands.validate",
        "Validate one link of the GPU chain and write its ready file (the operator's init containers).",
    ),
}
"""Every `gpuchain` command in the order ``--help`` lists them."""


def load(name: str) -> Any:
    """The click command (or group) ``name``, built by importing its module only now."""
    sub = typer.Typer()
    importlib.import_module(COMMANDS[name].module).register(sub)
    return typer.main.get_group(sub).commands[name]


class LazyGroup(TyperGroup):
    """The root group: knows every command by name and help, imports one only to run it.

    Its help is click's plain layout (rich's help renderer alone costs twice ``import typer``);
    shell completion answers with placeholders carrying the table's help.
    """

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._listing = False
        self._loaded: dict[str, Any] = {}
        for name, entry in COMMANDS.items():
            self.commands[name] = TyperCommand(name, help=entry.help)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return self.commands[cmd_name]
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = load(cmd_name)
        return self._loaded[cmd_name]

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """Each command with its whole one-line help, wrapped, never cut short."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.help) for name, entry in COMMANDS.items()])

    def shell_complete(self, ctx: Any, incomplete: str) -> Any:
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False


def _bare_flags() -> None:
    """Show boolean flags bare in ``--help`` (``--dry-run``, ``--test-pod/--no-test-pod``).

    typer labels every option with its type, so a flag reads ``--dry-run <bool>`` as if it took
    a value, yet ``--dry-run=true`` is refused. A flag has no value to show.
    """
    typed = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else typed(self, ctx)

    setattr(TyperOption, "display_type_rich", display_type_rich)  # noqa: B010 (mypy: no method assignment)


_bare_flags()


app = typer.Typer(
    name="gpuchain",
    cls=LazyGroup,
    rich_markup_mode=None,
    help=(
        "The Kubernetes GPU chain (driver -> toolkit -> device plugin -> discovery/exporter/MIG), "
        "with a doctor that names the broken link. Every command runs on simulated GPUs by default; "
        "pass --backend nvml on a real node."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuchain {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """gpuchain: make GPUs real, schedulable, observable and healthy resources on Kubernetes."""


def main() -> None:
    """Console entry point. A usage error is one line on stderr and exit 2, not a help page.

    Pipelines and scripts read the first line of stderr; ``--help`` still shows the whole page.
    """
    from typer._click import exceptions as click  # typer vendors click; these are the classes it raises

    fastexit.allow()  # this process is the command: what it holds to the end is left to the OS
    try:
        code = app(standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "gpuchain"
        message = " ".join(exc.format_message().replace("Value error, ", "").split())
        sys.stderr.write(f"error: {where}: {message} (see '{where} --help')\n")
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        sys.stderr.write(f"error: {' '.join(exc.format_message().split())}\n")
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.stderr.write("aborted\n")
        sys.exit(1)
    fastexit.leave(code if isinstance(code, int) else 0)
