"""The live policy: a holder that follows edits of the owner's policy file, never serving a half-saved one nor,
from the file alone, one that withholds less than the policy in force.

Layer 1 (it reads the owner's files through :mod:`cairn.policy_file`, on a timer thread).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from cairn.config import Config
from cairn.errors import ConfigError
from cairn.policy import POLICY_UNUSABLE, Policy, PolicyError, fail_closed_policy, loosened, stricter_of
from cairn.policy_file import (
    _confirmed_policy,
    _policy_of,
    _read_confirmed,
    _read_snapshot,
    _record_stamp,
    _Snapshot,
    _write_confirmed,
    confirmed_record_path,
    mcp_policy_path,
)
from cairn.policy_vault import governing_policy

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_SETTLE_S", "PolicyHolder", "daemon_policy", "policy_holder"]


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
    ``10 × settle_s``.

    A settled, valid file that withholds less than the policy last in force (recorded beside it:
    :data:`CONFIRMED_RECORD_NAME`; ``loosened``: a withheld tag or folder dropped, a client made local) is not
    used from the file alone: ``stricter_of`` the two is in force, logged once as a warning, until the owner
    confirms the file (:func:`apply_policy`, ``cairn policy apply``; seen through the record, from any process).
    The comparison is by content: a link re-pointed at another file, or another file moved into place, is
    compared like an edit. A file that withholds at least as much is used and recorded. On the first use (no
    record and no sign of one) the first settled file is recorded as it is; a record that is damaged, or gone
    after that, fails the holder closed (the reason names the record and ``cairn policy apply``) until the owner
    confirms. ``refused`` (a :class:`PolicyError`): the holder is failed closed for good with that reason
    (e.g. the vault is governed by another policy); a strict holder raises it.

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
            self._policy, self._error, self._awaiting = fail_closed_policy(str(exc)), exc, []
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
        much as the policy last confirmed (compared by content, whatever file or link target held either; it is
        recorded as such), else the stricter of the two until the owner confirms the file (``cairn policy
        apply``), logged once as a warning. On the first use (no record, no sign of one) the file is recorded as
        it is. Raises :class:`PolicyError` naming the record when it is damaged or vanished (the caller fails
        closed)."""
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
        before, was_awaiting, was_refused = self._policy, bool(self._awaiting), self._error is not None
        try:
            self._policy, self._error = self._governed(self._accepted), None
        except PolicyError as exc:
            self._policy, self._error, self._awaiting = fail_closed_policy(str(exc)), exc, []
            log.error("MCP policy unusable, failing closed: %s", exc)
            return
        if was_refused:
            log.warning("MCP policy %s: the confirmed record is readable again; fail-closed mode ended", self.path)
        elif was_awaiting and not self._awaiting:
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


def policy_holder(config: Config, *, strict: bool) -> PolicyHolder:
    """A live :class:`PolicyHolder` over the policy that governs ``config.vault``
    (:func:`cairn.policy_vault.governing_policy`; without a vault :func:`mcp_policy_path`) with the configured
    settle time. ``strict`` (``cairn mcp``): raises :class:`PolicyError` for a policy that is missing, cannot be
    made, is invalid, or is not the one the vault's index records. Not strict (the daemon): never raises; it
    fails closed (logged, and said in ``/health``)."""
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
