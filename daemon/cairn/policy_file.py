"""The owner's policy file: where it lives, creating it from the default, loading it, and a live holder.

Layer 1 (a resource: it reads and writes the owner's files); parsing is :mod:`cairn.policy` (layer 0).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.audit import audit_path
from cairn.config import Config
from cairn.errors import ConfigError
from cairn.policy import (
    DEFAULT_POLICY_NAME,
    MAX_POLICY_BYTES,
    POLICY_UNUSABLE,
    Policy,
    PolicyError,
    default_policy_text,
    fail_closed_policy,
    loosened,
    parse_policy,
    stricter_of,
)

log = logging.getLogger(__name__)

__all__ = [
    "PolicyHolder",
    "apply_policy",
    "awaiting_confirmation",
    "create_policy",
    "daemon_policy",
    "ensure_owner_policy",
    "load_policy",
    "mcp_policy_path",
    "owner_policy_path",
    "policy_holder",
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
        _record_created(path)
        return path
    _refuse_to_recreate(path, data_dir)
    create_policy(path, data_dir)
    return path


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
#: from the default, or a change that withheld at least as much), keyed by the resolved path. A file that
#: withholds less than this is not used from the file alone (:class:`PolicyHolder`).
CONFIRMED_RECORD_NAME = "mcp-policy-confirmed.json"


def confirmed_record_path(policy_path: Path) -> Path:
    """``mcp-policy-confirmed.json`` beside ``policy_path``."""
    return Path(policy_path).parent / CONFIRMED_RECORD_NAME


def _record_stamp(record: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(record)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read_confirmed(path: Path) -> bytes | None:
    """The bytes of the policy last in force at ``path`` (None when none is recorded, or the record is unreadable)."""
    try:
        data = json.loads(confirmed_record_path(path).read_text(encoding="utf-8"))
        text = data[_record_key(path)]["text"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return text.encode("utf-8") if isinstance(text, str) else None


def _write_confirmed(path: Path, raw: bytes) -> bool:
    """Record ``raw`` as the policy in force at ``path`` (temp file + rename, mode 0600). Returns False (logged)
    when it cannot be written: the running process keeps it in memory."""
    record = confirmed_record_path(path)
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        data = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        data = {}
    data[_record_key(path)] = {
        "text": raw.decode("utf-8-sig"),
        "confirmedAt": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
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
    return True


def _confirmed_policy(path: Path, raw: bytes | None) -> Policy | None:
    if raw is None:
        return None
    try:
        return _policy_of(_Snapshot(None, raw), str(path))
    except PolicyError:
        return None


def apply_policy(path: Path) -> tuple[Policy, list[str]]:
    """``cairn policy apply``: the owner confirms the policy file at ``path`` as it is now; running Cairn processes
    use it within a check interval. Returns the policy and what it withholds less than the one confirmed before
    (``loosened``; empty when nothing was recorded). Raises :class:`PolicyError` when the file cannot be used."""
    path = Path(path)
    snapshot = _read_snapshot(path)
    policy = _policy_of(snapshot, str(path))
    before = _confirmed_policy(path, _read_confirmed(path))
    if snapshot.raw is None or not _write_confirmed(path, snapshot.raw):
        raise PolicyError(str(path), None, f"cannot record the confirmation in {confirmed_record_path(path)}")
    return policy, loosened(before, policy) if before is not None else []


def awaiting_confirmation(path: Path) -> list[str]:
    """What the policy file at ``path`` withholds less than the policy last in force (``loosened``): not used
    until the owner runs ``cairn policy apply``. Empty when nothing waits (or the file cannot be used)."""
    try:
        policy = load_policy(path)
    except PolicyError:
        return []
    confirmed = _confirmed_policy(path, _read_confirmed(path))
    return loosened(confirmed, policy) if confirmed is not None else []


# ------------------------------------------------------------------------------------ live policy
#: Seconds a changed policy file must stay the same before it is used (``mcp_policy_settle_s``).
DEFAULT_SETTLE_S = 1.0
#: A file whose mtime is whole seconds may sit on a file system that keeps mtimes to the second or two: its age
#: by mtime is trusted only beyond this slack (seconds). Finer mtimes get :data:`_FINE_MTIME_SLACK_S`.
_MTIME_SLACK_S = 2.0
_FINE_MTIME_SLACK_S = 0.1
#: A file still changing after this many settle times makes the holder fail closed (logged).
_CHURN_SETTLES = 10


def _content_key(snapshot: _Snapshot) -> tuple[Any, ...]:
    """What makes two reads the same policy file: its device and inode, and its bytes (never its mtime, which a
    tool may touch on its own without changing what the policy says)."""
    ident = snapshot.stamp[:2] if snapshot.stamp is not None else None
    return (ident, snapshot.raw, snapshot.problem)


#: Stands for "no accepted file" after the holder failed closed on a file that kept changing.
_CHURNED = _Snapshot(None, None, "the policy file kept changing")


class PolicyHolder:
    """Thread-safe current policy that follows edits of the file, never serving a half-saved one.

    The file is read on a timer (every ``check_interval_s``, at most ``settle_s / 2``, from a daemon thread) and
    when a call finds the last read older than ``check_interval_s``. A file whose device, inode or bytes differ
    from the one in force is used only once they have stayed exactly the same for ``settle_s`` seconds, timed
    from the change: its mtime says how long ago that was (less a slack for coarse mtimes), so a file saved
    while the holder was idle is used on the first read. A save in several writes shows its first part as a
    valid policy of its own (``version`` and ``withhold.tags`` without the ``folders`` or clients that
    follow), and serving that would hand withheld notes to clients not declared local; meanwhile the previous
    policy stays in force. A touch that changes only the mtime of the policy in force is no change; a new mtime
    on a change not yet in force restarts its settle time (the same bytes written again: the save may have passed
    through other contents between two reads, e.g. its complete form). A settled file that is invalid
    (or missing) makes the holder fail closed (:func:`fail_closed_policy`, its ``fail_closed_reason`` the
    ``file:line: reason``, logged) until it is fixed; so does a file still changing after
    ``10 × settle_s``. A reload that withholds fewer tags or folders than the policy before is logged as a
    warning.

    At start, a recently changed file is watched until it settles (blocking, at most ``10 × settle_s + 1`` s).
    ``strict=True`` (``cairn mcp``): an unusable file at start raises :class:`PolicyError`.
    ``strict=False`` (the daemon): it starts failed closed and keeps checking.
    """

    def __init__(
        self,
        path: Path,
        *,
        strict: bool,
        check_interval_s: float = 1.0,
        settle_s: float = DEFAULT_SETTLE_S,
        refused: PolicyError | None = None,
    ) -> None:
        self.path = Path(path)
        self._refused = refused
        self.strict = strict
        self.check_interval_s = check_interval_s
        self.settle_s = max(0.0, settle_s)
        self._lock = threading.Lock()
        self._accepted: _Snapshot | None = None
        self._pending: _Snapshot | None = None
        self._pending_since = 0.0
        self._changing_since: float | None = None
        self._checked_at = float("-inf")
        self._error: PolicyError | None = None
        #: The accepted file's own policy (valid), what it withholds less than the confirmed one (not in force
        #: until confirmed), and the confirmed record's stamp when last compared.
        self._file_policy: Policy | None = None
        self._awaiting: list[str] = []
        self._record_stamp: tuple[int, int, int] | None = None
        self._policy = fail_closed_policy(f"{self.path}: the policy file is being saved; waiting for it to settle")
        if refused is not None:  # e.g. the vault is governed by another policy: failed closed for good
            self._policy, self._error = fail_closed_policy(str(refused)), refused
            log.error("MCP policy unusable, failing closed: %s", refused)
            if strict:
                raise refused
            return
        with self._lock:
            self._check(time.monotonic())
        if self._accepted is None:
            self.reload(timeout_s=self.settle_s * _CHURN_SETTLES + 1.0)
            if self._accepted is None:
                self._give_up_at_start()
        if strict and self._error is not None:
            raise self._error
        self._start_timer()

    def _start_timer(self) -> None:
        """Read the file on a timer from a daemon thread that ends with the holder (it holds a weak reference)."""
        if self.settle_s <= 0:
            return
        period = max(0.02, min(self.check_interval_s or self.settle_s, self.settle_s / 2))
        ref = weakref.ref(self)

        def tick() -> None:
            while True:
                time.sleep(period)
                holder = ref()
                if holder is None:
                    return
                with holder._lock:
                    holder._check(time.monotonic())
                del holder

        threading.Thread(target=tick, name=f"cairn-policy-{self.path.name}", daemon=True).start()

    def _age_s(self, snapshot: _Snapshot) -> float:
        """How long ago (seconds, by the wall clock) ``snapshot``'s file last changed by its mtime, less the
        slack its mtime's resolution needs; 0 for a missing file or an mtime in the future."""
        if snapshot.stamp is None:
            return 0.0
        mtime_ns = snapshot.stamp[2]
        slack = _MTIME_SLACK_S if mtime_ns % 1_000_000_000 == 0 else _FINE_MTIME_SLACK_S
        return max(0.0, time.time() - mtime_ns / 1e9 - slack)

    def _give_up_at_start(self) -> None:
        reason = f"the policy file kept changing for {self.settle_s * _CHURN_SETTLES + 1:.0f} s; save it once"
        self._error = PolicyError(str(self.path), None, reason)
        if not self.strict:
            log.error("MCP policy unusable, failing closed until it settles: %s", self._error)
            self._policy = fail_closed_policy(str(self._error))

    def _accept(self, snapshot: _Snapshot) -> None:
        """Make ``snapshot`` the policy in force (or fail closed on it), logging the change."""
        start = self._accepted is None
        before = self._policy
        was_closed = before.fail_closed_reason is not None and not start
        self._accepted, self._pending, self._changing_since = snapshot, None, None
        self._file_policy = None
        try:
            self._file_policy, self._error = _policy_of(snapshot, str(self.path)), None
            self._policy = self._governed(snapshot)
        except PolicyError as exc:
            self._policy, self._error = fail_closed_policy(str(exc)), exc
            if not (start and self.strict):
                log.error(
                    "MCP policy unusable, failing closed (no note goes to an MCP client or a remote model until "
                    "it is fixed): %s",
                    exc,
                )
            return
        if was_closed:
            log.warning("MCP policy %s is valid again; fail-closed mode ended", self.path)
        elif not start and not self._awaiting:
            log.info("MCP policy %s reloaded", self.path)
            _warn_if_laxer(self.path, before, self._policy)

    def _governed(self, snapshot: _Snapshot) -> Policy:
        """The policy in force for the accepted, valid ``snapshot``: the file's own when it withholds at least as
        much as the policy last in force (it is recorded as such), else the stricter of the two until the owner
        confirms the file (``cairn policy apply``), logged once as a warning. With nothing recorded yet (an
        install from before), the file is recorded as it is."""
        assert self._file_policy is not None and snapshot.raw is not None
        record = confirmed_record_path(self.path)
        self._record_stamp = _record_stamp(record)
        raw = _read_confirmed(self.path)
        confirmed = _confirmed_policy(self.path, raw)
        less = loosened(confirmed, self._file_policy) if confirmed is not None and raw != snapshot.raw else []
        if less:
            if less != self._awaiting:
                log.warning(
                    "MCP policy %s saved withholding less than the policy in force (%s): not used until you confirm "
                    "it with `cairn policy apply`; meanwhile the stricter of the two is in force",
                    self.path,
                    ", ".join(less),
                )
            self._awaiting = less
            assert confirmed is not None
            return stricter_of(confirmed, self._file_policy)
        self._awaiting = []
        if raw != snapshot.raw and _write_confirmed(self.path, snapshot.raw):
            self._record_stamp = _record_stamp(record)
        return self._file_policy

    def _recheck_confirmation(self) -> None:
        """When the confirmed record changed (``cairn policy apply`` in another process), compare again."""
        if self._file_policy is None or self._accepted is None or self._accepted.raw is None:
            return
        if _record_stamp(confirmed_record_path(self.path)) == self._record_stamp:
            return
        before, was_awaiting = self._policy, bool(self._awaiting)
        self._policy = self._governed(self._accepted)
        if was_awaiting and not self._awaiting:
            log.warning("MCP policy %s confirmed by its owner; it is in force now", self.path)
            _warn_if_laxer(self.path, before, self._policy)

    @property
    def awaiting(self) -> list[str]:
        """What the file withholds less than the policy in force, waiting for ``cairn policy apply`` (or [])."""
        return list(self._awaiting)

    def _check(self, now: float) -> None:
        """Read the file (under the lock); note a change, and use it once its bytes have stayed the same
        ``settle_s`` (timed from its mtime when that is older than this read); fail closed on a file still
        changing after ``10 × settle_s``."""
        self._checked_at = now
        if self._refused is not None:
            return
        snapshot = _read_snapshot(self.path)
        key = _content_key(snapshot)
        if self._accepted is not None and key == _content_key(self._accepted):
            self._pending, self._changing_since = None, None
            self._recheck_confirmation()
            return
        if self._accepted is None and snapshot.stamp is None:
            self._accept(snapshot)  # at start, no file (or no readable one) fails closed at once
            return
        written = now - min(self._age_s(snapshot), self.settle_s)
        if self._pending is None or key != _content_key(self._pending):
            self._pending_since = written
            if self._changing_since is None:
                self._changing_since = self._pending_since
        elif snapshot.stamp != self._pending.stamp:
            # The same bytes written again (or touched): a save may have passed through other contents (the policy
            # in force, or another) between two reads; the settle time runs from this write.
            self._pending_since = max(self._pending_since, written)
        self._pending = snapshot
        changing_since = self._pending_since if self._changing_since is None else self._changing_since
        if now - self._pending_since >= self.settle_s:
            self._accept(snapshot)
        elif self._accepted not in (None, _CHURNED) and now - changing_since >= self.settle_s * _CHURN_SETTLES:
            self._fail_closed_on_churn()

    def _fail_closed_on_churn(self) -> None:
        self._error = PolicyError(
            str(self.path),
            None,
            f"the policy file kept changing for {self.settle_s * _CHURN_SETTLES:g} s; save it once",
        )
        log.error("MCP policy unusable, failing closed until it settles: %s", self._error)
        self._policy, self._accepted = fail_closed_policy(str(self._error)), _CHURNED

    def current(self) -> Policy:
        """The policy in force now (the file is checked when the last check is older than
        ``check_interval_s``). Never raises after construction."""
        if time.monotonic() - self._checked_at < self.check_interval_s:
            return self._policy
        with self._lock:
            now = time.monotonic()
            if now - self._checked_at >= self.check_interval_s:
                self._check(now)
            return self._policy

    def reload(self, timeout_s: float | None = None) -> Policy:
        """Check the file now, whatever the interval, and when it changed wait (blocking, at most ``timeout_s``:
        by default ``10 × settle_s + 1`` s) until the change has settled and is in force; returns the policy
        in force then (the previous one, or failed closed, when the file kept changing until the timeout)."""
        deadline = time.monotonic() + (self.settle_s * _CHURN_SETTLES + 1.0 if timeout_s is None else timeout_s)
        while True:
            with self._lock:
                now = time.monotonic()
                self._check(now)
                if self._pending is None or now >= deadline:
                    return self._policy
                wait = self._pending_since + self.settle_s - now
            time.sleep(min(max(wait, 0.005), max(deadline - now, 0.0)))

    def status(self, *, detail: bool) -> dict[str, Any]:
        """``{policy: "ok"|"fail-closed", failClosedReason}`` for ``/health``: the reason is the generic
        ``"policy_unusable"`` unless ``detail`` (the owner's views), which also gives ``failClosedDetail``
        (``file:line: reason``: it can name a withheld folder and the owner's home folder)."""
        policy = self.current()
        out: dict[str, Any] = {
            "policy": "fail-closed" if policy.fail_closed_reason else "ok",
            "failClosedReason": POLICY_UNUSABLE if policy.fail_closed_reason else None,
        }
        if detail:
            out["failClosedDetail"] = policy.fail_closed_reason
        return out


