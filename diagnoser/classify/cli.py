"""`diagnoser rules propose`: a draft runbook from an LLM-diagnosed incident (registered by cli.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from diagnoser.models import Diagnosis

rules_app = typer.Typer(no_args_is_help=True, help="Learn rules from incidents the LLM diagnosed.")


def _default_fixtures() -> Path:
    return Path(__file__).resolve().parents[2] / "log_fixtures"


@rules_app.command("propose")
def propose_command(
    verdict: Annotated[str, typer.Argument(help="The incident's diagnosis/v1 JSON (`triage --json`), or - for stdin")],
    logs: Annotated[list[Path], typer.Argument(help="The incident's log files or directories")],
    out: Annotated[Path, typer.Option(help="Drafts directory (never runbooks/)")] = Path("runbook-drafts"),
    fixtures: Annotated[Path | None, typer.Option(help="log_fixtures directory to check false matches against")
                        ] = None,
    runbooks: Annotated[Path | None, typer.Option(help="Runbook directory [env: DIAGNOSER_RUNBOOKS]")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Verify and print the draft, write nothing")] = False,
    force: Annotated[bool, typer.Option(help="Replace an existing draft of the same id")] = False,
) -> None:
    """Turn an LLM-diagnosed incident into a DRAFT runbook, verified before it is written."""
    from diagnoser.classify.rules import ProposeError, propose_rule
    from diagnoser.prefilter.runbooks import RunbookError

    try:
        raw = sys.stdin.read() if verdict == "-" else Path(verdict).read_text(encoding="utf-8")
        diagnosis = Diagnosis.model_validate(json.loads(raw))
    except (OSError, ValueError) as exc:
        typer.echo(f"diagnoser: cannot read the verdict {verdict}: {str(exc)[:300]}", err=True)
        raise typer.Exit(2) from exc
    missing = [str(p) for p in logs if not p.exists()]
    if missing:
        typer.echo(f"diagnoser: log path not found: {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    try:
        draft = propose_rule(diagnosis, logs, out, fixtures or _default_fixtures(), runbooks,
                             write=not dry_run, force=force)
    except (ProposeError, RunbookError) as exc:
        typer.echo(f"diagnoser: no draft: {exc}", err=True)
        raise typer.Exit(1) from exc
    if dry_run:
        sys.stdout.write(draft.text)
    else:
        typer.echo(f"draft written: {draft.path}")
    typer.echo(f"signature: {draft.signature}\nverified: {draft.incident_matches} incident line(s) matched; "
               f"no false match in {draft.fixture_files} fixture file(s) and {draft.examples_checked} runbook "
               f"example(s); {len(draft.rejected)} more general candidate(s) rejected", err=True)
    if draft.overlaps:
        typer.echo(f"note: existing runbooks also match this line: {', '.join(draft.overlaps)}", err=True)


def register(app: typer.Typer) -> None:
    """Add the `rules` command group (`rules propose`) to the main app."""
    app.add_typer(rules_app, name="rules")
