"""The owner's policy file: where it lives, creating it from the default, loading it, and a live holder.

Layer 1 (a resource: it reads and writes the owner's files); parsing is :mod:`cairn.policy` (layer 0).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cairn.policy import (
    DEFAULT_POLICY_NAME,
    MAX_POLICY_BYTES,
    Policy,
    PolicyError,
    default_policy_text,
    fail_closed_policy,
    parse_policy,
)

log = logging.getLogger(__name__)

__all__ = ["PolicyHolder", "ensure_owner_policy", "load_policy", "owner_policy_path"]


def owner_policy_path(config_dir: Path) -> Path:
    """Where the owner's policy lives: ``config_dir / "mcp-serve.yaml"``."""
    return Path(config_dir) / DEFAULT_POLICY_NAME


def ensure_owner_policy(config_dir: Path) -> Path:
    """The owner's policy path, created from the shipped default (mode 0600) if it does not exist yet.
    An existing file is never touched. Raises :class:`PolicyError` when it cannot be created."""
    path = owner_policy_path(config_dir)
    if path.exists():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    except OSError as exc:
        raise PolicyError(
            str(path),
            None,
            f"cannot create the policy from the default ({exc.strerror or exc}); check the config folder's permissions",
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(default_policy_text())
    log.info("created the MCP policy %s from the shipped default", path)
    return path


def load_policy(path: Path) -> Policy:
    """Read and validate the policy file at ``path``. Raises :class:`PolicyError` when it is missing,
    unreadable, too large, not UTF-8, invalid or of a newer version (``path:line: reason``)."""
    path = Path(path)
    source = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_POLICY_BYTES + 1)
    except FileNotFoundError:
        raise PolicyError(
            source,
            None,
            "no policy file here; check the path (`cairn policy check` without FILE "
            "creates your copy in the config folder from the shipped default)",
        ) from None
    except IsADirectoryError:
        raise PolicyError(source, None, "this is a folder, not a policy file") from None
    except OSError as exc:
        raise PolicyError(source, None, f"cannot read the policy ({exc.strerror or exc})") from None
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


# ------------------------------------------------------------------------------------ live policy
@dataclass
class _Loaded:
    policy: Policy
    stamp: tuple[int, int] | None  # (mtime_ns, size) of the file it came from; None when missing
    checked_at: float = field(default=0.0)


class PolicyHolder:
    """Thread-safe current policy; reloads when the file's (mtime_ns, size) changes, at most every
    ``check_interval_s`` (1 s) — validating first and swapping atomically, so a caller always gets a
    whole policy. ``strict=True`` (``cairn mcp``): an initial load error raises :class:`PolicyError`;
    a later invalid edit makes the holder fail closed (logged with ``file:line: reason``) until the
    file is fixed. ``strict=False`` (daemon HTTP): a missing/invalid file → :func:`fail_closed_policy`
    (its ``fail_closed_reason`` is the PolicyError text), logged, re-checked the same way."""

    def __init__(self, path: Path, *, strict: bool, check_interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self.strict = strict
        self.check_interval_s = check_interval_s
        self._lock = threading.Lock()
        stamp = self._stamp()
        try:
            policy = load_policy(self.path)
        except PolicyError as exc:
            if strict:
                raise
            log.error(
                "MCP policy unusable, failing closed (no note goes to an MCP client or a remote model until "
                "it is fixed): %s",
                exc,
            )
            policy = fail_closed_policy(str(exc))
        self._loaded = _Loaded(policy, stamp, time.monotonic())

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def current(self) -> Policy:
        """The policy in force now (a reload is attempted when the file changed and the last check
        is older than ``check_interval_s``). Never raises after construction."""
        loaded = self._loaded
        now = time.monotonic()
        if now - loaded.checked_at < self.check_interval_s:
            return loaded.policy
        with self._lock:
            loaded = self._loaded
            if now - loaded.checked_at < self.check_interval_s:
                return loaded.policy
            stamp = self._stamp()
            if stamp == loaded.stamp:
                loaded.checked_at = now
                return loaded.policy
            try:
                policy = load_policy(self.path)
                if loaded.policy.fail_closed_reason:
                    log.warning("MCP policy %s is valid again; fail-closed mode ended", self.path)
                else:
                    log.info("MCP policy %s reloaded", self.path)
            except PolicyError as exc:
                log.error("MCP policy edit refused, failing closed until it is fixed: %s", exc)
                policy = fail_closed_policy(str(exc))
            self._loaded = _Loaded(policy, stamp, now)
            return policy

    def reload(self) -> Policy:
        """Check the file now, whatever the interval (for tests and explicit reload requests)."""
        with self._lock:
            self._loaded.checked_at = float("-inf")
        return self.current()
