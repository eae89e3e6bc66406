"""The `diagnoser` command line: thin; parses, calls the library, renders."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
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

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        from diagnoser.helpfmt import tidy

        tidy(self, ctx)
        super().format_help(ctx, formatter)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        from diagnoser.helpfmt import tidy

        command = super().get_command(ctx, cmd_name) or self._feature_group().get_command(ctx, cmd_name)
        return tidy(command, ctx) if command is not None else None


app = typer.Typer(cls=_LazyGroup, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Diagnose failed GPU training jobs from their logs and recover them. Exit status: 0 done "
                  "(a verdict, even `unknown`; a run that succeeded), 1 not found or failed (no such incident or "
                  "runbook id; a supervised run that gave up; a scheduler call that failed), 2 bad input or usage "
                  "(unusable logs, a bad option, settings file or env value), 130 interrupted.")
EXIT_NOT_FOUND = 1  # the exit status convention: see the README, "Exit status"
EXIT_UNUSABLE = 2


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"diagnoser {version('diagnoser')}")
        except PackageNotFoundError:
            typer.echo("diagnoser (source checkout, not installed)")
        raise typer.Exit()


@app.callback()
def _main_options(
    show_version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit")] = False,
) -> None:
    """Diagnose failed GPU training jobs from their logs and recover them."""


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
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also note why the LLM stage did not run")] = False,
) -> None:
    """Find the first failure across all ranks and say what it was and what to do."""
    err = Console(stderr=True)
    try:
        with _workers_for(paths, workers, runbooks):
            sources, _ = resolve_inputs(paths)
            total = sum(s.size for s in sources)
            # a bar only for a person watching a long scan; never into a pipe or a machine's JSON
            show = progress and err.is_terminal and total > 256 << 20 and not (as_json and not sys.stdout.isatty())
            bar = _progress_bar(err, total) if show else None  # rich.progress is imported only for a bar
            with bar or contextlib.nullcontext():
                analysis = analyse(paths, runbook_dir=runbooks, workers=workers,
                                   on_progress=(lambda n: bar.advance(bar.task_ids[0], n)) if bar else None)
        diagnosis = redact_diagnosis(_later_stages(analysis, llm_base_url, llm_model, llm, no_remote, verbose))
    except (UnusableInput, RunbookError, ValueError) as exc:
        _fail(str(exc))
        return
    if as_json:
        sys.stdout.write(json.dumps(diagnosis.to_json_dict(), ensure_ascii=False) + "\n")
        return
    books = analysis.runbooks  # loaded once, by the analysis
    # the on-call text: the runbook the verdict points at (a catalog entry may point at one too)
    book = next((b for b in books.values() if b.catalog is None and diagnosis.runbook and b.path == diagnosis.runbook),
                None) or books.get(diagnosis.rule or "")  # else the catalog entry that decided
    render(diagnosis, book, Console())


def _workers_for(paths: list[str], workers: int | None, runbooks: Path | None) -> contextlib.AbstractContextManager:
    """Scanner processes started before a big directory is listed (see scan.preforked): it may hold
    100,000 rank logs, and workers forked after the listing would share and copy it. Inputs too
    small for workers do not pay for the fork."""
    from diagnoser.collect.files import holds_many_files
    from diagnoser.prefilter.scan import PARALLEL_MIN_FILES, preforked

    return preforked(workers, runbooks) if holds_many_files(paths, PARALLEL_MIN_FILES) else contextlib.nullcontext()


def _progress_bar(console: Console, total: int) -> Any:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress(TextColumn("scanning"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn(), console=console, transient=True)
    bar.add_task("scan", total=total or None)
    return bar


def _later_stages(analysis: Analysis, base_url: str | None, model: str | None, llm: str | None,
                  no_remote: bool | None, verbose: bool = False) -> Diagnosis:
    """The LLM stage reviews the rule verdict when an endpoint is configured (never raises: on any
    endpoint failure the rule verdict stays, with a note). A bad LLM configuration is a ValueError.
    "LLM stage off" is noted only with --verbose: an unconfigured stage is the normal offline case."""
    from diagnoser.classify import load_config
    from diagnoser.classify.stage import review, without_off_note

    config = load_config(base_url=base_url, model=model, llm=llm, no_remote=no_remote)
    diagnosis = review(analysis, config)
    return diagnosis if verbose else without_off_note(diagnosis, config)


runbooks_app = typer.Typer(help="The failure classes diagnoser recognises (shipped, site and catalog rules).",
                           invoke_without_command=True)
app.add_typer(runbooks_app, name="runbooks")
RunbooksOpt = Annotated[Path | None, typer.Option(
    "--runbooks", envvar="DIAGNOSER_RUNBOOKS", show_envvar=True,
    help="Site runbook directory: adds to the shipped runbooks and replaces those of the same id")]


def _source(book: Any) -> str:
    """The file a rule came from: a runbook file, or its catalog table."""
    if book.source or not book.catalog:
        return book.source
    from diagnoser.prefilter.catalog import CATALOG_DIR

    return str(CATALOG_DIR.parent / book.catalog)


@runbooks_app.callback()
def runbooks_command(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON (with each rule's source)")] = False,
    runbooks: RunbooksOpt = None,
) -> None:
    """List the failure classes diagnoser recognises; `runbooks show ID` prints one."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        books = load_runbooks(runbooks)
    except RunbookError as exc:
        _fail(str(exc))
        return
    if as_json:
        rows = [{**b.model_dump(mode="json", include={"id", "title", "category", "subtype", "action", "role",
                                                      "priority", "path", "overrides"}), "source": _source(b)}
                for b in books]
        sys.stdout.write(json.dumps(rows) + "\n")
        return
    from diagnoser.tables import print_rows

    print_rows(("id", "category", "subtype", "action", "role", "prio"),
               [(b.id, b.category.value, b.subtype, b.action.value, b.role.value, b.priority)
                for b in sorted(books, key=lambda b: (b.category.value, -b.priority))])


