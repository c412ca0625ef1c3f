"""A fresh clone with only what the README names (no ``../shared`` beside it): the tests that need the shared
test data skip with one line saying what they need and where to put it; none fails or errors.

The checkout is a copy of the files git would clone (tracked and new, not ignored: the work tree as it is now)
into a temp folder with no ``shared/`` beside it; pytest runs there on every test marked ``shared_data``, which
also collects the whole suite (a module reading the shared data at import would be an error here).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from support.vaults import REPO

pytestmark = pytest.mark.slow  # a pytest run of its own, collecting the whole suite


def checkout_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of Cairn (the files a clone would hold)")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [rel for rel in listed.split("\0") if rel and (REPO / rel).is_file()]


def test_a_checkout_without_the_shared_data_skips_what_needs_it_with_one_line_saying_where_to_put_it(tmp_path):
    clone = tmp_path / "cairn"  # tmp_path / "shared" does not exist: ../shared as a fresh clone has it
    for rel in checkout_files():
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, clone / rel)
    env = {k: v for k, v in os.environ.items() if k not in ("CAIRN_SHARED", "CAIRN_REQUIRE_SHARED")}
    env["PYTHONPATH"] = str(clone / "daemon")  # the copy's package, not the one installed from this checkout
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "shared_data"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    summary = out.strip().splitlines()[-1]
    counts = re.fullmatch(r"=*\s*(\d+) skipped, \d+ deselected in [^=]*=*", summary)  # no pass, failure or error
    assert counts and int(counts[1]) >= 20, summary
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, skipped
    assert str(tmp_path / "shared") in skipped[0] and "CAIRN_SHARED=" in skipped[0], skipped
