"""cairn.secrets: the API token, in the keyring or in a 0600 file, never logged."""

from __future__ import annotations

import logging
import os
import stat
import threading

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyring.errors import KeyringError, PasswordDeleteError

from cairn import secrets as cairn_secrets
from cairn.config import Config
from cairn.errors import ConfigError

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


@pytest.fixture
def config(tmp_path) -> Config:
    return _vault_config(tmp_path, "vault")


def _vault_config(tmp_path, name: str) -> Config:
    vault = tmp_path / name
    vault.mkdir(exist_ok=True)
    return Config(vault=vault, config_dir=tmp_path / "config", data_dir=tmp_path / "data", log_dir=tmp_path / "log")


@pytest.fixture(autouse=True)
def file_backend(monkeypatch):
    """Every test uses the file backend unless it installs its own in-memory keyring;
    the real user keyring is never touched. The one-warning flag is reset per test."""
    monkeypatch.setenv("CAIRN_KEYRING", "file")
    monkeypatch.setattr(cairn_secrets, "_warned_file_fallback", False)


class MemoryKeyring(KeyringBackend):
    """An in-process keyring backend (the OS keyring services cannot run here)."""

    priority = 1

    def __init__(self, fail_with: Exception | None = None) -> None:
        super().__init__()
        self.values: dict[tuple[str, str], str] = {}
        self.fail_with = fail_with

    def get_password(self, service, username):
        if self.fail_with:
            raise self.fail_with
        return self.values.get((service, username))

    def set_password(self, service, username, password):
        if self.fail_with:
            raise self.fail_with
        self.values[(service, username)] = password

    def delete_password(self, service, username):
        if self.values.pop((service, username), None) is None:
            raise PasswordDeleteError(username)


@pytest.fixture
def use_keyring(monkeypatch):
    """Install a keyring backend for one test (and restore the previous one afterwards)."""
    previous = keyring.get_keyring()
    monkeypatch.delenv("CAIRN_KEYRING", raising=False)

    def install(backend):
        keyring.set_keyring(backend)
        return backend

    yield install
    keyring.set_keyring(previous)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_read_token_is_none_before_any_token_exists(config):
    assert cairn_secrets.read_token(config) is None


@posix_only
def test_first_token_is_urlsafe_with_32_bytes_of_entropy_in_a_0600_file(config):
    token = cairn_secrets.get_or_create_token(config)
    assert len(token) == 43 and all(c.isalnum() or c in "-_" for c in token)
    path = cairn_secrets.token_file(config)
    assert path.read_text().strip() == token
    assert _mode(path) == 0o600


def test_token_is_stable_across_calls(config):
    token = cairn_secrets.get_or_create_token(config)
    assert cairn_secrets.get_or_create_token(config) == token
    assert cairn_secrets.read_token(config) == token


@posix_only
def test_rotation_replaces_the_token_and_keeps_the_file_private(config):
    old = cairn_secrets.get_or_create_token(config)
    new = cairn_secrets.rotate_token(config)
    assert new != old
    assert cairn_secrets.read_token(config) == new
    assert cairn_secrets.get_or_create_token(config) == new
    assert _mode(cairn_secrets.token_file(config)) == 0o600
    # no temp file left; the rotation marker (no secret) tells a running daemon to re-read the token
    assert [p.name for p in config.config_dir.iterdir()] == ["api-tokens"]
    assert _mode(config.config_dir / "api-tokens") == 0o700
    names = sorted(p.name for p in (config.config_dir / "api-tokens").iterdir())
    assert names == [config.index_id, f"{config.index_id}.generation"]


# -- one token per vault --------------------------------------------------------------------------------------------


def test_each_vault_has_its_own_token_and_rotating_one_leaves_the_others(tmp_path):
    a, b = _vault_config(tmp_path, "A"), _vault_config(tmp_path, "B")
    token_a, token_b = cairn_secrets.get_or_create_token(a), cairn_secrets.get_or_create_token(b)
    assert token_a != token_b
    rotated = cairn_secrets.rotate_token(a)
    assert cairn_secrets.read_token(a) == rotated != token_a
    assert cairn_secrets.read_token(b) == token_b


