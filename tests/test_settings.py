"""The settings registry: every setting Cairn reads is declared once (type, default, help, environment variable),
read from ``config.toml``, ``CAIRN_*`` variables and flags in that order, documented in the generated table of
docs/settings.md, and shown by ``cairn config`` with where each value came from. Also the ``ignore`` patterns exactly as
docs/settings.md documents them, through a real scan of a temp vault.

The table check follows datasette's ``test_docs.py``: a setting that is not in the table fails here.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest

from cairn.config import SETTINGS, Config, LLMConfig, load_config, load_settings, setting_value, settings_markdown
from cairn.errors import ConfigError
from cairn.vault import IgnoreRules, scan_vault
from support.cli import run_cairn

REPO = Path(__file__).resolve().parents[1]
SETTINGS_DOC = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
sys.path.insert(0, str(REPO / "packaging"))
import settings_table  # noqa: E402

NAMES = [s.name for s in SETTINGS]
#: A value of the wrong type for each kind of setting, and a word of the message that says what was expected.
WRONG = {
    "path": (5, "expected a path"),
    "text": (None, ""),
    "true or false": ("maybe", "expected true or false"),
    "http(s) URL": ("ftp://x", "http(s) URL"),
}


def _doc_table() -> str:
    return SETTINGS_DOC.split(settings_table.START, 1)[1].split(settings_table.END, 1)[0].lstrip("\n")


def test_every_field_of_the_configuration_is_one_declared_setting():
    fields = [f.name for f in dataclasses.fields(Config) if f.name != "llm"]
    fields += [f"llm.{f.name}" for f in dataclasses.fields(LLMConfig)]
    assert sorted(NAMES) == sorted(fields) and len(set(NAMES)) == len(NAMES)
    defaults = Config()
    for s in SETTINGS:
        assert s.doc.strip() and s.kind.label and s.shown, s.name
        assert setting_value(defaults, s.name) == s.default, s.name


@pytest.mark.parametrize("name", NAMES)
def test_every_setting_is_documented_in_the_settings_table(name):
    rows = [line for line in _doc_table().splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"{name} has no row in docs/settings.md's table: run `make settings-table`"


def test_the_settings_table_is_current():
    assert _doc_table() == settings_markdown(), "docs/settings.md's table is stale: run `make settings-table`"
    assert settings_table.main(["--check"]) == 0


def test_every_environment_variable_sets_its_setting_and_is_named_as_its_source(tmp_path):
    samples = {
        "path": str(tmp_path),
        "whole number, 0..65535": "0",
        "text": "m",
        "http(s) URL": "http://127.0.0.1:1/v1",
    }
    samples["one of auto, file, required"] = "required"
    with_env = [s for s in SETTINGS if s.env]
    assert {s.env for s in with_env} >= {"CAIRN_VAULT", "CAIRN_CONFIG_DIR", "CAIRN_DATA_DIR", "CAIRN_PORT"}
    for s in with_env:
        assert s.env and s.env.startswith("CAIRN_") and s.kind.label in samples, s.name
        loaded = load_settings(env={s.env: samples[s.kind.label]})
        assert setting_value(loaded.config, s.name) == s.kind.parse(samples[s.kind.label]) != s.default, s.name
        assert loaded.sources[s.name] == s.env


def test_file_then_environment_then_flags_each_win_and_say_so(tmp_path):
    config_toml = tmp_path / "config.toml"
    config_toml.write_text('port = 1111\ntop_k = 3\nignore = ["Templates/"]\n[llm]\nmodel = "file-model"\n', "utf-8")
    env = {"CAIRN_PORT": "2222", "CAIRN_LLM_MODEL": "env-model"}
    loaded = load_settings({"port": "3333", "debug": True, "vault": None}, config_file=config_toml, env=env)
    config, sources = loaded.config, loaded.sources
    assert (config.port, sources["port"]) == (3333, "--port")
    assert (config.llm.model, sources["llm.model"]) == ("env-model", "CAIRN_LLM_MODEL")
    assert (config.top_k, sources["top_k"]) == (3, str(config_toml))
    assert (config.ignore, sources["ignore"]) == (("Templates/",), str(config_toml))
    assert (config.debug, sources["debug"]) == (True, "--debug")
    assert (config.vault, sources["vault"]) == (None, "default")
    assert loaded.file == config_toml and loaded.file_read
    assert load_config(config_file=config_toml, env=env) == load_settings(config_file=config_toml, env=env).config


def test_the_config_file_is_looked_for_in_the_config_folder_the_environment_names(tmp_path):
    (tmp_path / "config.toml").write_text("max_ask_streams = 9\n", "utf-8")
    loaded = load_settings(env={"CAIRN_CONFIG_DIR": str(tmp_path)})
    assert loaded.config.max_ask_streams == 9 and loaded.file_read
    assert loaded.sources["max_ask_streams"] == str(tmp_path / "config.toml")
    empty = load_settings(env={"CAIRN_CONFIG_DIR": str(tmp_path / "none")})
    assert not empty.file_read and set(empty.sources.values()) == {"default", "CAIRN_CONFIG_DIR"}


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("prot = 1\n", ["'prot'", "known keys:", "port"]),
        ("[llm]\nmodle = 'x'\n", ["'llm.modle'", "known keys in [llm]:", "model"]),
        ("llm = 5\n", ["'llm' must be a table"]),
    ],
)
def test_an_unknown_key_is_an_error_naming_the_file_and_the_key(tmp_path, text, names):
    path = tmp_path / "config.toml"
    path.write_text(text, "utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(config_file=path, env={})
    assert str(path) in err.value.message and all(n in err.value.message for n in names), err.value.message


@pytest.mark.parametrize("name", NAMES)
def test_a_value_of_the_wrong_type_is_an_error_naming_the_key_and_where_it_came_from(tmp_path, name):
    setting = next(s for s in SETTINGS if s.name == name)
    label = setting.kind.label
    wrong, expected = (5, "expected a list") if label.startswith("list") else WRONG.get(label, ("three", ""))
    if wrong is None:  # any TOML value can be read as text
        return
    key, sub = name.split(".") if "." in name else (name, None)
    path = tmp_path / "config.toml"
    path.write_text(f"[{key}]\n{sub} = {json.dumps(wrong)}\n" if sub else f"{key} = {json.dumps(wrong)}\n", "utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(config_file=path, env={})
    message = err.value.message
    assert f"config file {path}" in message and f"bad value {wrong!r} for {name!r}" in message and expected in message


def test_cairn_config_prints_each_setting_and_where_it_came_from(tmp_path):
    home, vault = tmp_path / "home", tmp_path / "vault"
    (home / "config").mkdir(parents=True)
    vault.mkdir()
    config_toml = home / "config" / "config.toml"
    config_toml.write_text('ignore = ["Templates/"]\n[llm]\nmodel = "llama3"\n', "utf-8")
    args = ("config", "--vault", str(vault), "--debug")
    lines = run_cairn(home, *args, env={"CAIRN_PORT": "28000"}).stdout.splitlines()
    assert lines[0] == f"Config file: {config_toml} (read)"
    shown = {line.split()[0]: line for line in lines[1:]}
    assert set(shown) == set(NAMES)
    assert shown["port"].split()[1:] == ["28000", "(CAIRN_PORT)"]
    assert shown["ignore"].endswith(f'["Templates/"]  ({config_toml})')
    assert shown["llm.model"].endswith(f'"llama3"  ({config_toml})')
    assert shown["vault"].endswith(f"{json.dumps(str(vault.resolve()))}  (--vault)")
    assert shown["debug"].endswith("true  (--debug)") and shown["top_k"].endswith("8  (default)")
    assert shown["data_dir"].endswith(f"{json.dumps(str(home / 'data'))}  (CAIRN_DATA_DIR)")
    assert "(not set: port + 1" in shown["mcp_port"]

    out = json.loads(run_cairn(home, *args, "--json").stdout)
    assert (out["file"], out["fileRead"]) == (str(config_toml), True)
    assert out["settings"]["ignore"] == {"value": ["Templates/"], "source": str(config_toml)}
    assert out["settings"]["mcp_port"] == {"value": None, "source": "default"}
    assert out["settings"]["vault"] == {"value": str(vault.resolve()), "source": "--vault"}
    assert set(out["settings"]) == set(NAMES)

    assert run_cairn(home, "config", "--markdown").stdout == settings_markdown()


def test_cairn_config_refuses_a_bad_file_naming_it_and_the_key(tmp_path):
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.toml").write_text("ignroe = []\n", "utf-8")
    proc = run_cairn(home, "config", check=False)
    assert proc.returncode == 1 and not proc.stdout
    assert f"config file {home / 'config' / 'config.toml'}: unknown configuration key 'ignroe'" in proc.stderr


#: docs/settings.md's ``ignore`` table, row by row: (pattern, paths it excludes, paths it leaves).
IGNORE_EXAMPLES = [
    ("Templates", ["Templates/a.md", "Work/Templates/b.md", "Work/Templates"], ["Templates.md", "MyTemplates/a.md"]),
    ("Templates/", ["Templates/a.md", "Work/Templates/b.md"], ["Work/Templates"]),
    ("/Templates", ["Templates/a.md"], ["Work/Templates/b.md"]),
    ("Archive/2023", ["Archive/2023/a.md"], ["Old/Archive/2023/a.md", "Archive/2024/a.md"]),
    ("*.excalidraw.md", ["a.excalidraw.md", "Draw/b.excalidraw.md"], ["a.md"]),
    ("Daily/202?-*.md", ["Daily/2024-01-05.md"], ["Daily/Old/2024-01-05.md", "Daily/1999-01-05.md"]),
    ("[Dd]rafts/", ["Drafts/a.md", "x/drafts/b.md"], ["Prafts/a.md"]),
    ("**/attachments/*.pdf", ["attachments/a.pdf", "x/attachments/b.pdf"], ["x/attachments/sub/c.pdf", "a.pdf"]),
    ("Archive/**", ["Archive/a.md", "Archive/x/b.md"], ["Old/Archive/a.md"]),
    ("Projects/**/old", ["Projects/old/a.md", "Projects/a/old/b.md", "Projects/a/b/old/c.md"], ["Projects/older/a.md"]),
]


@pytest.mark.parametrize(("pattern", "excluded", "kept"), IGNORE_EXAMPLES)
def test_each_documented_ignore_pattern_excludes_what_the_docs_say(pattern, excluded, kept):
    assert f"| `{pattern}` |" in SETTINGS_DOC
    rules = IgnoreRules([pattern])
    assert [p for p in excluded if not rules.excludes(p)] == []
    assert [p for p in kept if rules.excludes(p)] == []


def test_ignore_rules_in_a_real_scan_last_match_wins_and_hidden_stay_out(tmp_path):
    vault = tmp_path / "vault"
    for rel in ("Kitchen/Bread.md", "Kitchen/Sourdough.md", "Kitchen/Sub/Soup.md", "Notes/#tag.md", ".hidden/a.md"):
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text("# x\n", "utf-8")
    (vault / "Templates").mkdir()
    (vault / "Templates" / "Daily.md").write_text("# t\n", "utf-8")
    config_toml = tmp_path / "config.toml"
    config_toml.write_text(
        "ignore = ['Kitchen/*', '!Kitchen/Sourdough.md', '\\#tag.md', '# a comment', ' Templates/ ', '!.hidden']\n",
        "utf-8",
    )
    ignore = load_config(config_file=config_toml, env={}).ignore
    assert sorted(f.path for f in scan_vault(vault, ignore)) == ["Kitchen/Sourdough.md"]
    excluded_folder = load_config({"ignore": "Kitchen/, !Kitchen/Sourdough.md"}, env={}).ignore
    assert excluded_folder == ("Kitchen/", "!Kitchen/Sourdough.md")  # one text: comma-separated patterns
    assert "Kitchen/Sourdough.md" not in [f.path for f in scan_vault(vault, excluded_folder)]  # never entered


def test_defaults_the_docs_repeat_in_other_tables_are_the_real_ones():
    repeated = re.findall(r"^\| `([a-z_.]+)` \| ([0-9.]+) \|", SETTINGS_DOC, flags=re.M)
    assert len(repeated) >= 6  # the connection and session limits
    defaults = {s.name: s.default for s in SETTINGS}
    assert {name: float(v) for name, v in repeated} == {name: float(defaults[name]) for name, _ in repeated}
