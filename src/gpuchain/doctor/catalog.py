"""The evidence catalog (catalog.yaml): the messages the chain's components write, as data.

Every log line or container message a finding quotes is matched here, and the finding cites the
entry (``catalog: <id> (<source>)``), so what the doctor knows about a message is the component's
own source, read at a named version, and tested against the line as written there. A line at
error level that no entry knows is returned by `unknown_error`, for the doctor to report as
unrecognised with the line, never as a nearby link's fault.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from gpuchain.doctor.model import LINKS

LEVELS = ("fatal", "error", "warning", "info")
#: A value a catalog fix leaves to the evidence: ``<node>``, ``<namespace>``, ``<plugin pod>`` ...
PLACEHOLDER = re.compile(r"<([a-z][a-zA-Z ]*)>")
SCOPES = ("component", "anywhere")


@dataclass(frozen=True, kw_only=True)
class Entry:
    """One message of one component: where it is written, what it proves, what repairs it."""

    id: str
    component: str
    link: str
    level: str
    pattern: str
    cause: str
    fix: str
    source: str  #: "owner/repo path@version"
    line: str  #: the message as written in the source, format verbs left in
    args: tuple[str, ...] = ()
    scope: str = "component"
    on_node_image: str | None = None  #: the link it proves broken where the node image carries the driver

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled pattern (case-insensitive)."""
        return re.compile(self.pattern, re.IGNORECASE)

    def cite(self) -> str:
        """The evidence line a finding carries for this entry."""
        return f"catalog: {self.id} ({self.source})"

    def repair(self, node: str = "", *, namespace: str = "", pod: str = "", daemonset: str = "") -> str:
        """The entry's fix with the placeholders the evidence fills (the node, the pod's namespace, the pod, the
        DaemonSet that owns it), so the command pastes as it stands; a placeholder nothing fills stays for the
        user."""
        values = {"node": node, "namespace": namespace, "operator namespace": namespace, "its DaemonSet": daemonset}
        values |= {"plugin pod": pod, "gfd pod": pod, "driver pod": pod, "nfd pod": pod}
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1)) or m.group(0), self.fix)


@dataclass(frozen=True)
class Match:
    """An entry and the line of the text that matched it (stripped)."""

    entry: Entry
    line: str

    def evidence(self, label: str = "log") -> tuple[str, str]:
        """The line as a finding quotes it, and the entry it cites."""
        return f"{label}: {self.line}", self.entry.cite()


def _entry(raw: dict[str, Any]) -> Entry:
    fields = {k: v for k, v in raw.items() if k != "args"}
    entry = Entry(**fields, args=tuple(str(a) for a in raw.get("args") or ()))
    if entry.link not in LINKS or (entry.on_node_image and entry.on_node_image not in LINKS):
        raise ValueError(f"catalog entry {entry.id}: unknown link {entry.link!r}")
    if entry.level not in LEVELS or entry.scope not in SCOPES:
        raise ValueError(f"catalog entry {entry.id}: level {entry.level!r} or scope {entry.scope!r} unknown")
    return entry


@functools.cache
def entries() -> tuple[Entry, ...]:
    """Every entry of catalog.yaml, in its order (the first that matches a line wins)."""
    text = resources.files("gpuchain.doctor").joinpath("catalog.yaml").read_text()
    loaded = tuple(_entry(raw) for raw in yaml.safe_load(text))
    ids = [e.id for e in loaded]
    if len(set(ids)) != len(ids):
        raise ValueError("catalog ids repeat")
    return loaded


@functools.cache
def entry(entry_id: str) -> Entry:
    """The entry by id (KeyError naming it when the catalog has none: a check cites only what exists)."""
    found = next((e for e in entries() if e.id == entry_id), None)
    if found is None:
        raise KeyError(f"no catalog entry {entry_id!r}")
    return found


@functools.lru_cache(maxsize=4096)
def find(text: str, *ids: str) -> Match | None:
    """The first line of ``text`` that one of the entries ``ids`` matches (entries tried in the
    order given, so the more specific comes first), or None; all entries when ``ids`` is empty.

    Remembered: on a big cluster the same few messages (a waiting reason's, a crash's last lines)
    recur on thousands of nodes, and each would be tried against every entry again."""
    chosen = tuple(entry(i) for i in ids) if ids else entries()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for e in chosen:
        for line in lines:
            if e.regex.search(line):
                return Match(e, line)
    return None


