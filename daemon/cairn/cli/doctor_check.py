"""One line of ``cairn doctor``'s report (:class:`Check`), shared by :mod:`cairn.cli.doctor` and
:mod:`cairn.cli.doctor_mcp`, which both make them."""

from __future__ import annotations

from dataclasses import dataclass

STATUSES = ("ok", "info", "warn", "fail")


@dataclass(frozen=True)
class Check:
    """One line of the report: ``name`` what was checked, ``status`` one of :data:`STATUSES`, ``text`` what was
    found, ``fix`` the command or step that fixes it (None when nothing needs fixing)."""

    name: str
    status: str
    text: str
    fix: str | None = None

    def line(self) -> str:
        label = {"ok": "ok", "info": "--", "warn": "warn", "fail": "FAIL"}[self.status]
        return f"{label:<5} {self.name:<10} {self.text}" + (f" — fix: {self.fix}" if self.fix else "")
