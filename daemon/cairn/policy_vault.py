"""Which policy governs a vault: recorded beside its index, checked by whatever serves it over MCP.

Layer 1 (files in the data and config folders). A desktop app starts ``cairn mcp`` with almost no environment
(HOME, PATH and the client config's ``env``), so a ``cairn mcp`` may resolve other folders than the owner's
shell does. The commands that build an index (``cairn index``, ``cairn serve``, ``search``, ``ask``) record which
policy governs it, and where the config and data folders are, in ``indexes/<index>.policy.json`` (never
overwritten but by ``cairn policy apply --vault``), and keep a copy of that record in the index itself (``meta``
:data:`POLICY_META`). A server that resolves another policy, or finds no index, refuses with the ``env`` entry to
add; the shipped default is never created for a vault whose index exists under another policy. A record that is
damaged (empty, unreadable, not JSON, naming no policy), or missing while the index holds its copy, makes a
server refuse, naming the record and the command that repairs it (docs/design.md, "Contract" → Governance); the
commands that write the index restore a missing or damaged record from the index's copy. Beside the policy,
``mcp-policy-vaults.json`` lists the vaults it governs and their data folders, so a ``cairn mcp`` that finds the
policy but not the index can name the data folder.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from cairn.config import Config
from cairn.errors import CairnError, ConfigError
from cairn.policy import PolicyError
from cairn.policy_file import load_policy, mcp_policy_path, owner_policy_path
from cairn.store import Store

log = logging.getLogger(__name__)

__all__ = ["governing_policy", "record_vault_policy", "vault_policy_record_path"]

#: Beside the policy: ``{vault: {"dataDir", "index"}}`` for each vault whose index it governs.
VAULTS_RECORD_NAME = "mcp-policy-vaults.json"
#: The index's ``meta`` key holding its copy of ``<index>.policy.json`` (the same JSON object).
POLICY_META = "policy_record"


def vault_policy_record_path(config: Config) -> Path:
    """``<data>/indexes/<index>.policy.json``: which policy governs this vault's index."""
    db = config.db_path
    return db.with_name(db.stem + ".policy.json")


def resolved_policy_path(config: Config) -> Path:
    """The policy this process reads (``mcp_policy``, else ``<config>/mcp-serve.yaml``), made absolute; never
    created here."""
    return Path(os.path.abspath(config.mcp_policy or owner_policy_path(config.config_dir)))