# ------------------------------------------------------------------------------------ the configured policy
def mcp_policy_path(config: Config) -> Path:
    """The policy file: ``mcp_policy`` when configured, else the owner's copy in the config folder (created
    from the shipped default on the true first use only: :func:`ensure_owner_policy`). Raises
    :class:`PolicyError` when it cannot be made, or is gone after it was created."""
    if config.mcp_policy is not None:
        return config.mcp_policy
    return ensure_owner_policy(config.config_dir, config.data_dir)


def policy_holder(config: Config, *, strict: bool) -> PolicyHolder:
    """A live :class:`PolicyHolder` over the policy that governs ``config.vault``
    (:func:`cairn.policy_vault.governing_policy`; without a vault :func:`mcp_policy_path`) with the configured
    settle time. ``strict`` (``cairn mcp``): raises :class:`PolicyError` for a policy that is missing, cannot be
    made, is invalid, or is not the one the vault's index records. Not strict (the daemon): never raises; it
    fails closed (logged, and said in ``/health``)."""
    from cairn.policy_vault import governing_policy  # it builds on this module

    try:
        try:
            path = governing_policy(config) if config.vault is not None else mcp_policy_path(config)
        except ConfigError:  # no index here (`cairn mcp` refuses); the daemon reads the policy it resolves
            if strict:
                raise
            path = mcp_policy_path(config)
    except PolicyError as exc:
        if strict:
            raise
        return PolicyHolder(Path(exc.file), strict=False, settle_s=config.mcp_policy_settle_s, refused=exc)
    return PolicyHolder(path, strict=strict, settle_s=config.mcp_policy_settle_s)


def daemon_policy(config: Config) -> PolicyHolder:
    """The governance policy as the daemon reads it: :func:`policy_holder` not strict."""
    return policy_holder(config, strict=False)


def _warn_if_laxer(path: Path, before: Policy, after: Policy) -> None:
    """Log a warning when ``after`` withholds less than ``before`` (:func:`~cairn.policy.loosened`)."""
    if before.fail_closed_reason is not None:
        return
    dropped = loosened(before, after)
    if dropped:
        log.warning("MCP policy %s reloaded withholding less than before: %s", path, ", ".join(dropped))