@runbooks_app.command("show")
def runbooks_show_command(
    rule_id: Annotated[str, typer.Argument(metavar="ID", help="A runbook or catalog entry id (`diagnoser runbooks`)")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the rule as JSON")] = False,
    runbooks: RunbooksOpt = None,
) -> None:
    """Print one runbook: its signatures, where it came from, and its on-call text."""
    try:
        books = {b.id: b for b in load_runbooks(runbooks)}
    except RunbookError as exc:
        _fail(str(exc))
        return
    book = books.get(rule_id)
    if book is None:
        close = sorted(i for i in books if rule_id in i)[:5]
        typer.echo(f"diagnoser: no runbook or catalog entry {rule_id!r}"
                   + (f" (did you mean {', '.join(close)}?)" if close else ""), err=True)
        raise typer.Exit(EXIT_NOT_FOUND)
    if as_json:
        data = book.model_dump(mode="json", exclude={"source"})
        sys.stdout.write(json.dumps({**data, "source": _source(book)}) + "\n")
        return
    localised = f" ({book.localised_action.value} when a node is named)" if book.localised_action else ""
    lines = [f"{book.id}: {book.title}", f"  {book.category.value} / {book.subtype} -> {book.action.value}{localised}  "
             f"(role {book.role.value}, priority {book.priority}, confidence {book.confidence})",
             f"  source: {_source(book)}" + (f" (overrides {book.overrides})" if book.overrides else "")]
    lines += [f"  signature: {sig}" for sig in book.signatures]
    if book.given_by:
        lines.append(f"  given by: {book.given_by} (a comparison across the job's lines, no signature of its own)")
    typer.echo("\n".join(lines) + "\n")
    if book.body.strip():
        typer.echo(book.body.strip())


def _register_subcommands(target: typer.Typer) -> None:
    """Feature areas add their own commands (each module keeps its CLI next to its code)."""
    from diagnoser.act.cli import register as register_act
    from diagnoser.bot.cli import register as register_bot
    from diagnoser.classify.cli import register as register_classify
    from diagnoser.config_cli import register as register_config
    from diagnoser.mcp_server.cli import register as register_mcp
    from diagnoser.metrics.cli import register as register_metrics
    from diagnoser.retrieve.cli import register as register_incidents
    from diagnoser.serve.cli import register as register_serve
    from diagnoser.slurm.cli import register as register_slurm

    for register in (register_act, register_metrics, register_slurm, register_classify, register_incidents,
                     register_bot, register_config, register_serve, register_mcp):
        register(target)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
