"""Render a verdict for a person: verdict panel, culprit, evidence with source:line, next steps."""

from __future__ import annotations

import re

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from diagnoser.hostlist import compress_hostlist
from diagnoser.models import Category, Diagnosis
from diagnoser.prefilter.runbooks import Runbook

_COLOURS = {Category.HARDWARE: "red", Category.INFRA: "yellow", Category.USER_CODE: "magenta",
            Category.UNKNOWN: "white"}


def _headline(d: Diagnosis) -> Text:
    colour = _COLOURS[d.category]
    t = Text()
    t.append(f"{d.category.value}", style=f"bold {colour}")
    t.append(f" / {visible(d.subtype)}", style=colour)
    t.append("  →  ", style="dim")
    t.append(d.action.value, style="bold cyan")
    t.append(f"   confidence {d.confidence:.2f}, decided by {d.decided_by.value}", style="dim")
    return t


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: object) -> str:
    """`text` with control characters (terminal escapes among them) shown as `\\xNN`: a file name
    or a log line never moves the cursor, recolours or retitles the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", str(text))


def plain(text: object, style: str = "") -> Text:
    """Text for the terminal that is never read as rich markup and carries no escape sequence."""
    return Text(visible(text), style=style)


def _culprit(d: Diagnosis) -> Text:
    c = d.culprit
    parts = []
    if c.nodes:
        parts.append(f"nodes: {compress_hostlist(c.nodes)}")
    if c.ranks:
        parts.append(f"ranks: {', '.join(map(str, c.ranks))}")
    if c.gpus:
        parts.append(f"GPUs: {', '.join(c.gpus)}")
    return plain("Culprit  " + ("; ".join(parts) if parts else "not localised"), style="bold")


def _evidence(d: Diagnosis) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, expand=True, pad_edge=False)
    table.add_column("source:line", style="cyan", no_wrap=True, overflow="fold", max_width=48)
    table.add_column("evidence", overflow="fold")
    for e in d.evidence:
        table.add_row(plain(f"{e.source}:{e.line}"), plain(e.text))  # file names and log text are never markup
    return table


def render(d: Diagnosis, runbook: Runbook | None, console: Console) -> None:
    body: list = [_headline(d), plain(d.root_cause), _culprit(d)]
    if d.first_failure:
        when = f" at {d.first_failure.time.isoformat()}" if d.first_failure.time else ""
        body.append(plain(f"First failure  {d.first_failure.source}:{d.first_failure.line}{when}", style="dim"))
    console.print(Panel(Group(*body), title="diagnoser verdict", border_style=_COLOURS[d.category]))
    if d.evidence:
        console.print(_evidence(d))
    if d.similar_incidents:
        table = Table("similar incident", "score", "category", "action", box=None, header_style="bold")
        table.columns[0].overflow = "fold"  # an id is never cut
        for s in d.similar_incidents:
            table.add_row(plain(s.id), f"{s.score:.2f}", s.category.value, s.action.value)
        console.print(table)
    for note in d.notes:
        console.print(plain(f"note: {note}", style="dim"))
    for w in d.warnings:
        console.print(plain(f"warning: {w.source}: {w.message}", style="yellow"))
    if runbook:
        steps = "\n\n".join(f"**{h}**\n\n{runbook.section(h)}" for h in ("What to check", "How to fix")
                            if runbook.section(h))
        if steps:
            from rich.markdown import Markdown  # markdown-it costs ~0.08 s to import; only this needs it

            console.print(Panel(Markdown(steps), title=f"runbook: {runbook.path}", border_style="dim"))
        elif runbook.catalog and runbook.body:  # a vendor catalog entry: its documented meaning and source
            console.print(Panel(plain(runbook.body), title=f"catalog: {runbook.catalog} ({runbook.id})",
                                border_style="dim"))
    s = d.stats
    console.print(Text(f"{s.files} files, {s.bytes / 1e6:.1f} MB, {s.lines} lines, {s.matches} signature "
                       f"hits in {s.seconds:.2f} s", style="dim"))
