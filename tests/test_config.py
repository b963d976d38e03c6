"""Tests of cycles/config.py: every setting of every section has a rule that refuses bad
values at load, for TOML files and for config_from_dict (the fetch workers' path), with a
one-line error naming ``section.key``, the value and what is allowed.

A new setting declared without a rule fails test_every_setting_refuses_bad_values.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

from cycles.config import (
    RE2,
    Choice,
    Config,
    Flag,
    Float,
    HostAddresses,
    OptionalFile,
    HostRegexes,
    Int,
    Memory,
    Networks,
    Regexes,
    Strings,
    Text,
    check_config,
    config_from_dict,
    load_config,
    rules_of,
)
from cycles.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


def bad_values(rule) -> list:
    """Values ``rule`` must refuse: of the wrong type, and out of its range."""
    if isinstance(rule, Int):
        values = ["1", 1.5, True, None]
        values += [rule.min - 1] if rule.min is not None else []
        values += [rule.max + 1] if rule.max is not None else []
        return values
    if isinstance(rule, Float):
        values = ["1", True, math.nan, math.inf, None]
        values += [rule.min - 1] if rule.min is not None else []
        values += [rule.max + 1] if rule.max is not None else []
        values += [rule.above] if rule.above is not None else []
        values += [rule.below] if rule.below is not None else []
        return values
    if isinstance(rule, Flag):
        return ["true", 1, 0, None]
    if isinstance(rule, Text):
        return ["", "   ", 5, ["a"], "a\r\nX-Injected: 1", "bot\x00"] + (["not a token! é"] if rule.pattern else [])
    if isinstance(rule, Memory):
        return ["4", "lots", "1KB", "-1GB", "4GB'; SELECT 1; --", 4, "80%"]
    if isinstance(rule, Strings):
        return ["sid", [1], [""], {"a": "b"}, None]
    if isinstance(rule, Regexes):
        return ["x", [1], ["("]] + (["(?=lookahead)"] if rule.engine == RE2 else [])
    if isinstance(rule, HostRegexes):
        return [["a"], {"a.com": "x"}, {"a.com": ["("]}, {"": ["x"]}]
    if isinstance(rule, HostAddresses):
        return [["a"], {"a.com": "not-an-ip"}, {"a.com": 1}, {"": "127.0.0.1"}]
    if isinstance(rule, Networks):
        return ["10.0.0.0/8", ["10.0.0.0/33"], ["x"]]
    if isinstance(rule, Choice):
        return ["not one of them", None]
    if isinstance(rule, OptionalFile):
        return [5, None, "/no/such/file.pem", "/etc/\x00"]
    raise AssertionError(f"no bad values known for rule {rule!r}: add them to bad_values()")


def every_setting() -> list[tuple[str, str]]:
    config = Config()
    return [(section.name, key) for section in dataclasses.fields(config)
            for key in rules_of(type(getattr(config, section.name)))]


def rule_of(section: str, key: str):
    return rules_of(type(getattr(Config(), section)))[key]


@pytest.mark.parametrize("section, key", every_setting(), ids=lambda x: x)
def test_every_setting_refuses_bad_values(section, key):
    rule = rule_of(section, key)
    assert rule is not None, f"{section}.{key} has no constraint: declare one with Annotated[type, Rule]"
    for value in bad_values(rule):
        with pytest.raises(ConfigError) as caught:
            config_from_dict({section: {key: value}})
        message = str(caught.value)
        assert message.startswith(f"{section}.{key} = ") and "\n" not in message, message
        assert "expected" in message, message


@pytest.mark.parametrize("section, key", every_setting(), ids=lambda x: x)
def test_every_default_passes_its_rule(section, key):
    default = getattr(getattr(Config(), section), key)
    config = config_from_dict({section: {key: default}})
    assert getattr(getattr(config, section), key) == default


def test_a_setting_without_a_rule_is_still_type_checked():
    """A setting merged without a rule fails the test above, but still loads, checked
    against its default's type (not a crash of every config load)."""
    from cycles.config import Typed, _rule_or_type_check, check_setting

    @dataclasses.dataclass
    class Section:
        count: int = 3
        name: str = ""
        table: dict = dataclasses.field(default_factory=dict)

    assert rules_of(Section) == {"count": None, "name": None, "table": None}
    assert check_setting("s", "name", _rule_or_type_check(Section, "name"), "") == ""
    assert isinstance(_rule_or_type_check(Section, "table"), Typed)
    with pytest.raises(ConfigError, match=r"^s\.count = '3' is not allowed: expected an integer$"):
        check_setting("s", "count", _rule_or_type_check(Section, "count"), "3")


