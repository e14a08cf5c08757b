"""The NVIDIA kernel module's Xid lines, wherever the doctor can read them on a node, gathered per GPU and Xid.

The module writes one line per Xid: "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s%s" (or, with no process,
"NVRM: Xid (PCI:%04x:%02x:%02x): %d, %s%s"; a MIG instance's adds " GPU-I:%02u" and " GPU-CI:%02u" to the address)
(NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c@595.45.04). The doctor sees it in:

- Node Events of a node-problem monitor. node-problem-detector's log monitor posts a temporary rule's match as a
  Warning Event on the Node, reason the rule's, source its monitor's (kernel-monitor), message the matched kernel
  lines; a permanent rule sets a Node condition whose message is the line, and posts "Node condition %s is now: %s,
  reason: %s, message: %q" (kubernetes/node-problem-detector pkg/systemlogmonitor/log_monitor.go generateStatus and
  pkg/util/helpers.go GenerateConditionChangeEvent@v1.34.4). Its shipped kernel-monitor.json has no NVRM rule: the
  cluster's own configuration adds one, so the reason is whatever it names, and only the message is read.
- the Node's conditions that such a rule holds True;
- the driver container's log, which quotes the kernel's lines;
- the exporter's DCGM_FI_DEV_XID_ERRORS, the last Xid of each GPU as its value ("Value of the last XID error
  encountered", NVIDIA/dcgm-exporter etc/default-counters.csv@00d6d344ea4a39112b211b9ff5af3d97e0bb51c2), labelled with
  the GPU's index, UUID and PCI bus id (gpuchain's exporter writes the same labels). The value stays after the fault
  is gone, so it is a hint, never the only proof of an error.

The same scrape names each GPU's index and UUID by its PCI bus id, which is how a line's address becomes the GPU a
person resets. The device plugin's own "XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy." is read by
the plugin's count check (links/plugin_health.py), which names the GPU it took out; the codes it logged are left to it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gpuchain.doctor.context import Context, NodeView
from gpuchain.kube.objects import Obj
from gpuchain.operator.operands import DRIVER

#: The kernel module's Xid line (kernel_rc.c's formats), as dmesg, a node-problem monitor's Event and the driver
#: container's log carry it. A message quoted by Go's %q keeps the line whole up to its closing quote.
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-f]{1,8}:[0-9a-f]{2}:[0-9a-f]{2})(?:\.[0-7])?(?: GPU-I:(?P<gi>\d+))?"
    r"(?: GPU-CI:\d+)?\): (?P<code>\d+)\b,? ?(?P<rest>[^\n\"]*)",
    re.IGNORECASE,
)
#: The module's own line beside Xid 79 (src/nvidia/arch/nvalloc/unix/src/osinit.c@595.45.04: NV_DEV_PRINTF(..., "GPU has
#: fallen off the bus.\n") behind "NVRM: GPU %04x:%02x:%02x.%x: "), read as that Xid where a monitor posts it alone.
FALLEN = re.compile(r"NVRM: GPU (?P<pci>[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2})(?:\.[0-7])?: GPU has fallen off the bus")
OFF_THE_BUS = 79
#: A PCI bus id as the kernel writes it (0000:3b:00) or as NVML and DCGM do (00000000:3B:00.0).
BUS_ID = re.compile(r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{2}):(?P<dev>[0-9a-f]{2})(?:\.[0-7])?$", re.I)
#: The exporter's series: name, labels, value.
SERIES = re.compile(r"^(?P<name>DCGM_FI_\w+)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)", re.MULTILINE)
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"

Bus = tuple[int, int, int]
Text = tuple[str, str, int, bool, float | None]


def bus_key(text: str) -> Bus | None:
    """(domain, bus, device) of a PCI bus id in the kernel's or NVML's spelling; None for anything else."""
    m = BUS_ID.match(text.strip())
    if m is None:
        return None
    return int(m.group("domain") or "0", 16), int(m.group("bus"), 16), int(m.group("dev"), 16)


def bus_text(key: Bus) -> str:
    """The bus id as nvidia-smi -i takes it (domain:bus:device.function)."""
    return f"{key[0]:08X}:{key[1]:02X}:{key[2]:02X}.0"


@dataclass(frozen=True)
class Gpu:
    """One GPU of the node as its exporter names it."""

    index: str
    uuid: str


#: The node's GPUs by bus id, and each (last Xid, GPU, bus id as labelled) the exporter reports.
Scraped = tuple[dict[Bus, Gpu], list[tuple[int, Gpu, str]]]


@dataclass(kw_only=True)
class Seen:
    """One Xid on one GPU, from every place that shows it."""

    code: int
    bus: Bus | None
    lines: list[str] = field(default_factory=list)
    places: list[str] = field(default_factory=list)
    count: int = 0
    span_s: float | None = None  #: first to last occurrence, where an Event says
    warned: bool = False  #: a Warning Event, a True condition or a log line shows it (not only a metric)
    instance: str = ""  #: the MIG GPU instance the line names

    def add(self, line: str, place: str, count: int, *, warned: bool, span: float | None = None) -> None:
        if line and line not in self.lines:
            self.lines.append(line)
        if place not in self.places:
            self.places.append(place)
        # The same fault shown in several places is one fault: the largest count, not their sum.
        self.count = max(self.count, count)
        self.warned = self.warned or warned
        if span is not None:
            self.span_s = span if self.span_s is None else max(self.span_s, span)


def _when(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def _span(event: Obj) -> float | None:
    first, last = _when(event.get("firstTimestamp")), _when(event.get("lastTimestamp"))
    return (last - first).total_seconds() if first and last else None


def node_texts(view: NodeView) -> list[Text]:
    """(text, where, count, warned, span) of every Node Event and True Node condition on ``view``'s node: where a
    node-problem monitor puts the kernel's lines."""
    out = []
    for e in view.events:
        if (e.get("involvedObject") or {}).get("kind") != "Node":
            continue
        source = (e.get("source") or {}).get("component") or "?"
        where = f"node event {e.get('reason')} ({source})"
        out.append((str(e.get("message") or ""), where, int(e.get("count") or 1), e.get("type") != "Normal", _span(e)))
    for c in (view.node.get("status") or {}).get("conditions") or ():
        if c.get("status") == "True":
            out.append((str(c.get("message") or ""), f"node condition {c.get('type')}", 1, True, None))
    return out


