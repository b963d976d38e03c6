"""The effective config of a run and where each value came from: the default, the config
file (``--config`` or ``CRAWL_CONFIG``), or a ``-s section.key=value`` override.

Overrides go through the same rules as the file (cycles/config.py): a bad value stops the
command with one line naming the setting (exit 2). ``crawl config show`` prints the result
(:func:`show_text`, :func:`show_json`), so an operator can see what a cron job really runs with.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cycles.config import Config, apply_setting, check_config, load_config
from cycles.errors import ConfigError

DEFAULT = "default"
OVERRIDE = "-s"


@dataclass
class Effective:
    """The config a command runs with, and the source of each ``section.key`` that is not
    a default (``sources``; missing means :data:`DEFAULT`)."""

    config: Config
    sources: dict[str, str] = field(default_factory=dict)

    def source_of(self, section: str, key: str) -> str:
        return self.sources.get(f"{section}.{key}", DEFAULT)


def parse_override(text: str) -> tuple[str, str, Any]:
    """``section.key=value`` -> (section, key, value). The value is read as a TOML value
    (``5``, ``2.5``, ``true``, ``["a", "b"]``, ``{ "h" = "127.0.0.1" }``, ``"quoted"``); what
    is not one is a plain string, so ``-s fetch.user_agent=mybot/1.0`` needs no quotes."""
    name, sep, raw = text.partition("=")
    section, dot, key = name.strip().partition(".")
    if not sep or not dot or not section or not key or "." in key:
        raise ConfigError(f"-s {text!r}: expected section.key=value, e.g. -s fetch.delay_s=2")
    return section, key, toml_value(raw.strip())


def toml_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def file_sources(path: Path, label: str) -> dict[str, str]:
    """``section.key`` -> ``label`` for every setting the file sets (the file has loaded: it parses)."""
    values = tomllib.loads(path.read_text())
    return {f"{section}.{key}": label for section, table in values.items() if isinstance(table, dict)
            for key in table}


def effective_config(path: Path | None, overrides: list[str], path_label: str | None = None) -> Effective:
    """Load ``path`` (None: the defaults) and apply ``overrides`` (``section.key=value``) on
    top, each checked by its setting's rule, then the relations between settings.
    ``path_label`` says how the file was chosen in :attr:`Effective.sources` (default: its path)."""
    config = load_config(path)
    sources = file_sources(path, path_label or str(path)) if path is not None else {}
    for text in overrides:
        section, key, value = parse_override(text)
        try:
            apply_setting(config, section, key, value)
        except ConfigError as exc:
            raise ConfigError(f"-s {text}: {exc}") from None
        sources[f"{section}.{key}"] = OVERRIDE
    return Effective(check_config(config), sources)


def rows(effective: Effective) -> list[tuple[str, str, Any, str]]:
    """(section, key, value, source) for every setting, in the order config.py declares them."""
    config = effective.config
    return [(section.name, f.name, getattr(getattr(config, section.name), f.name), effective.source_of(section.name, f.name))
            for section in dataclasses.fields(config) for f in dataclasses.fields(getattr(config, section.name))]


def toml_text(value: Any) -> str:
    """A value written as TOML (JSON's strings, numbers and arrays are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    return json.dumps(value)


def show_text(effective: Effective, data: str, data_source: str) -> str:
    """The effective config as TOML a config file could hold, each value's source in a comment."""
    lines = [f"# store: {data}  ({data_source})"]
    section_now = None
    for section, key, value, source in rows(effective):
        if section != section_now:
            lines += ["", f"[{section}]"]
            section_now = section
        lines.append(f"{key} = {toml_text(value)}  # {source}")
    return "\n".join(lines)


def show_json(effective: Effective, data: str, data_source: str) -> str:
    """One JSON line: {"data": {"value", "source"}, "config": {section: {key: {"value", "source"}}}}."""
    config: dict[str, dict[str, Any]] = {}
    for section, key, value, source in rows(effective):
        config.setdefault(section, {})[key] = {"value": value, "source": source}
    return json.dumps({"data": {"value": data, "source": data_source}, "config": config})
