"""``cairn index``, ``search``, ``ask`` and ``status``: the index and questions from the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cairn import contract
from cairn.cli.common import _open_for_query, _print_json, _writer_lock
from cairn.config import Config
from cairn.progress import PRIOR_TOKENS_PER_S, ProgressLines, RunEstimate, VectorWork, left_words, phase_words
from cairn.relevance import RELEVANCE_TEXT
from cairn.services import Services

if TYPE_CHECKING:
    from cairn.answers import Answer
    from cairn.app import Cairn


#: A bar's layout: tqdm's own but for its time left, which is the phase's alone; the run's follows as a postfix.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"


def _progress_bar(estimate: RunEstimate) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """The run's progress on stderr: on a terminal a tqdm bar per phase (notes read, then passages embedded, each
    with its rate, and the time left in the whole run: ``estimate``), else a plain line when a phase starts, every
    :data:`~cairn.progress.EVERY_S` seconds and when it ends (:class:`~cairn.progress.ProgressLines`).
    Returns (callback, close)."""
    if not sys.stderr.isatty():
        say = ProgressLines(lambda line: print(line, file=sys.stderr, flush=True), estimate=estimate)
        return say, lambda: None
    from tqdm import tqdm

    # A terminal that says it is 0 columns wide or 0 lines high (some pseudo-terminals) would get no bar from tqdm.
    width: dict[str, Any] = {"dynamic_ncols": True} if all(_size(sys.stderr)) else {"ncols": 80, "nrows": 24}
    bar: Any = None  # one phase's bar at a time, each left on its own line once its phase is over
    finished = ""  # the phase whose bar was closed complete (the indexer may say so twice)

    def progress(phase: str, done: int, total: int) -> None:
        nonlocal bar, finished
        estimate.observe(phase, done, total)
        if bar is not None and bar.desc != phase_words(phase)[0]:
            close()
        if bar is None:
            if done >= total and phase == finished:
                return
            finished = phase if done >= total else ""
            label, unit = phase_words(phase)
            bar = tqdm(total=total, desc=label, unit=f" {unit}s", file=sys.stderr, bar_format=BAR_FORMAT, **width)
        left = estimate.left()
        if left is not None and (done < total or left > 0):
            bar.set_postfix_str(f"{left_words(left)} in all", refresh=False)
        bar.total = total
        bar.update(done - bar.n)
        if done >= total:
            finished = phase
            close()

    def close() -> None:
        nonlocal bar
        if bar is not None:
            bar.close()
            bar = None

    return progress, close


def _size(stream: Any) -> tuple[int, int]:
    """(columns, lines) of the terminal ``stream`` writes to; (0, 0) when it cannot say."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (OSError, ValueError):
        return 0, 0
    return size.columns, size.lines


def _stop_on_interrupt(stop: threading.Event, interrupted: threading.Event) -> Callable[[], None]:
    """The first Ctrl-C (SIGINT) sets ``interrupted`` and ``stop`` (the run ends between notes or between a few
    dozen texts' vectors, keeping what it wrote); a second one interrupts at once (``KeyboardInterrupt``).
    Returns the undo."""

    def on_sigint(signum: int, frame: object) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)

    def undo() -> None:
        signal.signal(signal.SIGINT, previous)

    return undo


def _run_progress(cairn: Cairn) -> tuple[Callable[[str, int, int], None], Callable[[], None]]:
    """:func:`_progress_bar` for a whole run of ``cairn``'s index: its time left covers every pass to come."""
    estimate = RunEstimate(
        lambda: VectorWork(*cairn.store.pending_tokens()),
        prior_tokens_per_s=PRIOR_TOKENS_PER_S * cairn.embedder.threads,
    )
    return _progress_bar(estimate)


def cmd_index(args: argparse.Namespace, config: Config) -> int:
    """One-shot index. Refused (``AlreadyRunning``, exit 1) while a daemon or another ``cairn index`` writes this
    index: the message names it (pid, URL from service.json) and says to use ``POST /index/reindex`` / the tray.
    Ctrl-C stops the run early (exit 130); what it wrote is kept and the next run carries on from there."""
    from cairn.app import Cairn
    from cairn.memory import fix_mmap_threshold

    config.require_vault()
    fix_mmap_threshold()
    lock = _writer_lock(config).acquire()
    try:
        cairn = Cairn(config)
        interrupted = threading.Event()
        progress, close = _run_progress(cairn)
        undo = _stop_on_interrupt(cairn.indexing.stop_requested, interrupted)
        try:
            # A person waits for this run: the model runs at this process's priority, not as background work.
            report = cairn.indexing.index(full=args.full, progress=progress, foreground=True)
        finally:
            undo()
            close()
            stats = cairn.indexing.stats()
            cairn.close()
    finally:
        lock.release()
    if interrupted.is_set():
        print(_stopped_text(stats), file=sys.stderr)
        return 130
    return _say_indexed(args, config, report, stats)