def test_defaults_pass_and_round_trip():
    """Config() is valid, and the fetch workers' to_dict -> config_from_dict path keeps it."""
    assert check_config(Config()) == Config()
    assert config_from_dict(Config().to_dict()) == Config()


def test_numbers_are_of_the_setting_type():
    config = config_from_dict({"fetch": {"delay_s": 2, "timeout_s": 1.5}, "db": {"buckets": 16}})
    assert config.fetch.delay_s == 2.0 and isinstance(config.fetch.delay_s, float)
    assert config.db.buckets == 16
    with pytest.raises(ConfigError, match=r"db\.buckets = 16\.5 is not allowed: expected an integer from 1 to"):
        config_from_dict({"db": {"buckets": 16.5}})  # once truncated to 16 without a word


def test_relations_between_settings():
    with pytest.raises(ConfigError, match="update.min_interval_s = 100 must not exceed update.max_interval_s = 10"):
        config_from_dict({"update": {"min_interval_s": 100, "max_interval_s": 10}})
    with pytest.raises(ConfigError, match="minhash_max_distance = 5 must be below update.minhash_blocks = 5"):
        config_from_dict({"update": {"minhash_max_distance": 5, "minhash_blocks": 5}})
    # An S3 lock renewed less often than a third of its lease could run out after one failed renewal.
    with pytest.raises(ConfigError, match="db.s3_lock_renew_s = 50.0 must be at most a third of db.s3_lock_lease_s = 120.0"):
        config_from_dict({"db": {"s3_lock_renew_s": 50}})
    with pytest.raises(ConfigError, match="s3_lock_lease_s"):
        config_from_dict({"db": {"s3_lock_lease_s": 1}})  # below the rule's 5 s: renewals could not keep up


def test_shapes_of_the_file():
    with pytest.raises(ConfigError, match=r"unknown config section \[buckets\]"):
        config_from_dict({"buckets": 3})
    with pytest.raises(ConfigError, match=r"unknown config section \[fetch\]"):
        config_from_dict({"fetch": "fast"})
    with pytest.raises(ConfigError, match="unknown setting 'bucket'"):
        config_from_dict({"db": {"bucket": 3}})
    with pytest.raises(ConfigError, match="a config is a table of sections"):
        config_from_dict(["db"])


def test_user_agent_is_printable_ascii():
    """pycurl raises UnicodeEncodeError for a non-ASCII User-Agent: refused at load."""
    with pytest.raises(ConfigError, match=r"fetch\.user_agent = 'bot é' is not allowed: expected printable ASCII"):
        config_from_dict({"fetch": {"user_agent": "bot é"}})


def test_good_values_are_kept():
    config = config_from_dict({
        "db": {"duckdb_memory_limit": "512MiB"},
        "fetch": {"resolve": {"a.test": "127.0.0.2", "b.test": "::1"}, "robots_agent": "my-bot_2"},
        "urls": {"drop_params": ["sid", "utm_*"], "include": {"*": [r"/news/\d+"]}},
        "update": {"news_like_patterns": [r"/\d{4}/\d{2}/"], "news_like_hosts": ["*.example"]},
    })
    assert config.urls.drop_params == ["sid", "utm_*"]
    assert config.fetch.resolve["b.test"] == "::1"


def test_memory_limit_is_parsed():
    rule = Memory()
    for good in ("4GB", "4 GB", "4GiB", "1.5gb", "64MB", "2T"):
        assert rule.check(good) == good
    with pytest.raises(ConfigError, match='expected a memory size such as "4GB"'):
        config_from_dict({"db": {"duckdb_memory_limit": "1MB"}})


