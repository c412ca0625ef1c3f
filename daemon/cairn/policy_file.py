"""The owner's policy file: where it lives, creating it from the default, loading it, and the record of the policy
in force. The live holder that follows it is :mod:`cairn.policy_live`.

Layer 1 (a resource: it reads and writes the owner's files); parsing is :mod:`cairn.policy` (layer 0).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from cairn.audit import audit_path
from cairn.config import Config
from cairn.policy import (
    DEFAULT_POLICY_NAME,
    MAX_POLICY_BYTES,
    Policy,
    PolicyError,
    default_policy_text,
    loosened,
    parse_policy,
)

log = logging.getLogger(__name__)

__all__ = [
    "apply_policy",
    "awaiting_confirmation",
    "create_policy",
    "ensure_owner_policy",
    "load_policy",
    "mcp_policy_path",
    "owner_policy_path",
]


def owner_policy_path(config_dir: Path) -> Path:
    """Where the owner's policy lives: ``config_dir / "mcp-serve.yaml"``."""
    return Path(config_dir) / DEFAULT_POLICY_NAME


#: Beside the policy (the config folder): the policy files Cairn created from the shipped default (or found), and
#: when, keyed by their resolved path. Installs from before kept it in the data folder; that one is read too.
CREATED_RECORD_NAME = "mcp-policy-created.json"


def created_record_path(policy_path: Path) -> Path:
    """Where Cairn records that it created (or found) ``policy_path``: ``mcp-policy-created.json`` beside it.
    Beside the policy, not in the data folder: a command run with another data folder must see the record."""
    return Path(policy_path).parent / CREATED_RECORD_NAME


def _record_key(path: Path) -> str:
    """The record's key for ``path``: its resolved path (the same file named through another link or ``..``)."""
    return str(Path(path).resolve())


def _read_record(record: Path) -> dict[str, str]:
    """``{policy path: ISO time first created or seen}`` (empty when there is no readable record)."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _created_when(path: Path, data_dir: Path) -> str | None:
    """When Cairn created or found ``path``: from the record beside it, else the data folder's older record."""
    key = _record_key(path)
    when = _read_record(created_record_path(path)).get(key)
    if when is None:
        legacy = _read_record(Path(data_dir) / CREATED_RECORD_NAME)
        when = legacy.get(str(path)) or legacy.get(key)
    return when