def test_a_token_is_asked_for_with_its_vault(tmp_path):
    with pytest.raises(ConfigError, match="--vault"):
        cairn_secrets.get_or_create_token(Config(config_dir=tmp_path / "config", data_dir=tmp_path / "data"))


@posix_only
def test_the_one_token_from_before_goes_to_the_first_vault_that_asks_and_to_no_other(tmp_path, caplog):
    """An install from before per-vault tokens has ``<config>/api-token``: the plugin that holds it keeps working
    with the first vault's daemon; every other vault gets a new token, so the old one opens one vault only."""
    a, b = _vault_config(tmp_path, "A"), _vault_config(tmp_path, "B")
    a.config_dir.mkdir(parents=True)
    legacy = a.config_dir / "api-token"
    legacy.write_text("L" * 43 + "\n")
    legacy.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="cairn.secrets"):
        assert cairn_secrets.get_or_create_token(a) == "L" * 43
    assert not legacy.exists() and cairn_secrets.read_token(a) == "L" * 43
    assert cairn_secrets.get_or_create_token(b) not in ("L" * 43, None)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"now the token of {a.vault} only" in said and "plugin install --vault" in said and "L" * 43 not in said


def test_the_one_token_from_before_in_the_keyring_goes_to_the_first_vault_only(tmp_path, use_keyring):
    a, b = _vault_config(tmp_path, "A"), _vault_config(tmp_path, "B")
    backend = use_keyring(MemoryKeyring())
    backend.values[("cairn", "api-token")] = "K" * 43
    assert cairn_secrets.get_or_create_token(a) == "K" * 43
    token_b = cairn_secrets.get_or_create_token(b)
    assert token_b != "K" * 43
    assert backend.values == {
        ("cairn", f"api-token:{a.index_id}"): "K" * 43,
        ("cairn", f"api-token:{b.index_id}"): token_b,
    }


def test_file_fallback_logs_one_warning_and_never_the_token(config, use_keyring, caplog):
    use_keyring(fail.Keyring())
    caplog.set_level(logging.DEBUG)
    token = cairn_secrets.get_or_create_token(config)
    cairn_secrets.read_token(config)
    cairn_secrets.rotate_token(config)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "not in the OS keyring" in warnings[0].getMessage()
    assert str(config.config_dir) in warnings[0].getMessage()
    assert token not in caplog.text


def test_the_fallback_warning_is_not_repeated_by_the_next_process_for_the_same_reason(config, use_keyring, caplog):
    use_keyring(fail.Keyring())
    caplog.set_level(logging.DEBUG)
    cairn_secrets.get_or_create_token(config)
    cairn_secrets._warned_file_fallback = False  # what a new `cairn` process starts with
    cairn_secrets.read_token(config)
    levels = [r.levelno for r in caplog.records if "not in the OS keyring" in r.getMessage()]
    assert levels == [logging.WARNING, logging.INFO]


def test_a_file_chosen_by_the_owner_is_said_at_info_without_asking_for_a_keyring(config, caplog):
    caplog.set_level(logging.DEBUG)
    cairn_secrets.get_or_create_token(config)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert 'as keyring = "file" asks' in caplog.text and "Install" not in caplog.text


@posix_only
def test_group_or_world_readable_token_file_is_repaired_with_a_warning(config, caplog):
    token = cairn_secrets.get_or_create_token(config)
    path = cairn_secrets.token_file(config)
    os.chmod(path, 0o644)
    caplog.set_level(logging.WARNING)
    assert cairn_secrets.read_token(config) == token
    assert _mode(path) == 0o600
    assert any("readable or writable by other users" in r.getMessage() for r in caplog.records)
    assert token not in caplog.text


@posix_only
def test_symlinked_token_file_is_refused(config, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("x" * 43)
    cairn_secrets.token_file(config).parent.mkdir(parents=True)
    cairn_secrets.token_file(config).symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="token file"):
        cairn_secrets.read_token(config)


