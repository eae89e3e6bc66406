"""The `diagnoser` command line: thin; parses, calls the library, renders."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from typer.core import TyperGroup

from diagnoser.classify.redact import redact_diagnosis
from diagnoser.collect.files import UnusableInput
from diagnoser.models import Diagnosis
from diagnoser.prefilter.runbooks import RunbookError, load_runbooks
from diagnoser.render import render
from diagnoser.triage import Analysis, analyse, resolve_inputs


class _LazyGroup(TyperGroup):
    """The feature areas' commands (run, slurm, incidents, bot, report ...) are imported only when
    one of them is asked for or listed: `diagnoser triage` does not pay for their imports."""

    _features: TyperGroup | None = None  # (typer may vendor click: no click import here)

    def _feature_group(self) -> TyperGroup:
        if _LazyGroup._features is None:
            features = typer.Typer()
            _register_subcommands(features)
            _LazyGroup._features = typer.main.get_group(features)
        return _LazyGroup._features

    def list_commands(self, ctx: typer.Context) -> list[str]:
        own = super().list_commands(ctx)
        return own + [n for n in self._feature_group().list_commands(ctx) if n not in own]

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        return super().get_command(ctx, cmd_name) or self._feature_group().get_command(ctx, cmd_name)


app = typer.Typer(cls=_LazyGroup, no_args_is_help=True, add_completion=False,
                  help="Diagnose failed GPU training jobs from their logs and recover them.")
EXIT_UNUSABLE = 2


def _fail(message: str) -> None:
    typer.echo(f"diagnoser: {message}", err=True)
    raise typer.Exit(EXIT_UNUSABLE)


@app.command("triage")
def triage_command(
    paths: Annotated[list[str], typer.Argument(help="Log files, directories of per-rank logs, or - for stdin")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the diagnosis/v1 JSON object")] = False,
    runbooks: Annotated[Path | None, typer.Option(help="Runbook directory [env: DIAGNOSER_RUNBOOKS]")] = None,
    workers: Annotated[int | None, typer.Option(help="Scanner processes (default: CPU count)")] = None,
    progress: Annotated[bool, typer.Option(help="Progress bar on stderr for long scans")] = True,
    llm_base_url: Annotated[str | None, typer.Option(
        "--llm-base-url", help="OpenAI-compatible endpoint [env: DIAGNOSER_LLM_BASE_URL]")] = None,
    llm_model: Annotated[str | None, typer.Option("--llm-model", help="[env: DIAGNOSER_LLM_MODEL]")] = None,
    llm: Annotated[str | None, typer.Option("--llm", help="'none': rules + retrieval only")] = None,
    no_remote: Annotated[bool | None, typer.Option(
        "--no-remote", help="Refuse LLM endpoints that are not on this machine")] = None,
) -> None:
    """Find the first failure across all ranks and say what it was and what to do."""
    err = Console(stderr=True)
    try:
        sources, _ = resolve_inputs(paths)
        total = sum(s.size for s in sources)
        # a bar only for a person watching a long scan; never into a pipe or a machine's JSON
        show = progress and err.is_terminal and total > 256 << 20 and not (as_json and not sys.stdout.isatty())
        with Progress(TextColumn("scanning"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      TimeRemainingColumn(), console=err, disable=not show, transient=True) as bar:
            task = bar.add_task("scan", total=total or None)
            analysis = analyse(paths, runbook_dir=runbooks, workers=workers,
                               on_progress=lambda n: bar.advance(task, n))
        diagnosis = redact_diagnosis(_later_stages(analysis, llm_base_url, llm_model, llm, no_remote))
    except (UnusableInput, RunbookError, ValueError) as exc:
        _fail(str(exc))
        return
    if as_json:
        sys.stdout.write(json.dumps(diagnosis.to_json_dict(), ensure_ascii=False) + "\n")
        return
    books = {b.id: b for b in load_runbooks(runbooks)}
    # the on-call text: the runbook the verdict points at (a catalog entry may point at one too)
    book = next((b for b in books.values() if b.catalog is None and diagnosis.runbook and b.path == diagnosis.runbook),
                None) or books.get(diagnosis.rule or "")  # else the catalog entry that decided
    render(diagnosis, book, Console())


def _later_stages(analysis: Analysis, base_url: str | None, model: str | None, llm: str | None,
                  no_remote: bool | None) -> Diagnosis:
    """The LLM stage reviews the rule verdict when an endpoint is configured (never raises: on any
    endpoint failure the rule verdict stays, with a note). A bad LLM configuration is a ValueError."""
    from diagnoser.classify import load_config
    from diagnoser.classify.stage import review

    config = load_config(base_url=base_url, model=model, llm=llm, no_remote=no_remote)
    return review(analysis, config)


@app.command("runbooks")
def runbooks_command(
    as_json: Annotated[bool, typer.Option("--json")] = False,
    runbooks: Annotated[Path | None, typer.Option(help="Runbook directory [env: DIAGNOSER_RUNBOOKS]")] = None,
) -> None:
    """List the failure classes diagnoser recognises."""
    try:
        books = load_runbooks(runbooks)
    except RunbookError as exc:
        _fail(str(exc))
        return
    if as_json:
        rows = [b.model_dump(mode="json", include={"id", "title", "category", "subtype", "action", "role",
                                                   "priority", "path"}) for b in books]
        sys.stdout.write(json.dumps(rows) + "\n")
        return
    from rich.table import Table

    table = Table("id", "category", "subtype", "action", "role", "prio", header_style="bold")
    for b in sorted(books, key=lambda b: (b.category.value, -b.priority)):
        table.add_row(b.id, b.category.value, b.subtype, b.action.value, b.role.value, str(b.priority))
    Console().print(table)


def _register_subcommands(target: typer.Typer) -> None:
    """Feature areas add their own commands (each module keeps its CLI next to its code)."""
    from diagnoser.act.cli import register as register_act
    from diagnoser.bot.cli import register as register_bot
    from diagnoser.classify.cli import register as register_classify
    from diagnoser.mcp_server.cli import register as register_mcp
    from diagnoser.metrics.cli import register as register_metrics
    from diagnoser.retrieve.cli import register as register_incidents
    from diagnoser.slurm.cli import register as register_slurm

    for register in (register_act, register_metrics, register_slurm, register_classify, register_incidents,
                     register_bot, register_mcp):
        register(target)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
