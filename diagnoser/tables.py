"""Tables that never cut an id or a path: rich on a terminal (long cells fold), tab-separated lines in a pipe."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text


def print_rows(headers: Sequence[str], rows: Iterable[Sequence[object]], console: Console | None = None) -> None:
    """One table on stdout. Not a terminal (`| grep`, `| cut -f1`, a file): a header line and one tab-separated
    line per row, every cell whole. A terminal: a rich table whose cells fold instead of ending in '…'."""
    console = console or Console()
    if not console.is_terminal:
        out = console.file if console.file is not None else sys.stdout
        for row in (headers, *rows):
            out.write("\t".join(_cell(c) for c in row) + "\n")
        return
    table = Table(header_style="bold")
    for name in headers:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(Text(_cell(c)) for c in row))  # cells are data, never markup
    console.print(table)


def _cell(value: object) -> str:
    return "" if value is None else str(value).replace("\t", " ").replace("\n", " ")