def mentioned(ctx: Context, view: NodeView) -> bool:
    """Whether anything on the node names the NVIDIA kernel module or an Xid at all: the cheap question asked of
    every node before any line is parsed (a healthy node's Events and conditions never do)."""
    for e in view.events:
        if "NVRM" in str(e.get("message") or ""):
            return True
    for c in (view.node.get("status") or {}).get("conditions") or ():
        if "NVRM" in str(c.get("message") or ""):
            return True
    scrape = ctx.snapshot.scrapes.get(view.name)
    if scrape is not None and XID_METRIC in scrape.text:
        return True
    driver = view.pod(DRIVER)
    return driver is not None and "NVRM" in ctx.log(driver, ctx.container(DRIVER))


def _from_texts(texts: Iterable[Text], seen: dict[tuple[int, Bus | None], Seen]) -> None:
    for text, where, count, warned, span in texts:
        if "NVRM" not in text:
            continue
        here = set()
        for m in XID_LINE.finditer(text):
            code, bus = int(m.group("code")), bus_key(m.group("pci"))
            here.add((code, bus))
            one = seen.setdefault((code, bus), Seen(code=code, bus=bus, instance=m.group("gi") or ""))
            one.add(m.group(0).strip(), where, count, warned=warned, span=span)
        for m in FALLEN.finditer(text):
            bus = bus_key(m.group("pci"))
            if (OFF_THE_BUS, bus) in here:
                continue  # the same fault's second line
            one = seen.setdefault((OFF_THE_BUS, bus), Seen(code=OFF_THE_BUS, bus=bus))
            one.add(m.group(0).strip(), where, count, warned=warned, span=span)


def scrape_gpus(ctx: Context, view: NodeView) -> Scraped:
    """The node's GPUs by PCI bus id, and each (last Xid, GPU, bus id) its exporter's DCGM_FI_DEV_XID_ERRORS
    reports above 0, from the node's scrape; nothing where none was read."""
    scrape = ctx.snapshot.scrapes.get(view.name)
    gpus: dict[Bus, Gpu] = {}
    xids: list[tuple[int, Gpu, str]] = []
    if scrape is None or "pci_bus_id" not in scrape.text:
        return gpus, xids
    for m in SERIES.finditer(scrape.text):
        labels = dict(LABEL.findall(m.group("labels")))
        key = bus_key(labels.get("pci_bus_id", ""))
        if key is None:
            continue
        gpu = Gpu(labels.get("gpu", ""), labels.get("UUID", ""))
        gpus.setdefault(key, gpu)
        if m.group("name") == XID_METRIC:
            try:
                value = int(float(m.group("value")))
            except ValueError:
                continue
            if value > 0 and (value, gpu, labels["pci_bus_id"]) not in xids:
                xids.append((value, gpu, labels["pci_bus_id"]))
    return gpus, xids


def node_xids(ctx: Context, view: NodeView, scraped: Scraped | None = None) -> list[Seen]:
    """Every Xid the node's Events, conditions, driver container log and exporter show, one per (Xid, GPU), most
    repeated first."""
    seen: dict[tuple[int, Bus | None], Seen] = {}
    _from_texts(node_texts(view), seen)
    driver = view.pod(DRIVER)
    if driver is not None:
        log = ctx.log(driver, ctx.container(DRIVER))
        if "NVRM" in log:
            _from_texts([(log, "driver container log", 1, True, None)], seen)
    _, metric = scraped if scraped is not None else scrape_gpus(ctx, view)
    for code, gpu, bus in metric:
        key = bus_key(bus)
        one = seen.setdefault((code, key), Seen(code=code, bus=key))
        series = f'{XID_METRIC}{{gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{bus}"}} {code}'
        one.add(series, "exporter", 1, warned=False)
    for one in seen.values():
        one.count = max(one.count, len(one.lines) if one.warned else 1)
    return sorted(seen.values(), key=lambda s: (-s.count, s.code))
