"""The MCP audit log (cairn.audit): one JSON line per call with its documented fields and no note or
argument text, 0600, rotated, read back oldest first across rotated files, safe with several writers."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cairn.audit import AuditLog, args_digest, audit_path, read_audit

FIELDS = {"time", "client", "transport", "tool", "argsDigest", "paths", "withheld", "decision"}


def call(log: AuditLog, i: int = 0, **over) -> None:
    kw = dict(
        client="claude-desktop",
        transport="stdio",
        tool="search_notes",
        arguments={"query": f"garden plan {i}", "limit": 8},
        paths=[f"Notes/n{i}.md"],
        withheld=0,
        decision="allowed",
    )
    kw.update(over)
    log.record(**kw)


def test_the_audit_log_lives_in_the_data_folder():
    assert audit_path(Path("/data")) == Path("/data/mcp-audit.jsonl")


def test_each_call_is_one_json_line_with_the_issues_fields(tmp_path):
    log = AuditLog(audit_path(tmp_path))
    before = dt.datetime.now(dt.UTC)
    log.record(
        client="claude-desktop",
        transport="http",
        tool="get_note",
        arguments={"path": "Recipes/Bread.md"},
        paths=["Recipes/Bread.md"],
        withheld=0,
        decision="allowed",
    )
    log.record(
        client="stranger",
        transport="stdio",
        tool="search_notes",
        arguments={"query": "x"},
        paths=[],
        withheld=3,
        decision="denied",
    )
    lines = audit_path(tmp_path).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert set(first) == FIELDS
    assert first["client"] == "claude-desktop" and first["transport"] == "http" and first["tool"] == "get_note"
    assert first["paths"] == ["Recipes/Bread.md"] and first["withheld"] == 0 and first["decision"] == "allowed"
    assert first["time"].endswith("Z")
    when = dt.datetime.fromisoformat(first["time"].replace("Z", "+00:00"))
    assert before - dt.timedelta(seconds=1) <= when <= dt.datetime.now(dt.UTC)
    assert (second["withheld"], second["decision"], second["transport"]) == (3, "denied", "stdio")


def test_arguments_are_recorded_only_as_a_digest_of_their_canonical_json(tmp_path):
    log = AuditLog(audit_path(tmp_path))
    secret = "what is my blood pressure CANARY-7f3a9"
    log.record(
        client="c",
        transport="stdio",
        tool="ask",
        arguments={"question": secret, "top_k": 8},
        paths=[],
        withheld=1,
        decision="allowed",
    )
    log.record(
        client="c",
        transport="stdio",
        tool="ask",
        arguments={"top_k": 8, "question": secret},
        paths=[],
        withheld=1,
        decision="allowed",
    )
    raw = audit_path(tmp_path).read_text(encoding="utf-8")
    assert "CANARY" not in raw and "blood" not in raw
    a, b = read_audit(audit_path(tmp_path))
    canonical = json.dumps({"question": secret, "top_k": 8}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert a["argsDigest"] == b["argsDigest"] == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    assert args_digest({"question": secret, "top_k": 9}) != a["argsDigest"]


def test_returned_paths_are_listed_once_in_order(tmp_path):
    log = AuditLog(audit_path(tmp_path))
    call(log, paths=["b.md", "a.md", "b.md"])
    assert next(read_audit(audit_path(tmp_path)))["paths"] == ["b.md", "a.md"]


def test_the_log_is_readable_only_by_the_owner(tmp_path):
    path = audit_path(tmp_path / "data")
    call(AuditLog(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_disabled_log_writes_nothing(tmp_path):
    call(AuditLog(audit_path(tmp_path), enabled=False))
    assert not audit_path(tmp_path).exists()
    assert list(read_audit(audit_path(tmp_path))) == []


@pytest.mark.parametrize(
    "over, word",
    [
        ({"transport": "websocket"}, "transport"),
        ({"decision": "maybe"}, "decision"),
        ({"withheld": -1}, "withheld"),
        ({"withheld": True}, "withheld"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_field(tmp_path, over, word):
    with pytest.raises(ValueError, match=word):
        call(AuditLog(audit_path(tmp_path)), **over)
    assert not audit_path(tmp_path).exists()


def test_the_log_rotates_past_max_bytes_keeping_the_newest_lines_in_order(tmp_path):
    path = audit_path(tmp_path)
    log = AuditLog(path, max_bytes=2048, backups=2)
    for i in range(200):
        call(log, i)
    files = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(path.name) and not p.name.endswith(".lock"))
    assert files == ["mcp-audit.jsonl", "mcp-audit.jsonl.1", "mcp-audit.jsonl.2"]
    assert all((tmp_path / f).stat().st_size <= 2048 for f in files)
    entries = list(read_audit(path))
    numbers = [int(e["paths"][0][len("Notes/n") : -len(".md")]) for e in entries]
    assert numbers == list(range(200 - len(numbers), 200))  # oldest first, contiguous, ends with the last call
    assert 20 < len(numbers) < 200  # older lines were dropped with the oldest file


def test_reading_filters_by_client_and_skips_a_torn_line(tmp_path):
    path = audit_path(tmp_path)
    log = AuditLog(path)
    call(log, 1, client="claude-desktop")
    with open(path, "ab") as fh:
        fh.write(b'{"time": "2026-11-30T1')  # a crash mid-write
        fh.write(b"\n")
    call(log, 2, client="my-local-agent")
    call(log, 3, client="claude-desktop")
    assert [e["paths"] for e in read_audit(path, client="claude-desktop")] == [["Notes/n1.md"], ["Notes/n3.md"]]
    assert len(list(read_audit(path))) == 3


def test_threads_writing_at_once_never_interleave_lines(tmp_path):
    path = audit_path(tmp_path)
    log = AuditLog(path, max_bytes=20_000, backups=50)
    threads = [threading.Thread(target=lambda k=k: [call(log, k * 1000 + i) for i in range(150)]) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    entries = list(read_audit(path))
    assert len(entries) == 600
    assert sorted(int(e["paths"][0][7:-3]) for e in entries) == sorted(
        k * 1000 + i for k in range(4) for i in range(150)
    )


def test_several_processes_share_one_log_with_rotation_and_lose_no_line(tmp_path):
    path = audit_path(tmp_path)
    script = (
        "import sys\nfrom pathlib import Path\nfrom cairn.audit import AuditLog\n"
        "log = AuditLog(Path(sys.argv[1]), max_bytes=30_000, backups=100)\n"
        "for i in range(200):\n"
        "    log.record(client='p' + sys.argv[2], transport='stdio', tool='get_note', arguments={'i': i},\n"
        "               paths=[f'{sys.argv[2]}/{i}.md'], withheld=0, decision='allowed')\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), str(k)]) for k in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    entries = list(read_audit(path))
    assert len(entries) == 600
    for k in range(3):  # each writer's lines stay in its order
        mine = [int(e["paths"][0].split("/")[1][:-3]) for e in entries if e["client"] == f"p{k}"]
        assert mine == list(range(200))
