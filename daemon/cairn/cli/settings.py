"""``cairn config``: the settings in effect and where each came from; ``--markdown``: docs/settings.md's table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cairn.cli.common import _config_inputs, _print_json
from cairn.config import SETTINGS, Config, load_settings, setting_value, settings_markdown, toml_text


def _json_value(value: Any) -> Any:
    """A setting's value as JSON: paths as text, lists as arrays."""
    if isinstance(value, Path):
        return str(value)
    return list(value) if isinstance(value, tuple) else value


def cmd_config(args: argparse.Namespace, config: Config) -> int:
    """Print every setting's value and its source: ``default``, the config file's path, a ``CAIRN_*`` variable or
    a flag. ``--json``: ``{"file", "fileRead", "settings": {name: {"value", "source"}}}``."""
    if args.markdown:
        sys.stdout.write(settings_markdown())
        return 0
    overrides, config_file = _config_inputs(args)
    loaded = load_settings(overrides, config_file=config_file)
    values = {s.name: setting_value(loaded.config, s.name) for s in SETTINGS}
    if args.json:
        settings = {n: {"value": _json_value(v), "source": loaded.sources[n]} for n, v in values.items()}
        _print_json({"file": str(loaded.file), "fileRead": loaded.file_read, "settings": settings})
        return 0
    state = "read" if loaded.file_read else "not there: nothing read"
    print(f"Config file: {loaded.file} ({state})")
    width = max(len(name) for name in values)
    for setting in SETTINGS:
        value = values[setting.name]
        hint = "" if setting.shown == "none" else f": {setting.shown.replace('`', '')}"
        shown = toml_text(value) if value is not None else f"(not set{hint})"
        print(f"{setting.name:<{width}}  {shown}  ({loaded.sources[setting.name]})")
    return 0