def _record_created(path: Path) -> None:
    """Add ``path`` to the record beside it (temp file + rename); a failure is logged, never raised."""
    record = created_record_path(path)
    seen = _read_record(record)
    key = _record_key(path)
    if key in seen:
        return
    seen[key] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_name(f".{record.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(seen, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, record)
    except OSError as exc:
        log.warning("cannot record in %s that the MCP policy %s exists: %s", record, path, exc)


_RESTORE_LINK = "restore the file it points to, or remove the link"


def _dangling_link(path: Path) -> str | None:
    """``"a link to TARGET, which is missing"`` when ``path`` is a symbolic link whose target does not exist."""
    if not path.is_symlink() or path.exists():
        return None
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return f"this is a link to {target}, which is missing"


def _refuse_to_recreate(path: Path, data_dir: Path) -> None:
    """Raise :class:`PolicyError` when ``path`` is missing but existed before (recorded, or MCP was served from
    this data folder: its audit log exists), or is a link to a missing file: recreating the shipped default
    could withhold less than the owner's own policy did."""
    dangling = _dangling_link(path)
    if dangling is not None:
        raise PolicyError(str(path), None, f"{dangling}; {_RESTORE_LINK}")
    when = _created_when(path, data_dir)
    if when is None and not audit_path(data_dir).exists():
        return
    since = f"Cairn created or found it on {when}" if when else "Cairn served MCP from this data folder before"
    raise PolicyError(
        str(path),
        None,
        f"the policy file is gone ({since}); Cairn fails closed instead of recreating the shipped default, "
        "which may withhold less than yours did. Restore your copy, or run `cairn policy init` to start again "
        "from the shipped default",
    )


def ensure_owner_policy(config_dir: Path, data_dir: Path) -> Path:
    """The owner's policy path, created from the shipped default (mode 0600) only on the true first use, and
    recorded beside it (:data:`CREATED_RECORD_NAME`); an existing file is recorded as created and never
    touched. ``data_dir``: its older record and its audit log also count as "created before". Raises
    :class:`PolicyError` when it cannot be created, is a link to a missing file, or is missing after it was
    created (a deleted policy stays fail-closed; ``cairn policy init`` makes it again)."""
    path = owner_policy_path(config_dir)
    if path.exists():
        _first_sight(path)
        return path
    _refuse_to_recreate(path, data_dir)
    create_policy(path, data_dir)
    return path


def _first_sight(path: Path) -> None:
    """Record the existing policy file ``path`` as found. On the first use of Cairn in its folder (neither
    :data:`CREATED_RECORD_NAME` nor :data:`CONFIRMED_RECORD_NAME` beside it) it is also confirmed as it is, first
    (:func:`_write_confirmed` records it as found too): from then on a missing confirmed record is a record that
    vanished, never a first use. A file not valid yet is recorded the first time it is."""
    if created_record_path(path).exists() or confirmed_record_path(path).exists():
        _record_created(path)
        return
    snapshot = _read_snapshot(path)
    try:
        _policy_of(snapshot, str(path))
    except PolicyError:
        return
    if snapshot.raw is not None:
        _write_confirmed(path, snapshot.raw)


def create_policy(path: Path, data_dir: Path | None = None) -> bool:
    """Write the shipped default to ``path`` (mode 0600) unless a file (or a link) is there, and record it
    beside it. The file appears whole: written to a temp file, then hard-linked into place (a second process
    never reads it empty). Returns False when a file was already there (left untouched). Raises
    :class:`PolicyError` when it cannot be written, or when ``path`` is a link to a missing file.
    ``data_dir`` is unused (kept for callers)."""
    path = Path(path)
    dangling = _dangling_link(path)
    if dangling is not None:
        raise PolicyError(str(path), None, f"{dangling}; {_RESTORE_LINK}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        created = _place_whole(path, default_policy_text().encode("utf-8"))
    except OSError as exc:
        raise PolicyError(
            str(path),
            None,
            f"cannot create the policy from the default ({exc.strerror or exc}); check the folder's permissions",
        ) from None
    if created:
        log.info("created the MCP policy %s from the shipped default", path)
        _write_confirmed(path, default_policy_text().encode("utf-8"))
    _record_created(path)
    return created


def _place_whole(path: Path, data: bytes) -> bool:
    """Put ``data`` at ``path`` (mode 0600) only if nothing is there, all at once: a temp file beside it,
    hard-linked into place (a link never overwrites). Where hard links are not supported, an exclusive create
    then one write. Returns False when something was already there. Raises OSError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here (some file systems): the older, non-atomic way
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file at ``path``. Raises :class:`PolicyError` when it is missing,
    unreadable, too large, not UTF-8, invalid or of a newer version (``path:line: reason``)."""
    return _policy_of(_read_snapshot(Path(path)), str(path))


# ------------------------------------------------------------------------------------ reading a snapshot
@dataclass(frozen=True)
class _Snapshot:
    """What one read of the policy file found: ``stamp`` (device, inode, mtime_ns, size) of the opened file,
    its first ``MAX_POLICY_BYTES + 1`` bytes, or ``problem`` (why there is nothing to parse: missing, a folder,
    unreadable). Two equal snapshots mean the file did not change between the two reads."""

    stamp: tuple[int, int, int, int] | None
    raw: bytes | None
    problem: str | None = None


_MISSING = (
    "no policy file here; restore your copy, or create one from the shipped default with `cairn policy init` "
    "(`cairn policy check FILE` checks another path)"
)


def _read_snapshot(path: Path) -> _Snapshot:
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            raw = fh.read(MAX_POLICY_BYTES + 1)
    except FileNotFoundError:
        dangling = _dangling_link(path)
        return _Snapshot(None, None, f"{dangling}; {_RESTORE_LINK}" if dangling else _MISSING)
    except IsADirectoryError:
        return _Snapshot(None, None, "this is a folder, not a policy file")
    except OSError as exc:
        return _Snapshot(None, None, f"cannot read the policy ({exc.strerror or exc})")
    return _Snapshot((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size), raw)


def _policy_of(snapshot: _Snapshot, source: str) -> Policy:
    """The policy in ``snapshot``; raises :class:`PolicyError` as :func:`load_policy`."""
    if snapshot.problem is not None or snapshot.raw is None:
        raise PolicyError(source, None, snapshot.problem or _MISSING)
    raw = snapshot.raw
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyError(
            source, None, f"the policy is larger than {MAX_POLICY_BYTES:,} bytes; expected a short YAML file"
        )
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise PolicyError(source, line, "the policy is not UTF-8 text") from None
    return parse_policy(text, source)


# ------------------------------------------------------------------------------------ the confirmed policy
#: Beside the policy: the text of the policy last in force for each policy path (confirmed by the owner, created
#: from the default, found on the first use, or a change that withheld at least as much), keyed by the path as
#: Cairn names it. A file that withholds less than this is not used from the file alone
#: (:class:`cairn.policy_live.PolicyHolder`).
CONFIRMED_RECORD_NAME = "mcp-policy-confirmed.json"


def confirmed_record_path(policy_path: Path) -> Path:
    """``mcp-policy-confirmed.json`` beside ``policy_path``."""
    return Path(policy_path).parent / CONFIRMED_RECORD_NAME


def _confirm_key(path: Path) -> str:
    """The confirmed record's key for ``path``: the path as Cairn names it, made absolute, never resolved. A link
    re-pointed at another file (``ln -sfn``) is still this policy path, so its new content is compared with the
    content confirmed for it."""
    return os.path.abspath(path)


def _record_stamp(record: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(record)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _record_damaged(path: Path, why: str) -> PolicyError:
    """The error for a confirmed record beside ``path`` that cannot be used (``why``: what is wrong with it)."""
    return PolicyError(
        str(confirmed_record_path(path)),
        None,
        f"the record of the MCP policy you last confirmed {why}, so Cairn cannot tell whether {path} withholds less "
        f"than that policy did and serves no note over MCP. Check {path}, then confirm it as it is with "
        "`cairn policy apply`",
    )


def _read_confirmed(path: Path) -> bytes | None:
    """The text of the policy last confirmed for ``path``: its own entry in the record beside it, else the entry
    confirmed last (another path in the same folder: what counts is what a policy withholds and who is local, not
    which file says it). None on the first use in the folder: no record and no sign of one (no
    :data:`CREATED_RECORD_NAME` beside it). Raises :class:`PolicyError` naming the record when it is missing after
    that, empty, unreadable, not JSON, or holds an entry without a policy's text."""
    record = confirmed_record_path(path)
    try:
        text = record.read_text(encoding="utf-8")
    except FileNotFoundError:
        if created_record_path(path).exists():
            raise _record_damaged(
                path, f"is missing, though Cairn recorded policies in this folder before ({CREATED_RECORD_NAME})"
            ) from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise _record_damaged(path, f"cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        data = json.loads(text)
    except ValueError:
        raise _record_damaged(path, "is empty" if not text.strip() else "is not valid JSON") from None
    entries = data if isinstance(data, dict) else {}
    valid = {k: v for k, v in entries.items() if isinstance(v, dict) and isinstance(v.get("text"), str)}
    if not entries or len(valid) != len(entries):
        raise _record_damaged(path, "holds no confirmed policy where one is expected")
    entry = valid.get(_confirm_key(path)) or max(valid.values(), key=lambda v: str(v.get("confirmedAt", "")))
    return str(entry["text"]).encode("utf-8")


def _write_confirmed(path: Path, raw: bytes) -> bool:
    """Record ``raw`` as the policy in force at ``path`` (temp file + rename, mode 0600; a damaged record is
    replaced), and ``path`` as found (:data:`CREATED_RECORD_NAME`: from now on the record is expected). Returns
    False (logged) when it cannot be written: the running process keeps it in memory."""
    record = confirmed_record_path(path)
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data[_confirm_key(path)] = {
        "text": raw.decode("utf-8-sig"),
        "confirmedAt": _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds"),
    }
    tmp = record.with_name(f".{record.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, record)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        log.warning("cannot record in %s which MCP policy is in force: %s", record, exc)
        return False
    _record_created(path)
    return True


def _confirmed_policy(path: Path, raw: bytes | None) -> Policy | None:
    """The confirmed policy in ``raw`` (None for None). Raises :class:`PolicyError` naming the record when its text
    is not a valid policy (the record was damaged: Cairn records only policies it could use)."""
    if raw is None:
        return None
    try:
        return _policy_of(_Snapshot(None, raw), str(path))
    except PolicyError as exc:
        raise _record_damaged(path, f"holds a policy Cairn cannot read ({exc.reason})") from None


def apply_policy(path: Path) -> tuple[Policy, list[str]]:
    """``cairn policy apply``: the owner confirms the policy file at ``path`` as it is now; running Cairn processes
    use it within a check interval. Returns the policy and what it withholds less than the one confirmed before
    (``loosened``; empty when nothing was recorded). Raises :class:`PolicyError` when the file cannot be used."""
    path = Path(path)
    snapshot = _read_snapshot(path)
    policy = _policy_of(snapshot, str(path))
    try:
        before = _confirmed_policy(path, _read_confirmed(path))
    except PolicyError:  # a damaged or vanished record: this confirmation replaces it
        before = None
    if snapshot.raw is None or not _write_confirmed(path, snapshot.raw):
        raise PolicyError(str(path), None, f"cannot record the confirmation in {confirmed_record_path(path)}")
    return policy, loosened(before, policy) if before is not None else []


def awaiting_confirmation(path: Path) -> list[str]:
    """What the policy file at ``path`` withholds less than the policy last confirmed (``loosened``, compared by
    content whatever file held it): not used until the owner runs ``cairn policy apply``. Empty when nothing
    waits (or the file cannot be used). Raises :class:`PolicyError` naming the confirmed record when it is damaged
    or vanished (:func:`_read_confirmed`): then nothing is served over MCP until the owner confirms."""
    try:
        policy = load_policy(path)
    except PolicyError:
        return []
    confirmed = _confirmed_policy(path, _read_confirmed(path))
    return loosened(confirmed, policy) if confirmed is not None else []


# ------------------------------------------------------------------------------------ the configured policy
def mcp_policy_path(config: Config) -> Path:
    """The policy file: ``mcp_policy`` when configured, else the owner's copy in the config folder (created
    from the shipped default on the true first use only: :func:`ensure_owner_policy`). Raises
    :class:`PolicyError` when it cannot be made, or is gone after it was created."""
    if config.mcp_policy is not None:
        return config.mcp_policy
    return ensure_owner_policy(config.config_dir, config.data_dir)