def test_load_config_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[db]\nbuckets = 0\n")
    with pytest.raises(ConfigError, match=r"^config file .*bad\.toml: db\.buckets = 0 is not allowed: "
                                          r"expected an integer from 1 to \d+$"):
        load_config(path)


# --- Through the CLI: `python -m cycles --config bad.toml status` ---------------------
DESTRUCTIVE = [
    ("[db]\nbuckets = 0\n", "db.buckets = 0"),                       # a crawl DB with no buckets
    ("[fetch]\nmax_in_flight = 0\n", "fetch.max_in_flight = 0"),     # fetch hung
    ("[fetch]\nmax_page_bytes = -1\n", "fetch.max_page_bytes = -1"),  # every page skipped 90 days
    ("[generate]\ntop_n = -5\n", "generate.top_n = -5"),
    ("[fetch]\ntimeout_s = -1\n", "fetch.timeout_s = -1"),
    ('[fetch]\nrobots_agent = ""\n', "fetch.robots_agent = ''"),
    ('[urls]\ndrop_params = "sid"\n', "urls.drop_params = 'sid' is not allowed: expected a list of non-empty strings"),
    ("[update]\nrevisit_factor = nan\n", "update.revisit_factor = nan"),
]


@pytest.mark.parametrize("toml, expected", DESTRUCTIVE, ids=[e.split(" =")[0] for _, e in DESTRUCTIVE])
def test_cli_refuses_a_destructive_config(tmp_path, toml, expected):
    from typer.testing import CliRunner

    from cycles.commands.cli import app

    config = tmp_path / "bad.toml"
    config.write_text(toml)
    result = CliRunner().invoke(app, ["--data", str(tmp_path / "data"), "--config", str(config), "status"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "bad.toml" in lines[0], result.output


@pytest.mark.web  # runs python -m cycles
def test_cli_subprocess_one_line_exit_2(tmp_path):
    """The real entry point: one line on stderr, exit code 2, no traceback, nothing written."""
    config = tmp_path / "bad.toml"
    config.write_text("[db]\nbuckets = 0\n")
    result = subprocess.run([sys.executable, "-m", "cycles", "--data", str(tmp_path / "data"),
                             "--config", str(config), "status"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == f"crawl: error: config file {config}: db.buckets = 0 is not allowed: " \
                                    "expected an integer from 1 to 100000"
    assert not (tmp_path / "data").exists()


def test_a_renamed_setting_names_its_new_name():
    """update.max_urls_per_host (a total cap, unlike generate.max_urls_per_host) was renamed:
    a config still using it is refused with the new name, not ignored."""
    with pytest.raises(ConfigError, match=r"update\.max_urls_per_host was renamed to update\.max_urls_per_host_total"):
        config_from_dict({"update": {"max_urls_per_host": 50}})
    assert config_from_dict({"update": {"max_urls_per_host_total": 50}}).update.max_urls_per_host_total == 50
    assert config_from_dict({"generate": {"max_urls_per_host": 50}}).generate.max_urls_per_host == 50


@pytest.mark.parametrize("section, old, value", [
    ("fetch", "simhash_main_content", False), ("fetch", "simhash_block_min_bytes", 100),
    ("update", "simhash_max_distance", 2), ("update", "simhash_blocks", 6), ("update", "simhash_min_chars", 100)])
def test_simhash_settings_are_refused_with_their_minhash_names(section, old, value, tmp_path):
    """The fingerprint is a MinHash (issue 25): a config file with a simhash_* key is refused
    in one line naming the minhash_* key; the new key is taken (the positive control)."""
    new = old.replace("simhash_", "minhash_")
    path = tmp_path / "crawl.toml"
    path.write_text(f"[{section}]\n{old} = {str(value).lower()}\n")
    with pytest.raises(ConfigError, match=rf"{section}\.{old} was renamed to {section}\.{new}") as refused:
        load_config(path)
    assert "\n" not in str(refused.value)
    assert getattr(getattr(config_from_dict({section: {new: value}}), section), new) == value
