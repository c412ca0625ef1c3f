"""What the tray shows for the index's state (pure apart from :func:`unavailable_reason`, which loads pystray):
the icon's state, the status line and the tooltip."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

STATES = ("idle", "indexing", "paused", "error")
#: Seconds between two ``stats()`` reads when no event arrives.
DEFAULT_POLL_S = 2.0
#: Longest tooltip (Windows cuts at 128 characters).
TOOLTIP_MAX = 120
#: Longest error text in the status line.
ERROR_MAX = 60


def unavailable_reason(env: Mapping[str, str] | None = None) -> str | None:
    """Why no tray icon can be shown here, or ``None`` when one can.

    Linux and other X11/Wayland systems need ``DISPLAY`` or ``WAYLAND_DISPLAY``; then one of pystray's
    backends must load (:func:`cairn.tray.backend.choose_backend`; ``PYSTRAY_BACKEND`` forces one).
    """
    env = os.environ if env is None else env
    if sys.platform not in ("darwin", "win32") and not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        return "no display (DISPLAY and WAYLAND_DISPLAY are not set)"
    from cairn.tray.backend import TrayUnavailable, choose_backend

    try:
        choose_backend(env)  # imports the backends in turn; each opens the display
    except TrayUnavailable as exc:
        return f"no tray backend ({exc})"
    return None


def icon_path(state: str) -> Path:
    """The shipped PNG for ``state`` (one of :data:`STATES`)."""
    if state not in STATES:
        raise ValueError(f"unknown tray state {state!r}; expected one of {', '.join(STATES)}")
    return Path(str(resources.files("cairn").joinpath("icons", f"{state}.png")))


@dataclass(frozen=True)
class TrayStatus:
    """What the tray shows: ``state`` (icon), ``text`` (status line), ``tooltip``, and a ``warning`` line for the
    menu (the MCP policy is unusable, and why)."""

    state: str
    text: str
    tooltip: str
    warning: str | None = None


def tooltip(text: str) -> str:
    """``Cairn - <text>``, at most :data:`TOOLTIP_MAX` characters, in Latin-1 (X11's ``WM_NAME``, which the
    ``xorg`` backend sets, carries nothing else)."""
    tip = "Cairn - " + text.replace("…", "...").replace("—", "-")
    tip = tip if len(tip) <= TOOLTIP_MAX else tip[: TOOLTIP_MAX - 3] + "..."
    return tip.encode("latin-1", "replace").decode("latin-1")


def describe(stats: Mapping[str, Any] | None, progress: Mapping[str, Any] | None = None) -> TrayStatus:
    """The status for ``stats`` (``Cairn.stats()``: notes, pending, indexing, paused, indexError; ``mcpPolicy``
    from the daemon: ``{policy, failClosedDetail}``) and the last ``progress`` event (``{phase, done, total}``;
    phases ``scan``, ``index``, ``embed``): :func:`describe_index`, with a ``warning`` (and a tooltip that says so)
    while the MCP policy is unusable, naming why (the tray is the owner's: ``file:line: reason``)."""
    status = describe_index(stats, progress)
    policy = (stats or {}).get("mcpPolicy") or {}
    if policy.get("policy") != "fail-closed":
        return status
    why = str(policy.get("failClosedDetail") or "see the log")
    return dataclasses.replace(
        status,
        warning=f"MCP policy unusable, nothing served: {why}",
        tooltip=tooltip(f"{status.text} - MCP policy unusable, nothing served"),
    )


def describe_index(stats: Mapping[str, Any] | None, progress: Mapping[str, Any] | None = None) -> TrayStatus:
    """The index's part of :func:`describe`.

    Precedence: not started yet (``stats`` None) → indexing "Starting…"; an indexing error → error;
    paused → paused; indexing or pending work → indexing with the counts; else idle "N notes · up to date".
    """
    if stats is None:
        return TrayStatus("indexing", "Starting…", tooltip("starting"))
    notes = int(stats.get("notes") or 0)
    error = stats.get("indexError")
    if error:
        short = str(error) if len(str(error)) <= ERROR_MAX else str(error)[: ERROR_MAX - 1] + "…"
        return TrayStatus("error", f"Error: {short}", tooltip(f"error: {error}"))
    if stats.get("paused"):
        text = f"Paused · {notes:,} notes"
        return TrayStatus("paused", text, tooltip(f"{text} (changes are not followed)"))
    if stats.get("indexing") or int(stats.get("pending") or 0) > 0:
        if progress and int(progress.get("total") or 0) > 0:
            done, total = int(progress["done"]), int(progress["total"])
            label = {"scan": "Scanning", "embed": "Embedding", "refine": "Refining"}.get(
                str(progress.get("phase")), "Indexing"
            )
            unit = " passages" if progress.get("phase") in ("embed", "refine") else ""
            text = f"{label} {done:,} / {total:,}{unit}"
        elif stats.get("pending"):
            text = f"Indexing · {int(stats['pending']):,} waiting"
        else:
            text = "Indexing changes…"
        return TrayStatus("indexing", text, tooltip(f"{text} ({notes:,} notes indexed)"))
    text = f"{notes:,} notes · up to date"
    return TrayStatus("idle", text, tooltip(text))