def _stopped_text(stats: dict[str, Any]) -> str:
    """What a run stopped by Ctrl-C says on stderr: what is in the index now, and how to carry on."""
    return (
        f"Stopped: {stats['notes']:,} notes indexed, {stats['vectors']:,} of {stats['vectors'] + stats['pending']:,} "
        "passages embedded; what was done is kept. Run `cairn index` again to carry on."
    )


def _say_indexed(args: argparse.Namespace, config: Config, report: Any, stats: dict[str, Any]) -> int:
    """The finished run's report: one JSON document with ``--json``, else its summary lines on stdout."""
    if args.json:
        _print_json({**report.to_json(), "stats": {k: stats[k] for k in ("notes", "chunks", "vectors", "pending")}})
        _warn_if_no_notes(config, stats)
        return 0
    print(
        f"Indexed {config.vault}: {report.scanned} files scanned — {report.added} added, {report.updated} updated, "
        f"{report.unchanged} unchanged, {report.deleted} removed, {len(report.skipped)} skipped."
    )
    pdfs = f" (of them {stats['pdfs']} PDFs)" if stats.get("pdfs") else ""
    print(
        f"{stats['notes']} notes{pdfs}, {stats['chunks']} chunks, {stats['vectors']} vectors; "
        f"{report.texts_embedded} texts embedded; keyword-ready in {report.keyword_ready_s:.1f} s, "
        f"done in {report.elapsed_s:.1f} s."
    )
    if report.cache_pruned:
        print(f"Dropped {report.cache_pruned} cached vectors of text no note uses any more (cached over 30 days ago).")
    _warn_if_no_notes(config, stats)
    for path, reason in report.skipped:
        print(f"  skipped {path}: {reason}")
    for path, reason in report.warnings:
        print(f"  warning {path}: {reason}")
    for path, reason in [*report.deferred, *report.not_downloaded]:  # kept as last indexed, not deleted
        print(f"  kept {path or '.'}: {reason}")
    told = {p for p, _ in report.skipped}
    earlier = [e for e in stats.get("errors", []) if e.get("skipped") and e["filePath"] not in told]
    if earlier:  # unchanged since an earlier run skipped them: still not in the index, so say so again
        print(f"Still not indexed (unchanged since an earlier run skipped them): {len(earlier)} file(s).")
        for e in earlier:
            print(f"  skipped {e['filePath']}: {e['reason']}")
    return 0


def _warn_if_no_notes(config: Config, stats: dict[str, Any]) -> None:
    """``Warning: no Markdown notes found in …`` on stderr when the index holds no note and none was skipped."""
    if not stats.get("notes") and not stats.get("errors"):
        assert config.vault is not None
        print(
            f"Warning: {contract.no_notes_text(config.vault, obsidian=(config.vault / '.obsidian').is_dir())}",
            file=sys.stderr,
        )


def _say_coverage(coverage: contract.IndexCoverage | None) -> None:
    """:func:`cairn.contract.coverage_notice` on stderr (stdout keeps only the results, ``--json`` included)."""
    notice = contract.coverage_notice(coverage)
    if notice is not None:
        print(f"Note: {notice} `cairn index` (or a running `cairn serve`) finishes the index.", file=sys.stderr)


def _index_is_empty(services: Services) -> bool:
    return not services.indexing.stats().get("notes")


def cmd_search(args: argparse.Namespace, config: Config) -> int:
    wanted = contract.SearchRequest.parse(
        {"query": args.text, "top_k": args.top_k, "tags": args.tag, "folders": args.folder}, default_top_k=config.top_k
    )
    from cairn.app import build_services

    cairn = _open_for_query(config, _run_progress)
    try:
        services = build_services(cairn)
        result = services.search.search(wanted, services.caller(None))
        empty = not result.hits and _index_is_empty(services)
    finally:
        cairn.close()
    _say_coverage(result.coverage)
    if args.json:
        _print_json(contract.search_json(result))
        if empty:
            print(f"Warning: {contract.empty_index_text(config.vault)}", file=sys.stderr)
        return 0
    if result.recent:
        return _print_recent(result, contract.empty_index_text(config.vault) if empty else contract.NO_RECENT_TEXT)
    if not result.hits:
        print(contract.empty_index_text(config.vault) if empty else contract.NO_RESULTS_TEXT)
    for i, h in enumerate(result.hits, 1):
        where = f"p.{h.page}" if h.page else (f"lines {h.lines[0]}–{h.lines[1]}" if h.lines else "")
        label = RELEVANCE_TEXT[contract.hit_relevance(h)]
        print(
            f"{i}. {h.file_path}"
            + (f" › {h.symbol}" if h.symbol else "")
            + f"  ({where}{', ' if where else ''}{label})"
        )
        print(f"   {h.snippet}")
    return 0