def test_corrupt_token_file_is_replaced_by_a_new_token(config):
    path = cairn_secrets.token_file(config)
    path.parent.mkdir(parents=True)
    path.write_text("not a token!\n")
    os.chmod(path, 0o600)
    assert cairn_secrets.read_token(config) is None
    token = cairn_secrets.get_or_create_token(config)
    assert path.read_text().strip() == token


def test_concurrent_first_use_agrees_on_one_token(config):
    results: list[str] = []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait(timeout=5)
        results.append(cairn_secrets.get_or_create_token(config))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(results) == 8 and len(set(results)) == 1
    assert cairn_secrets.read_token(config) == results[0]


def test_token_goes_to_the_keyring_when_a_backend_is_available(config, use_keyring, caplog):
    backend = use_keyring(MemoryKeyring())
    caplog.set_level(logging.WARNING)
    token = cairn_secrets.get_or_create_token(config)
    assert backend.values == {("cairn", f"api-token:{config.index_id}"): token}
    assert not (cairn_secrets.token_file(config)).exists()
    assert cairn_secrets.read_token(config) == token
    assert not caplog.records


def test_rotation_in_the_keyring_removes_a_stale_token_file(config, use_keyring):
    old = cairn_secrets.get_or_create_token(config)  # file backend (CAIRN_KEYRING=file)
    backend = use_keyring(MemoryKeyring())
    new = cairn_secrets.rotate_token(config)
    assert new != old
    assert backend.values[("cairn", f"api-token:{config.index_id}")] == new
    assert not (cairn_secrets.token_file(config)).exists()


def test_fail_backend_falls_back_to_the_file(config, use_keyring, caplog):
    use_keyring(fail.Keyring())
    caplog.set_level(logging.WARNING)
    token = cairn_secrets.get_or_create_token(config)
    assert (cairn_secrets.token_file(config)).read_text().strip() == token
    assert len(caplog.records) == 1


def test_keyring_errors_fall_back_to_the_file(config, use_keyring, caplog):
    use_keyring(MemoryKeyring(fail_with=KeyringError("locked")))
    caplog.set_level(logging.WARNING)
    token = cairn_secrets.get_or_create_token(config)
    assert (cairn_secrets.token_file(config)).read_text().strip() == token
    assert cairn_secrets.get_or_create_token(config) == token
    assert len(caplog.records) == 1
    assert token not in caplog.text


# -- keyring = "required": the keyring or nothing ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["env", "config"])
def test_keyring_required_without_a_backend_refuses_and_writes_no_token_file(config, use_keyring, monkeypatch, where):
    use_keyring(fail.Keyring())
    if where == "env":
        monkeypatch.setenv("CAIRN_KEYRING", "required")
    else:
        config = config.replace(keyring="required")
    for call in (cairn_secrets.get_or_create_token, cairn_secrets.read_token, cairn_secrets.rotate_token):
        with pytest.raises(ConfigError) as err:
            call(config)
        assert 'keyring = "required"' in err.value.message and "no usable OS keyring backend" in err.value.message
    assert not (cairn_secrets.token_file(config)).exists()


def test_keyring_required_with_a_failing_backend_refuses_instead_of_falling_back(config, use_keyring, monkeypatch):
    use_keyring(MemoryKeyring(fail_with=KeyringError("locked")))
    monkeypatch.setenv("CAIRN_KEYRING", "required")
    with pytest.raises(ConfigError, match="the keyring failed: KeyringError"):
        cairn_secrets.get_or_create_token(config)
    assert not (cairn_secrets.token_file(config)).exists()


def test_keyring_required_with_a_backend_keeps_the_token_there(config, use_keyring, monkeypatch):
    backend = use_keyring(MemoryKeyring())
    monkeypatch.setenv("CAIRN_KEYRING", "required")
    token = cairn_secrets.get_or_create_token(config)
    assert backend.values[("cairn", f"api-token:{config.index_id}")] == token
    assert not (cairn_secrets.token_file(config)).exists()


