"""gitignore-style globs over vault-relative paths (:class:`IgnoreRules`), used by the vault scan and the watcher."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

__all__ = ["IgnoreRules"]


def _glob_to_regex(glob: str) -> str:
    """Translate one gitignore glob (without leading/trailing ``/``) to a regex over a whole path."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        ch = glob[i]
        if ch == "*":
            if glob.startswith("**", i):
                at_start = i == 0 or glob[i - 1] == "/"
                j = i + 2
                if at_start and j < n and glob[j] == "/":  # "**/" : zero or more folders
                    out.append("(?:.*/)?")
                    i = j + 1
                    continue
                if at_start and j == n:  # trailing "/**": everything inside
                    out.append(".*")
                    i = j
                    continue
                out.append(".*")
                i = j
                continue
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            j = glob.find("]", i + 2 if glob.startswith("[!", i) or glob.startswith("[]", i) else i + 1)
            if j < 0:
                out.append(re.escape(ch))
            else:
                body = glob[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        elif ch == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


class IgnoreRules:
    """gitignore-style globs over vault-relative paths.

    As in ``.gitignore``: a pattern without ``/`` matches a file or folder name
    at any depth (``*.excalidraw.md``, ``Templates``); a pattern with a ``/``
    inside or at the start is anchored at the vault root (``archive/**``,
    ``/Daily``); a trailing ``/`` matches folders only (``Templates/``);
    ``**`` spans folders; ``!pattern`` re-includes; the last matching pattern
    wins; blank lines and ``#`` comments are ignored. A file inside an ignored
    folder cannot be re-included (the folder is never entered). Case-sensitive.
    """

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self._rules: list[tuple[re.Pattern[str], bool, bool, bool]] = []
        for raw in patterns:
            pat = unicodedata.normalize("NFC", str(raw).strip())
            if not pat or pat.startswith("#"):
                continue
            negate = pat.startswith("!")
            if negate:
                pat = pat[1:]
            dir_only = pat.endswith("/")
            pat = pat.rstrip("/")
            anchored = "/" in pat  # a leading or middle "/" anchors at the vault root
            pat = pat.lstrip("/")
            if not pat:
                continue
            self._rules.append((re.compile(_glob_to_regex(pat) + r"\Z", re.DOTALL), negate, dir_only, anchored))

    def __bool__(self) -> bool:
        return bool(self._rules)

    def excludes(self, rel_path: str) -> bool:
        """As the vault scan decides for a file or folder at vault-relative ``rel_path``: a hidden segment
        (``.obsidian/``, ``.trash/``, ``.git/``…), an ignored folder on the way, or the path itself matching
        the globs (as a file and as a folder)."""
        parts = rel_path.split("/")
        if any(p.startswith(".") for p in parts):
            return True
        if not self._rules:
            return False
        for i in range(1, len(parts)):
            if self.ignored("/".join(parts[:i]), True):
                return True
        return self.ignored(rel_path, False) and self.ignored(rel_path, True)

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        """True when the vault-relative ``rel_path`` (a folder if ``is_dir``) is excluded."""
        name = rel_path.rsplit("/", 1)[-1]
        result = False
        for regex, negate, dir_only, anchored in self._rules:
            if dir_only and not is_dir:
                continue
            if regex.match(rel_path if anchored else name):
                result = not negate
        return result
