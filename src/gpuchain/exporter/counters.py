"""Which metrics the exporter publishes: dcgm-exporter's collectors CSV, parsed and checked.

The file format is dcgm-exporter's (`DCGM field, Prometheus type, help`), so a ConfigMap written
for dcgm-exporter drives this exporter too. Fields NVML cannot read (profiling counters such as
``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, PCIe throughput, vGPU licensing) are reported as skipped
instead of failing the whole file, because those CSVs routinely list them; an NVML reading is
never published under a DCGM profiling name, since it does not measure the same thing. A row
that is not a DCGM field at all, or has a bad type, is an error naming the line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpuchain.common.inputfile import ConfigFileError, read_input_text

DEFAULT_COLLECTORS = "default-counters.csv"
"""The collectors file shipped in this package, used when no ``--collectors`` file is given."""


class PromType(enum.StrEnum):
    """The metric types a collectors row may name; ``label`` turns the value into a series label."""

    gauge = "gauge"
    counter = "counter"
    label = "label"


class Field(enum.StrEnum):
    """Fields this exporter can fill. Values are DCGM's field names, as used in the CSV."""

    SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
    MEM_CLOCK = "DCGM_FI_DEV_MEM_CLOCK"
    MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
    GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
    POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
    TOTAL_ENERGY_CONSUMPTION = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    PCIE_REPLAY_COUNTER = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
    MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
    ENC_UTIL = "DCGM_FI_DEV_ENC_UTIL"
    DEC_UTIL = "DCGM_FI_DEV_DEC_UTIL"
    XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
    XID_ERRORS_TOTAL = "DCGM_EXP_XID_ERRORS_TOTAL"
    FB_FREE = "DCGM_FI_DEV_FB_FREE"
    FB_USED = "DCGM_FI_DEV_FB_USED"
    FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
    UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
    CORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
    ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
    DRIVER_VERSION = "DCGM_FI_DRIVER_VERSION"


_PREFIXES = ("DCGM_FI_", "DCGM_EXP_")


@dataclass(frozen=True, kw_only=True)
class Counter:
    """One row of a collectors file."""

    field: Field
    prom_type: PromType
    help: str
    line: int = 0


@dataclass(frozen=True)
class CounterSet:
    """The parsed file: what to publish, and the DCGM fields named but not available here."""

    counters: tuple[Counter, ...]
    skipped: tuple[str, ...] = ()
    source: str = DEFAULT_COLLECTORS

    def metrics(self) -> tuple[Counter, ...]:
        """Rows that become metric families (gauges and counters)."""
        return tuple(c for c in self.counters if c.prom_type is not PromType.label)

    def labels(self) -> tuple[Counter, ...]:
        """Rows that become labels on every series."""
        return tuple(c for c in self.counters if c.prom_type is PromType.label)


class CollectorsFileError(ValueError):
    """A collectors file that cannot be used; ``str()`` is `file:line: reason`."""


def parse_collectors(text: str, source: str = "<collectors>") -> CounterSet:
    """Parse dcgm-exporter CSV text. Raises CollectorsFileError naming the first bad line."""
    counters: list[Counter] = []
    skipped: list[str] = []
    seen: dict[str, int] = {}
    known = {f.value: f for f in Field}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise CollectorsFileError(
                f"{source}:{lineno}: expected 'DCGM field, Prometheus type, help message', got {raw.strip()!r}"
            )
        name, type_name = parts[0], parts[1].lower()
        help_text = parts[2] if len(parts) > 2 else ""
        if not name.startswith(_PREFIXES):
            raise CollectorsFileError(
                f"{source}:{lineno}: {name!r} is not a DCGM field (names start with DCGM_FI_ or DCGM_EXP_)"
            )
        try:
            prom_type = PromType(type_name)
        except ValueError:
            valid = ", ".join(t.value for t in PromType)
            raise CollectorsFileError(
                f"{source}:{lineno}: {name}: unknown Prometheus type {parts[1]!r}; use one of {valid}"
            ) from None
        if name in seen:
            raise CollectorsFileError(f"{source}:{lineno}: {name} is listed twice (first on line {seen[name]})")
        seen[name] = lineno
        field = known.get(name)
        if field is None:
            skipped.append(name)
            continue
        if field is Field.DRIVER_VERSION and prom_type is not PromType.label:
            raise CollectorsFileError(f"{source}:{lineno}: {name} is a text field; its type must be 'label'")
        if field is not Field.DRIVER_VERSION and prom_type is PromType.label:
            raise CollectorsFileError(f"{source}:{lineno}: {name} is numeric; use 'gauge' or 'counter', not 'label'")
        counters.append(Counter(field=field, prom_type=prom_type, help=help_text, line=lineno))
    if not counters:
        raise CollectorsFileError(f"{source}: no usable metric rows (fields this exporter reads: {_supported()})")
    return CounterSet(tuple(counters), tuple(skipped), source)


def load_collectors(path: str | Path | None = None) -> CounterSet:
    """Read a collectors file, or the packaged default when ``path`` is None."""
    if path is None:
        text = resources.files("gpuchain.exporter").joinpath(DEFAULT_COLLECTORS).read_text(encoding="utf-8")
        return parse_collectors(text, DEFAULT_COLLECTORS)
    p = Path(path)
    try:
        text = read_input_text(p)
    except ConfigFileError as exc:
        raise CollectorsFileError(str(exc)) from None
    return parse_collectors(text, str(p))


def _supported() -> str:
    return ", ".join(f.value for f in Field)
