"""`diagnoser incidents ...`: the learning loop on the command line.

add | list | show | search | confirm | correct | export | import. Every command takes `--store`
(default: `$DIAGNOSER_STORE`, else the user data dir) and every command that prints data takes
`--json`. A store is created, with the seed memory, on first use.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from diagnoser.models import Action, Category, Diagnosis
from diagnoser.retrieve.incident import ID_PATTERN, Incident, Outcome, Status, from_diagnosis
from diagnoser.retrieve.signature import signature_text

EXIT_UNUSABLE = 2
StoreOpt = Annotated[Path | None, typer.Option("--store", help="Incident store directory (with a memory server: "
                                                 "this host's view and spool) [env: DIAGNOSER_STORE]")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON")]
ByOpt = Annotated[str, typer.Option("--by", help="Who vouches for the verdict")]
ResolutionOpt = Annotated[str | None, typer.Option("--resolution", help="What was done about it")]
OutcomeOpt = Annotated[Outcome, typer.Option("--outcome", help="Did the action work?")]
JobOpt = Annotated[str | None, typer.Option("--job", help="Source job id")]


def _fail(message: str, code: int = EXIT_UNUSABLE) -> None:
    typer.echo(f"diagnoser: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def _store(path: Path | None) -> Iterator[Any]:
    from diagnoser.retrieve.backend import open_store
    from diagnoser.retrieve.store import StoreError

    try:
        with open_store(path) as store:
            yield store
    except StoreError as exc:
        _fail(str(exc))


def _read(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        _fail(f"{source}: {exc.strerror or exc}")
        return ""


def _is_file(arg: str) -> bool:
    try:
        return len(arg) < 4096 and "\n" not in arg and Path(arg).is_file()
    except OSError:  # e.g. a log line too long to be a file name
        return False


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")


def _diagnosis(source: str) -> Diagnosis:
    text = _read(source)
    try:
        return Diagnosis.model_validate(json.loads(text))
    except ValueError as exc:
        _fail(f"{source} is not a diagnosis/v1 verdict (`diagnoser triage --json`): {str(exc).splitlines()[0]}")
        raise


def _table(rows: list[tuple[Incident, float | None]]) -> None:
    from diagnoser.tables import print_rows

    scored = any(score is not None for _, score in rows)
    headers = ("id", *(["score"] if scored else []), "category", "subtype", "action", "status", "count", "last seen")
    print_rows(headers, [(inc.id, *([f"{score:.2f}"] if scored else []), inc.category.value, inc.subtype,
                          inc.action.value, inc.status.value, inc.count, inc.last_seen.strftime("%Y-%m-%d %H:%M"))
                         for inc, score in rows])


def _show(inc: Incident, as_json: bool, note: str = "") -> None:
    if as_json:
        _print_json(inc.to_json_dict())
        return
    if note:
        typer.echo(note)
    for key in ("id", "category", "subtype", "action", "status", "confirmed_by", "count", "first_seen", "last_seen",
                "resolution", "outcome", "source_job", "runbook", "root_cause", "culprit", "origin"):
        value = getattr(inc, key)
        if value not in (None, "", []):
            typer.echo(f"{key:>13}: {value.value if hasattr(value, 'value') else value}")
    typer.echo("    signature:")
    for line in inc.signature.splitlines():
        typer.echo(f"      {line}")


def register(app: typer.Typer) -> None:
    """Add the `incidents` command group to the diagnoser CLI."""
    sub = typer.Typer(no_args_is_help=True, help="Incident memory: past failures, their verdicts and outcomes.")
    app.add_typer(sub, name="incidents")

    @sub.command("add")
    def add(source: Annotated[str, typer.Argument(help="diagnosis/v1 JSON, or a log excerpt; - for stdin")],
            category: Annotated[Category | None, typer.Option()] = None,
            subtype: Annotated[str | None, typer.Option()] = None,
            action: Annotated[Action | None, typer.Option()] = None,
            job: JobOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Record a sighting of a failure (the same signature again only raises its count)."""
        text = _read(source)
        try:
            diagnosis: Diagnosis | None = Diagnosis.model_validate(json.loads(text))
        except ValueError:
            diagnosis = None
        if diagnosis is not None:
            override = {k: v for k, v in (("category", category), ("subtype", subtype), ("action", action)) if v}
            incident = from_diagnosis(diagnosis, source_job=job, **override)
        else:
            if not (category and subtype and action):
                _fail("a log excerpt needs --category, --subtype and --action (or give a diagnosis/v1 JSON)")
            signature = signature_text(text)
            if not signature:
                _fail(f"{source}: no usable line to remember")
            incident = Incident(signature=signature, category=category, subtype=subtype, action=action,
                                source_job=job)
        with _store(store) as st:
            stored = st.get(st.add(incident))
        _show(stored, as_json, note=f"{stored.id} (seen {stored.count}x)")

    @sub.command("list")
    def list_(category: Annotated[Category | None, typer.Option()] = None,
              status: Annotated[Status | None, typer.Option()] = None,
              limit: Annotated[int, typer.Option(help="At most this many, most recent first (0: all)")] = 20,
              store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """List incidents, most recently seen first."""
        with _store(store) as st:
            found = st.list(category=category.value if category else None, status=status.value if status else None,
                            limit=limit or None)
        if as_json:
            _print_json([i.to_json_dict() for i in found])
        else:
            _table([(i, None) for i in found])

    @sub.command("show")
    def show(incident_id: str, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Show one incident."""
        with _store(store) as st:
            inc = st.get(incident_id)
        if inc is None:
            _fail(f"no incident {incident_id}", code=1)
        _show(inc, as_json)

    @sub.command("search")
    def search(query: Annotated[str, typer.Argument(help="Log text, a file with it, or - for stdin")],
               k: Annotated[int, typer.Option("-k", help="How many neighbours")] = 5,
               mode: Annotated[str, typer.Option(help="lexical (TF-IDF) or vector (chromadb)")] = "lexical",
               store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Find the past incidents most similar to a failure text."""
        text = _read(query) if query == "-" or _is_file(query) else query
        if mode not in ("lexical", "vector"):
            _fail(f"unknown --mode {mode!r} (lexical | vector)")
        with _store(store) as st:
            found = st.search(text, k=k, mode=mode)
        from diagnoser.retrieve.vote import tally

        vote = tally(found)
        if as_json:
            _print_json({"results": [{"score": round(s, 4), "incident": i.to_json_dict()} for i, s in found],
                         "vote": vote.model_dump(mode="json") if vote else None})
            return
        _table(list(found))
        if vote:
            typer.echo(f"vote: {vote.category.value}/{vote.subtype} -> {vote.action.value} "
                       f"(confidence {vote.confidence:.2f})")

    def _vouch(source: str, status: Status, by: str, resolution: str | None, outcome: Outcome, job: str | None,
               store: Path | None, as_json: bool, **verdict: Any) -> None:
        from diagnoser.retrieve.feedback import vouch

        by_id = ID_PATTERN.match(source) and not Path(source).exists()
        target = source if by_id else _diagnosis(source)
        with _store(store) as st:
            try:
                stored = vouch(st, target, status, by, resolution, outcome, job, **verdict)
            except KeyError:
                _fail(f"no incident {source}", code=1)
            except ValueError as exc:
                _fail(str(exc))
        _show(stored, as_json, note=f"{stored.id} {status.value} by {by}")

    @sub.command("confirm")
    def confirm(source: Annotated[str, typer.Argument(help="diagnosis/v1 JSON file, - for stdin, or an incident id")],
                by: ByOpt, resolution: ResolutionOpt = None, outcome: OutcomeOpt = Outcome.UNKNOWN,
                job: JobOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Store a triage verdict a person checked as right."""
        _vouch(source, Status.CONFIRMED, by, resolution, outcome, job, store, as_json)

    @sub.command("correct")
    def correct(source: Annotated[str, typer.Argument(help="diagnosis/v1 JSON file, - for stdin, or an incident id")],
                by: ByOpt, category: Annotated[Category | None, typer.Option()] = None,
                subtype: Annotated[str | None, typer.Option()] = None,
                action: Annotated[Action | None, typer.Option()] = None,
                resolution: ResolutionOpt = None, outcome: OutcomeOpt = Outcome.UNKNOWN,
                job: JobOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Store a triage verdict with the right category/subtype/action."""
        if not (category or subtype or action):
            _fail("correct needs at least one of --category, --subtype, --action")
        _vouch(source, Status.CORRECTED, by, resolution, outcome, job, store, as_json,
               category=category, subtype=subtype, action=action)

    @sub.command("export")
    def export(out: Annotated[str, typer.Argument(help="JSONL file to write, - for stdout")] = "-",
               store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Write every incident as JSONL (to share a memory, or to back it up)."""
        with _store(store) as st:
            if out == "-":
                st.export_jsonl(sys.stdout)
                return
            n = st.export_jsonl(Path(out))
        if as_json:
            _print_json({"exported": n, "path": out})
        else:
            typer.echo(f"exported {n} incidents to {out}")

    @sub.command("import")
    def import_(source: Annotated[str | None, typer.Argument(help="JSONL from `export`, a journal.jsonl, -")] = None,
                seed: Annotated[bool, typer.Option("--seed", help="Import the shipped seed memory (refresh)")] = False,
                store: StoreOpt = None, as_json: JsonOpt = False) -> None:
        """Merge incidents from JSONL (same signature: counts add up; re-importing is harmless)."""
        from diagnoser.retrieve.seed import shipped_seed
        from diagnoser.retrieve.store import StoreError

        if (source is None) == (not seed):
            _fail("give a JSONL file (or -) or --seed")
        if source and source != "-" and not Path(source).is_file():
            _fail(f"{source}: not a readable file")
        with _store(store) as st:
            try:
                if seed:
                    report = st.import_incidents(shipped_seed())
                else:
                    report = st.import_jsonl(getattr(sys.stdin, "buffer", sys.stdin) if source == "-" else Path(source))
            except StoreError as exc:
                _fail(f"{source}: {exc}")
        for note in report.unread:
            typer.echo(f"diagnoser: {source}: {note}", err=True)
        data = {"added": report.added, "merged": report.merged, "skipped": report.skipped, "unread": report.unread}
        if as_json:
            _print_json(data)
        else:
            typer.echo(f"imported {source or 'the seed memory'}: {report.added} added, {report.merged} merged, "
                       f"{report.skipped} unchanged")
