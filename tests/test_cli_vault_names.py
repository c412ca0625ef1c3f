"""A vault whose folder name is not UTF-8 (e.g. ``café`` written by a Latin-1 system: the byte 0xE9) is a
legitimate folder: ``cairn index``, ``search`` and ``status`` work on it (before: ``unexpected
UnicodeEncodeError`` from naming its index). Real ``cairn`` processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.cli import TIMEOUT_S, cairn_env, cairn_executable

pytestmark = pytest.mark.slow  # a `cairn` subprocess per call


@pytest.mark.skipif(sys.platform in ("win32", "darwin"), reason="the file system takes only Unicode names there")
def test_a_vault_folder_with_a_non_utf8_name_is_indexed_and_searched(tmp_path):
    vault = os.path.join(os.fsencode(tmp_path), b"caf\xe9")
    os.mkdir(vault)
    with open(os.path.join(vault, b"garden.md"), "w", encoding="utf-8") as f:
        f.write("# Garden\nGarlic is planted 5 cm deep in autumn.\n")
    env = cairn_env(tmp_path / "home")

    def cairn(*args: str | bytes) -> subprocess.CompletedProcess:
        return subprocess.run([cairn_executable(), *args], env=env, capture_output=True, timeout=TIMEOUT_S)

    index = cairn("index", "--vault", vault, "--json")
    assert index.returncode == 0, index.stderr.decode("utf-8", "replace")
    assert json.loads(index.stdout)["stats"]["notes"] == 1
    search = cairn("search", "garlic", "--vault", vault, "--json")
    assert search.returncode == 0, search.stderr.decode("utf-8", "replace")
    assert [h["filePath"] for h in json.loads(search.stdout)["results"]] == ["garden.md"]
    status = cairn("status", "--vault", vault, "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["notes"] == 1