def _print_recent(result: Any, nothing: str) -> int:
    """``cairn search ""``: the most recently modified notes, newest first, each with when it was modified (local
    time) and its first passage; ``nothing`` when there is none."""
    import datetime as _dt

    if not result.hits:
        print(nothing)
        return 0
    print(f"The {len(result.hits)} most recently modified notes:")
    for i, h in enumerate(result.hits, 1):
        when = _dt.datetime.fromtimestamp(h.modified_at).strftime("%Y-%m-%d %H:%M")
        print(f"{i}. {h.file_path}  (modified {when})")
        if h.snippet:
            print(f"   {h.snippet}")
    return 0


def cmd_ask(args: argparse.Namespace, config: Config) -> int:
    """``cairn ask``: one answer; with ``--chat``, then follow-ups read from stdin, each asked with the turns before
    it (the ``history`` of ``POST /ask``, within the same limits: the last turns, answers cut to the limit)."""
    from cairn.app import build_services
    from cairn.llm import answer_model

    wanted = contract.AskRequest.parse(
        {"question": args.text, "top_k": args.top_k, "tags": args.tag}, default_top_k=config.top_k
    )
    cairn = _open_for_query(config, _run_progress)
    history: list[dict[str, str]] = []
    try:
        # The one ask path: the configured model (what a remote one must not see withheld from it), or none.
        services = build_services(cairn, model=answer_model(config))
        while True:
            answer = asyncio.run(services.answers.answer(wanted, services.caller(None)))
            if answer.not_found and _index_is_empty(services):
                print(f"Warning: {contract.empty_index_text(config.vault)}", file=sys.stderr)
            if not history:
                _say_coverage(answer.coverage)
            if args.json:
                _print_json(contract.agent_answer_json(answer))
                return 0
            _print_answer(answer, config)
            if not args.chat:
                return 0
            history = [
                *history,
                {"question": wanted.question, "answer": answer.text[: contract.LIMITS.history_answer_chars]},
            ]
            history = history[-contract.LIMITS.history_turns :]
            question = _follow_up()
            if not question:
                return 0
            wanted = contract.AskRequest.parse(
                {"question": question, "top_k": args.top_k, "tags": args.tag, "history": history},
                default_top_k=config.top_k,
            )
    finally:
        cairn.close()


def _follow_up() -> str:
    """The next question from stdin (a prompt on stderr when it is a terminal); "" at an empty line or its end."""
    if sys.stdin.isatty():
        print("\nFollow-up (an empty line ends): ", end="", file=sys.stderr, flush=True)
    line = sys.stdin.readline().strip()
    print(f"\n> {line}\n" if line and not sys.stdin.isatty() else "")  # a piped question is shown with its answer
    return line


def _print_answer(answer: Answer, config: Config) -> None:
    """An answer as ``cairn ask`` prints it: the text (a model's sentences that no passage they cite supports marked
    ⚠), its sources, and a line saying how it was made when no model wrote it, or what the marks mean."""
    from cairn.answers import sources_text

    print(_marked(answer.text, [u["text"] for u in answer.unsupported]))
    if answer.sources:  # the answer's text never lists them: printed from its sources
        print("\n" + sources_text(answer.sources))
    if answer.error is not None:
        sys.stdout.flush()
        print(f"Warning: {answer.error}", file=sys.stderr)
    elif answer.fallback is not None:
        print(f"\n(Built from your notes' own sentences. {answer.fallback})")
    elif answer.weak:
        print("\n(The evidence was weak: these are the closest passages; no language model was asked.)")
    elif answer.unsupported:
        many = len(answer.unsupported) > 1
        print(
            f"\n(⚠ {len(answer.unsupported)} {'sentences' if many else 'sentence'} of the language model's answer "
            f"{'are' if many else 'is'} not backed by a passage {'they cite' if many else 'it cites'}: "
            f"it may have made {'them' if many else 'it'} up.)"
        )
    elif not answer.not_found and not answer.grounded:
        print(
            "\n(Built from your notes' own sentences: "
            + ("the language model did not answer.)" if config.llm.configured else "no language model is configured.)")
        )
    sys.stdout.flush()