#: Go's and C's format verbs (%s, %v, %+v, %d, %q, %w, %08x ..., C's with a length modifier: %lu, %llu, %zu), the
#: literal %%, and Python's f-string fields ({key!r}) for gpuchain's own messages.
VERB = re.compile(r"%[-+# 0]*\d*(?:\.\d+)?(?:hh|ll|[hlzjt])?[a-zA-Z%]|\{[^{}]*\}")


def printed(line: str, args: tuple[str, ...] = ()) -> str:
    """A source's format string as its component prints it: each verb replaced by its value in
    ``args`` ("sample" for each when none are given), %q quoted as Go quotes, %% as %."""
    verbs = [m for m in VERB.finditer(line) if m.group() != "%%"]
    values = iter(args or ("sample",) * len(verbs))
    if args and len(args) != len(verbs):
        raise ValueError(f"{len(verbs)} verbs in {line!r}, {len(args)} values")

    def one(m: re.Match[str]) -> str:
        if m.group() == "%%":
            return "%"
        value = next(values)
        if m.group().endswith("!r}"):
            return repr(value)
        return f'"{value}"' if m.group().endswith("q") else value

    return VERB.sub(one, line)


def knows(line: str) -> Entry | None:
    """The entry that knows a component's message as its source writes it (format verbs left in):
    the entry quoting that very line, else the first whose pattern matches it as printed. Used to hold
    the messages recorded from the components' source (scripts/upstream-messages) to the catalog."""
    quoting = next((e for e in entries() if e.line == line), None)
    if quoting is not None:
        return quoting
    shown = printed(line)
    return next((e for e in entries() if e.regex.search(shown)), None)


@functools.lru_cache(maxsize=4096)
def known_error(text: str, link: str = "") -> Match | None:
    """The first line of ``text`` an entry above info level knows (a failure, not a progress line); with
    ``link``, the entries of that link (and those that prove a link wherever they show) are tried first, so
    a component's own words are read as its own message where another component writes the same ones (the
    toolkit's "unable to load config" is not the device plugin's). Remembered, as `find` is: a diagnosis asks
    it about every operand's messages on every node (mostly the same few, or none), and each call named every
    entry to `find` again.

    Where several entries know that line, the one that matches deepest into it wins: a Go error is its
    wrappers' words and then its cause ("unable to setup runtime: unable to load config: unable to load
    containerd config: ..."), so the entry of the innermost words names the cause, and the component that
    wrote it (the toolkit's containerd config, not the device plugin's config file that a wrapper's words
    also match)."""
    if link:
        own = _known(text, _above_info(link))
        if own is not None:
            return own
    return _known(text, _above_info())


def _known(text: str, failures: tuple[Entry, ...]) -> Match | None:
    """`known_error` over ``failures``."""
    if not failures:
        return None
    found = find(text, *(e.id for e in failures))
    if found is None:
        return None
    deepest = max(failures, key=lambda e: m.start() if (m := e.regex.search(found.line)) else -1)
    here = deepest.regex.search(found.line)
    first = found.entry.regex.search(found.line)
    return Match(deepest, found.line) if here and first and here.start() > first.start() else found


@functools.cache
def _above_info(link: str = "") -> tuple[Entry, ...]:
    """The entries above info level, in the catalog's order (of ``link``, or scope anywhere, when given)."""
    return tuple(e for e in entries() if e.level != "info" and (not link or e.link == link or e.scope == "anywhere"))


#: How the chain's components mark a line as an error: klog's E/F header, logrus' level=error/fatal,
#: the "Error:" / "ERROR:" / "FATAL" prefixes of CLIs and shell scripts, and gpuchain's own formats
#: (text ``<time> ERROR <logger>: ...``, JSON ``"level": "error"``; commands/_output) and controller-runtime's zap JSON
#: (``"level":"error"``, the GPU Operator's log: NVIDIA/gpu-operator cmd/gpu-operator/main.go@v25.3.4).
ERROR_LEVEL = re.compile(
    r"^[EF]\d{4} \d\d:\d\d:\d\d|\blevel=\"?(error|fatal|panic)\b|^(error|fatal|panic)\b:?|^\S*:\s*(error|fatal)\b"
    r'|\d \b(ERROR|CRITICAL) [\w.-]+: |"level": ?"(error|critical|dpanic|panic|fatal)"',
    re.IGNORECASE,
)


def unknown_error(text: str) -> str | None:
    """The last line at error level in ``text`` when no catalog entry above info level knows any
    line of it (the component's final word), else None."""
    if known_error(text) is not None:
        return None
    errors = [ln.strip() for ln in text.splitlines() if ERROR_LEVEL.search(ln.strip())]
    return errors[-1] if errors else None