def test_keyring_required_moves_every_secret_left_in_a_file_into_the_keyring(config, use_keyring, monkeypatch):
    """Files written in file mode (API token, an MCP token, the LLM key) are moved into the keyring and deleted
    once ``keyring = "required"`` is set, instead of being used from the files."""
    backend = use_keyring(MemoryKeyring())
    monkeypatch.setenv("CAIRN_KEYRING", "file")
    api = cairn_secrets.get_or_create_token(config)
    mcp = cairn_secrets.mcp_token(config, "reader")
    cairn_secrets.set_secret(config, "llm-api-key", "sk-test-123")
    files = [
        cairn_secrets.token_file(config),
        config.config_dir / "mcp-tokens" / "reader",
        config.config_dir / "llm-api-key",
    ]
    assert all(f.exists() for f in files) and not backend.values
    monkeypatch.setenv("CAIRN_KEYRING", "required")
    assert cairn_secrets.get_or_create_token(config) == api
    assert cairn_secrets.mcp_token(config, "reader") == mcp
    assert cairn_secrets.get_secret(config, "llm-api-key") == "sk-test-123"
    assert backend.values == {
        ("cairn", f"api-token:{config.index_id}"): api,
        ("cairn", "mcp-token:reader"): mcp,
        ("cairn", "llm-api-key"): "sk-test-123",
    }
    assert not any(f.exists() for f in files)
    assert cairn_secrets.read_token(config) == api  # now from the keyring


def test_keyring_required_refusals_name_the_secret_asked_for(config, use_keyring, monkeypatch):
    use_keyring(MemoryKeyring(fail_with=KeyringError("locked")))
    monkeypatch.setenv("CAIRN_KEYRING", "required")
    with pytest.raises(ConfigError) as mcp:
        cairn_secrets.mcp_token(config, "reader")
    with pytest.raises(ConfigError) as secret:
        cairn_secrets.set_secret(config, "llm-api-key", "sk-test-123")
    use_keyring(fail.Keyring())
    with pytest.raises(ConfigError) as missing:
        cairn_secrets.read_mcp_token(config, "reader")
    for err, named in ((mcp, "MCP token"), (secret, "'llm-api-key'"), (missing, "MCP token")):
        assert named in err.value.message and "API token" not in err.value.message, err.value.message
    assert (
        not (config.config_dir / "llm-api-key").exists() and not (config.config_dir / "mcp-tokens" / "reader").exists()
    )


@posix_only
def test_without_a_backend_the_default_still_falls_back_to_a_0600_file_with_a_warning(config, use_keyring, caplog):
    use_keyring(fail.Keyring())
    with caplog.at_level(logging.WARNING, logger="cairn.secrets"):
        token = cairn_secrets.get_or_create_token(config)
    assert (cairn_secrets.token_file(config)).read_text().strip() == token
    assert _mode(cairn_secrets.token_file(config)) == 0o600
    assert any("not in the OS keyring" in r.getMessage() for r in caplog.records)


def test_a_bad_keyring_setting_is_a_config_error_naming_the_values():
    from cairn.config import load_config

    with pytest.raises(ConfigError, match="auto, file, required"):
        load_config({}, env={"CAIRN_KEYRING": "sometimes"})


def test_the_daemon_refuses_to_start_when_the_keyring_is_required_and_missing(tmp_path):
    """``cairn serve`` with ``CAIRN_KEYRING=required`` and no keyring backend exits 1 with the reason, before
    serving anything (no service file advertised)."""
    import subprocess

    from support.cli import cairn_env, cairn_executable

    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Note.md").write_text("A note.\n", encoding="utf-8")
    env = cairn_env(tmp_path)
    env.update({"CAIRN_KEYRING": "required", "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"})
    proc = subprocess.run(
        [cairn_executable(), "serve", "--vault", str(vault), "--port", "0", "--no-tray"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert 'keyring = "required"' in proc.stderr
    assert not (tmp_path / "config" / "api-tokens").exists()
    assert not list(tmp_path.glob("data/service*.json"))