def _marked(text: str, sentences: list[str], mark: str = " ⚠") -> str:
    """``text`` with ``mark`` after each of ``sentences``, found in order (one not found is left unmarked)."""
    out, at = [], 0
    for sentence in sentences:
        found = text.find(sentence, at) if sentence else -1
        if found >= 0:
            out.append(text[at : found + len(sentence)] + mark)
            at = found + len(sentence)
    return "".join(out) + text[at:]


def _running_daemons(config: Config) -> list[dict[str, Any]]:
    """Every vault's daemon advertised in the data folder that answers now: ``[{vault, url, mcpUrl, pid}]``."""
    from cairn.discovery import running_daemons

    return [
        {"vault": r["vault"], "url": r["url"], "mcpUrl": r.get("mcpUrl"), "pid": r.get("pid")}
        for r in running_daemons(config.data_dir)
    ]


def _print_daemons(daemons: list[dict[str, Any]], as_json: bool) -> int:
    """``cairn status`` without a vault: the daemons that run, one line each (or ``{"daemons": [...]}``)."""
    if as_json:
        _print_json({"daemons": daemons})
        return 0
    if not daemons:
        print("Daemons:  none running (start one: `cairn serve --vault PATH`; an index: `cairn status --vault PATH`)")
    for d in daemons:
        mcp = f", MCP at {d['mcpUrl']}" if d["mcpUrl"] else ""
        print(f"Daemon:   {d['vault']} at {d['url']}{mcp} (pid {d['pid']})")
    return 0


def _daemon_probe(config: Config) -> dict:
    """This vault's daemon ``{url, pid}`` when it runs and proves it serves this vault (its record's pid alive,
    its ``/health`` naming this vault: :func:`cairn.discovery.own_daemon`), else ``{}``; ``ignored`` says why a
    stale record was not believed."""
    from cairn.discovery import own_daemon

    record, why = own_daemon(config)
    if record is not None:
        return {"url": record["url"], "pid": record.get("pid")}
    return {"ignored": why} if why else {}


def _daemon_memory(config: Config, url: str) -> dict | None:
    """The running daemon's memory breakdown (``memory`` of its ``/index/stats``: :mod:`cairn.memory`), None when
    it cannot be read (no token yet, an older daemon, no answer)."""
    from cairn.secrets import read_token

    try:
        token = read_token(config)
        if token is None:
            return None
        request = urllib.request.Request(url + "/index/stats", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            memory = json.loads(resp.read()).get("memory")
        return memory if isinstance(memory, dict) else None
    except (OSError, ValueError, AttributeError, urllib.error.URLError):
        return None


def cmd_status(args: argparse.Namespace, config: Config) -> int:
    from cairn.index import index_stats_json
    from cairn.store import IndexStats, Store

    if config.vault is None:  # no vault named: every vault's daemon that runs
        return _print_daemons(_running_daemons(config), args.json)
    out: dict[str, Any] = {"vault": str(config.require_vault()), "database": str(config.db_path)}
    if config.db_path.exists():
        store = Store(config.db_path, readonly=True)
        try:
            out.update(index_stats_json(store.stats()))
        finally:
            store.close()
    else:
        out.update(index_stats_json(IndexStats()))
    probe = _daemon_probe(config)
    daemon = probe if "url" in probe else None
    out["daemon"] = {"running": daemon is not None, **probe}
    out["memory"] = _daemon_memory(config, daemon["url"]) if daemon else None
    out["daemons"] = daemons = _running_daemons(config)
    if args.json:
        _print_json(out)
        return 0
    import datetime as _dt

    last = out.get("lastIngestedAt")
    last_s = _dt.datetime.fromtimestamp(last).isoformat(timespec="seconds") if last else "never"
    print(f"Vault:    {out['vault']}")
    print(f"Index:    {out['notes']} notes, {out['chunks']} chunks, {out['vectors']} vectors, {out['pending']} pending")
    print(f"Updated:  {last_s}")
    partial = len(out["errors"]) - out["skipped"]
    print(
        f"Skipped:  {out['skipped']} file(s)"
        + (f"; {partial} more indexed in part or with a warning" if partial else "")
        + " (cairn status --json lists them)"
        if out["errors"]
        else "Skipped:  none"
    )
    print(f"Daemon:   running at {daemon['url']}" if daemon else "Daemon:   not running (start it with `cairn serve`)")
    if probe.get("ignored"):
        print(f"          (a stale record was ignored: {probe['ignored']})")
    for other in daemons:
        if other["vault"] != out["vault"]:
            print(f"Also:     {other['vault']} served at {other['url']}")
    memory = out["memory"]
    if memory:
        parts = ", ".join(f"{name} {mb}" for name, mb in memory["parts"].items())
        print(f"Memory:   {memory['rssMB']} MB resident ({parts}; MB, approximate)")
    return 0