def _same(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Temp file + rename, mode 0600. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_entry(record: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(entry, None)`` for a usable record, ``(None, None)`` when there is none, ``(None, why)`` when it is
    damaged: unreadable, empty, not JSON, not an object, or naming no policy."""
    try:
        text = record.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot be read ({getattr(exc, 'strerror', None) or exc})"
    if not text.strip():
        return None, "is empty"
    try:
        data = json.loads(text)
    except ValueError:
        return None, "is not valid JSON"
    if not isinstance(data, dict) or not isinstance(data.get("policy"), str) or not data["policy"]:
        return None, "names no policy"
    return data, None


def _index_copy(config: Config, store: Store | None = None) -> dict[str, Any] | None:
    """The record's copy kept in the index (``store``, else the index opened read-only), or None: an index built
    before the copy was kept, or one that cannot be read (the server's own checks say why)."""
    if store is None and not config.db_path.exists():
        return None
    try:
        if store is not None:
            text = store.get_meta(POLICY_META)
        else:
            probe = Store(config.db_path, readonly=True)
            try:
                text = probe.get_meta(POLICY_META)
            finally:
                probe.close()
    except CairnError:
        return None
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("policy"), str) and data["policy"] else None


def _keep_copy(config: Config, store: Store | None, entry: dict[str, Any]) -> None:
    """Write ``entry`` as the index's copy of the record (``store``, else the index opened for writing, when it
    exists); a failure is logged, never raised."""
    text = json.dumps(entry, sort_keys=True)
    try:
        if store is not None:
            if store.get_meta(POLICY_META) != text:
                store.set_meta(POLICY_META, text)
        elif config.db_path.exists():
            index = Store(config.db_path)
            try:
                index.set_meta(POLICY_META, text)
            finally:
                index.close()
    except CairnError as exc:
        log.warning("cannot keep in the index %s which MCP policy governs %s: %s", config.db_path, config.vault, exc)


def record_vault_policy(config: Config, *, store: Store | None = None, force: bool = False) -> Path | None:
    """Record that the policy this process reads governs ``config.vault``'s index, in ``<index>.policy.json`` and
    in the index (``store``: the index open for writing, else it is opened when it exists), unless a record is
    there already (``force``: ``cairn policy apply --vault``, the owner re-points it). A record that is missing or
    damaged while the index holds its copy is restored from the copy (logged); a damaged one without a copy is
    left for the owner to repair (logged; servers refuse meanwhile). Returns the policy recorded as governing the
    vault (None when none is: logged, never raised)."""
    record = vault_policy_record_path(config)
    existing, damage = _read_entry(record)
    if existing is not None and not force:
        _keep_copy(config, store, existing)  # an index from before the copy gets one
        return Path(existing["policy"])
    copy = None if force else _index_copy(config, store)
    if copy is not None:
        log.warning(
            "%s %s; restored it from the index's copy (the vault is governed by %s)",
            record,
            damage or "was missing",
            copy["policy"],
        )
        return _write_record(config, record, copy)
    if damage is not None and not force:
        log.warning(
            "%s %s, so `cairn mcp` refuses to serve %s; run `cairn policy apply --vault %s` to record the policy "
            "that governs it",
            record,
            damage,
            config.vault,
            config.vault,
        )
        return None
    entry = {
        "vault": str(config.vault),
        "policy": str(resolved_policy_path(config)),
        "configDir": str(Path(os.path.abspath(config.config_dir))),
        "dataDir": str(Path(os.path.abspath(config.data_dir))),
        "recordedAt": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    _keep_copy(config, store, entry)
    return _write_record(config, record, entry)


def _write_record(config: Config, record: Path, entry: dict[str, Any]) -> Path | None:
    """Write ``entry`` to ``record`` and list the vault beside its policy; None (logged) when it cannot be."""
    policy = Path(entry["policy"])
    try:
        _write_json(record, entry)
        vaults_path = policy.parent / VAULTS_RECORD_NAME
        vaults = _read_json(vaults_path) or {}
        vaults[str(config.vault)] = {"dataDir": entry.get("dataDir"), "index": config.index_id}
        _write_json(vaults_path, vaults)
    except OSError as exc:
        log.warning("cannot record in %s which MCP policy governs %s: %s", record, config.vault, exc)
        return None
    return policy


def _env_line(entries: dict[str, str]) -> str:
    return '"env": ' + json.dumps(entries)


def _no_index(config: Config, policy: Path) -> ConfigError:
    """No index of the vault in this process's data folder: where it is (when the policy's folder knows), or how
    to point at it."""
    vault = config.require_vault()
    known = (_read_json(policy.parent / VAULTS_RECORD_NAME) or {}).get(str(vault))
    data_dir = known.get("dataDir") if isinstance(known, dict) else None
    here = str(Path(os.path.abspath(config.data_dir)))
    if isinstance(data_dir, str) and data_dir != here:
        how = (
            f"its index is in {data_dir}: add to this MCP client's config "
            f"{_env_line({'CAIRN_DATA_DIR': data_dir})} (a desktop app passes no other environment)"
        )
    else:
        how = (
            f"if `cairn status --vault {vault}` shows it indexed, Cairn's folders are elsewhere in that shell: add "
            f"them to this MCP client's config as {_env_line({'CAIRN_DATA_DIR': '<data>'})[:-1]}, "
            '"CAIRN_CONFIG_DIR": "<config>"} with the folders `cairn paths` prints there (a desktop app passes no '
            "other environment); otherwise "
            f"run `cairn index --vault {vault}` first"
        )
    return ConfigError(f"The vault {str(vault)!r} has no index yet in the data folder {here}; {how}.")


def _other_policy(config: Config, policy: Path, record: Path, entry: dict[str, Any]) -> PolicyError:
    """The index records another policy than the one this process reads: the ``env`` entries that point at it."""
    governing = str(entry.get("policy"))
    env: dict[str, str] = {}
    config_dir = entry.get("configDir")
    if isinstance(config_dir, str) and not _same(config_dir, config.config_dir):
        env["CAIRN_CONFIG_DIR"] = config_dir
    data_dir = entry.get("dataDir")
    if isinstance(data_dir, str) and not _same(data_dir, config.data_dir):
        env["CAIRN_DATA_DIR"] = data_dir
    point = (
        f"add to this MCP client's config {_env_line(env)} (a desktop app passes no other environment)"
        if env
        else f"set `mcp_policy = {json.dumps(governing)}` in config.toml"
    )
    return PolicyError(
        str(policy),
        None,
        f"the vault {str(config.vault)!r} is governed by the policy {governing} (recorded in {record}), not by "
        f"this one, so Cairn refuses to serve it under this one: {point}. If you moved your policy on purpose, run "
        f"`cairn policy apply --vault {config.vault}` with the folders you use now",
    )


def _record_unusable(config: Config, record: Path, why: str, copy: dict[str, Any] | None) -> PolicyError:
    """The error for a record of the vault's policy that is damaged or vanished (``why``), naming the commands
    that repair it: the owner's ``cairn policy apply --vault``, or (with the index's ``copy``) ``cairn index``."""
    vault = config.vault
    restore = (
        f"`cairn index --vault {vault}` restores it from the index's copy (governed by {copy['policy']}), or "
        if copy is not None
        else ""
    )
    return PolicyError(
        str(record),
        None,
        f"the record of which MCP policy governs the vault {str(vault)!r} {why}, so Cairn refuses to serve the vault "
        f"over MCP rather than guess which policy applies. In your own shell, {restore}"
        f"`cairn policy apply --vault {vault}` records the policy that shell uses as the one that governs it",
    )


def governing_policy(config: Config) -> Path:
    """The policy file that governs ``config.vault`` for a server (``cairn mcp``, the daemon): the one this process
    reads when the vault's index records it (or, for an index from before the record, when it exists). Created
    from the shipped default only on the true first use (:func:`~cairn.policy_file.mcp_policy_path`), never for a
    vault indexed under another policy. Raises :class:`PolicyError` naming the ``env`` entry to add when the
    index records another policy, or when an older index has no record and the policy is missing; naming the
    record and the command that repairs it when the record is damaged, or missing while the index keeps its copy
    (fail closed: which policy governs the vault is not known); and as :func:`~cairn.policy_file.mcp_policy_path`.
    Raises :class:`ConfigError` (saying how to point at the data folder) when there is no index in this data
    folder: the policy is not created then."""
    policy = resolved_policy_path(config)
    if not config.db_path.exists():
        if config.mcp_policy is not None or policy.exists() or policy.is_symlink():
            load_policy(policy)  # a policy that cannot be used is said first, as wherever Cairn reads it
        raise _no_index(config, policy)
    record = vault_policy_record_path(config)
    entry, damage = _read_entry(record)
    if entry is not None:
        if not _same(entry["policy"], policy):
            raise _other_policy(config, policy, record, entry)
        return mcp_policy_path(config)
    if damage is not None:
        raise _record_unusable(config, record, damage, _index_copy(config))
    copy = _index_copy(config)
    if copy is not None:  # the record existed (the index keeps its copy) and vanished
        raise _record_unusable(config, record, "is missing", copy)
    if not policy.exists() and not policy.is_symlink():
        raise PolicyError(
            str(policy),
            None,
            f"no policy here, and the index of {str(config.vault)!r} (built by an older Cairn) does not record which "
            "policy governs it. If your Cairn config folder is elsewhere, add to this MCP client's config "
            f"{_env_line({'CAIRN_CONFIG_DIR': '<config>'})} with the folder `cairn paths` prints; otherwise run "
            f"`cairn index --vault {config.vault}` once (it records the policy) and start again",
        )
    return mcp_policy_path(config)
