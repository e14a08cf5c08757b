"""The rich side of :mod:`gpuchain.commands._output`: consoles and the renderers for people and pipes.

Kept apart so that a process that never prints a table (a node agent serving for weeks) never
imports rich: ``_output`` loads this module the first time something is shown.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleDimensions, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpuchain.commands._format import UNLIMITED, OutputFormat


class _Console(Console):
    """A console that renders for its reader: see :func:`for_terminal` and :func:`for_pipe`.

    Every ``print`` goes through here, so a table printed by any command (or by a layer that
    was handed this console) is plain columns in a pipe, at unlimited width, lines without
    trailing blanks.
    """

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.is_terminal:
            super().print(*(for_terminal(o, self) for o in objects), **kwargs)
            return
        if not any(isinstance(o, Table | Panel | Group) for o in objects):
            super().print(*objects, **kwargs)
            return
        with self.capture() as captured:
            super().print(*(for_pipe(o) for o in objects), **kwargs)
        self.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))

    def print_wide(self, renderable: RenderableType) -> None:
        """Print at unlimited width on a terminal too (``-o wide``): the terminal wraps, rich never cuts."""
        width = self._width
        self._width = UNLIMITED
        try:
            self.print(renderable, crop=False)
        finally:
            self._width = width

    @property
    def size(self) -> ConsoleDimensions:
        # A pipe has no width: an exported COLUMNS (which rich would honour) must not cut columns.
        if not self.is_terminal:
            return ConsoleDimensions(UNLIMITED, 25)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


def _console(stderr: bool = False) -> Console:
    return _Console(stderr=stderr, markup=False, emoji=False, highlight=False)


console = _console()
err_console = _console(stderr=True)


def for_pipe(renderable: RenderableType) -> RenderableType:
    """``renderable`` as plain columns: tables lose their boxes, panels become a title line and an indented body.

    A pipe reads columns separated by spaces with a header row (like ``kubectl get``); box
    drawing characters and panel frames only get in the way of ``grep``, ``awk`` and ``cut``.
    """
    if isinstance(renderable, Table):
        renderable.box = None
        renderable.show_edge = False
        renderable.padding = (0, 3, 0, 0)
        for column in renderable.columns:
            column.overflow = "ignore"
            column.no_wrap = True
        # A title or caption is laid out at the table's width and would wrap: print them as lines.
        title, caption = renderable.title, renderable.caption
        renderable.title = renderable.caption = None
        lines = [t if isinstance(t, Text) else Text(str(t)) for t in (title, caption) if t]
        if not lines:
            return renderable
        return Group(*lines[: 1 if title else 0], renderable, *lines[1 if title else 0 :])
    if isinstance(renderable, Panel):
        title = renderable.title
        body = for_pipe(renderable.renderable)
        if not title:
            return body
        return Group(title if isinstance(title, Text) else Text(str(title)), body)
    if isinstance(renderable, Group):
        return Group(*(for_pipe(r) for r in renderable.renderables))
    return renderable


def for_terminal(renderable: RenderableType, console: Console | None = None) -> RenderableType:
    """``renderable`` for a terminal ``console`` wide: identifiers stay whole, prose wraps, and a
    table too wide for the terminal leaves out its right-most columns, as ``kubectl get`` shows
    fewer columns than ``-o wide``.

    A column whose cells are single words (UUIDs, PCI bus ids, node names, finding ids, resource
    names) never wraps: a UUID folded over five lines cannot be read or copied. A column with
    spaces in its cells wraps at them. When even that is wider than the terminal, columns are left
    out from the right (never the first) and a line under the table names them and ``-o wide``.
    """
    if isinstance(renderable, Table):
        for column in renderable.columns:
            cells = list(column.cells) or [column.header]
            whole = all(" " not in _plain(c).strip() for c in cells)
            column.no_wrap = whole
            column.overflow = "ignore" if whole else "fold"
        if console is None:
            return renderable
        left_out = _fit(renderable, console)
        if not left_out:
            return renderable
        note = Text(f"({', '.join(left_out)} left out at {console.width} columns; -o wide shows every column)")
        return Group(renderable, note)
    if isinstance(renderable, Panel):
        renderable.renderable = for_terminal(renderable.renderable, console)
        return renderable
    if isinstance(renderable, Group):
        return Group(*(for_terminal(r, console) for r in renderable.renderables))
    return renderable


def _plain(cell: RenderableType) -> str:
    return cell.plain if isinstance(cell, Text) else cell if isinstance(cell, str) else ""


def _fit(table: Table, console: Console) -> list[str]:
    """Drop ``table``'s right-most columns (keeping the first) until it fits ``console``; their headers.

    Measured here rather than by rich, which squeezes every column (identifiers included) to fit.
    """
    left_out: list[str] = []
    while len(table.columns) > 1 and _narrowest(table) > console.width:
        column = table.columns.pop()
        left_out.insert(0, _plain(column.header) or "?")
    return left_out


def _narrowest(table: Table) -> int:
    """The fewest terminal cells ``table`` can take: unwrapped columns whole, the others as wide as
    their longest word, plus padding and rules."""
    _, right, _, left = table.padding
    widths = []
    for column in table.columns:
        texts = [_plain(c) for c in (column.header, *column.cells)]
        if column.no_wrap:
            widths.append(max(cell_len(line) for t in texts for line in t.splitlines() or [""]))
        else:
            widths.append(max((cell_len(word) for t in texts for word in t.split()), default=0))
    n = len(widths)
    rules = (n + 1 if table.show_edge else n - 1) if table.box else 0
    return sum(widths) + n * (left + right) + rules


def show(renderable: RenderableType, *, fmt: OutputFormat = OutputFormat.table, target: Console | None = None) -> None:
    """Print a rich renderable for its reader; ``-o wide`` on a terminal prints it at full width."""
    out = target or console
    if fmt is OutputFormat.wide and isinstance(out, _Console) and out.is_terminal:
        out.print_wide(renderable)
    else:
        out.print(renderable)
