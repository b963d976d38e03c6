"""crawl.toml at the repo root: every setting of cycles/config.py at its default, with
the documentation config.py gives it, as an example config for operators.

tests/test_cli_ops.py checks that crawl.toml loads, lists every setting and holds the
defaults, tests/test_scripts.py that it is what this writes; run this after adding or
changing a setting:

    python scripts/regenerate.py config
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "crawl.toml"

from cycles.config import Config  # noqa: E402
from cycles.commands.effective_config import toml_text  # noqa: E402

HEADER = """\
# crawl.toml: an example config. Every setting is here at its default, documented as in
# cycles/config.py (the home of the defaults, their units and their rules). Copy it, change
# what you need and delete the rest: a setting left out keeps its default, an unknown one is
# an error. Use it with `crawl --config crawl.toml ...` (or CRAWL_CONFIG=crawl.toml); override
# one setting for one run with `-s section.key=value`; see the result with `crawl config show`.
#
# Before crawling the public web, set fetch.user_agent to your crawler's name and a contact URL.
#
# Written by scripts/regenerate.py; run it again after changing cycles/config.py.
"""


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass and of the dataclasses it extends (a
    section in two parts: FetchConfig); attribute docstrings are only in the source."""
    docs = {}
    for part in reversed([c for c in cls.__mro__ if dataclasses.is_dataclass(c)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(part))).body[0].body
        for node, after in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def comment(text: str) -> list[str]:
    return [("# " + line).rstrip() for line in text.splitlines()]


def example_config() -> str:
    config = Config()
    lines = HEADER.splitlines()
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        cls = type(values)
        docs = field_docs(cls)
        lines += ["", f"[{section.name}]"] + comment(inspect.cleandoc(cls.__doc__ or ""))
        for f in dataclasses.fields(values):
            lines += [""] + comment(docs.get(f.name, "")) + [f"{f.name} = {toml_text(getattr(values, f.name))}"]
    return "\n".join(lines) + "\n"


def text() -> str:
    return example_config()
