"""Where the tests' vaults are: the sample vault (examples/vault), the canary vault (tests/fixtures), the real
vaults of the shared test data (``../shared`` or ``CAIRN_SHARED``), and what CI requires of them."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = REPO / "examples" / "vault"
SHARED = Path(os.environ.get("CAIRN_SHARED", REPO.parent / "shared"))
VAULTS = SHARED / "vaults"
HELP_VAULT = VAULTS / "obsidian-help"
HUB_VAULT = VAULTS / "obsidian-hub"


#: Set by CI (``.ci/run``), where ``../shared`` is always there: missing shared data fails instead of skipping.
REQUIRE_SHARED = os.environ.get("CAIRN_REQUIRE_SHARED", "") not in ("", "0")
#: Set by CI (``.ci/run``), whose ``make test`` installs the model server (``[llm]``): a test that needs it fails
#: instead of skipping when it is missing (``make check`` does not install it, and those tests skip there).
REQUIRE_MODEL_SERVER = os.environ.get("CAIRN_REQUIRE_MODEL_SERVER", "") not in ("", "0")


CANARY_VAULT = REPO / "tests" / "fixtures" / "canary_vault"
#: The canary string: it appears ONLY in the withheld notes of the canary vault.
CANARY = "CANARY-7f3a9"
#: Notes withheld by the default policy's tags (personal, in every form Obsidian allows).
CANARY_TAGGED = (
    "Health/Blood pressure.md",
    "Health/Sleep.md",
    "Journal/2024-03-01.md",
    "Journal/Therapy.md",
    "Notes/Allergies.md",
    "Notes/Dream log.md",
    "Notes/Passwords hint.md",
)
#: Front-matter that cannot be read (its `tags: personal` is lost): withheld whenever a tag is (fail closed).
CANARY_UNREADABLE = ("Notes/Mood tracker.md",)
#: Withheld only when the policy also says ``folders: [Private]``.
CANARY_FOLDER = ("Private/Salary.md",)
CANARY_WITHHELD = CANARY_TAGGED + CANARY_UNREADABLE + CANARY_FOLDER


def write_vault(root: Path, notes: dict[str, str]) -> Path:
    for rel, text in notes.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def small_vault(root: Path) -> Path:
    vault = root / "vault"
    (vault / "Garden").mkdir(parents=True)
    (vault / "Garden" / "Garlic.md").write_text(
        "# Garlic\n\nPlant garlic cloves 5 cm deep in October, pointy end up.\n", encoding="utf-8"
    )
    (vault / "Boiler.md").write_text("# Boiler\n\nThe boiler pressure sits at 1.3 bar when cold.\n", encoding="utf-8")
    return vault
