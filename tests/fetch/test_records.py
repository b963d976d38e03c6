"""cycles/fetch/records.py: the typed record a URL travels as, and the rows it gives."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cycles.fetch.records import FetchItem
from cycles.fetch.rows import row
from cycles.tables import schema


def listed() -> FetchItem:
    table = pa.Table.from_pylist([{"url": "http://a.test/", "host": "a.test", "host_hash": 7, "score": 0.5,
                                   "depth": 2, "etag": '"e1"', "last_modified": None}], schema=schema.FETCHLIST)
    return FetchItem.from_row(table.to_pylist()[0])


def test_a_fetch_list_row_becomes_an_item_with_every_column():
    item = listed()
    assert (item.url, item.host, item.host_hash, item.score, item.depth, item.etag, item.last_modified) == \
        ("http://a.test/", "a.test", 7, 0.5, 2, '"e1"', None)
    assert item.hop is None and item.redirect_chain is None and not item.discovered
    with pytest.raises(AttributeError):
        item.extra = 1  # slots: a misspelt field is an error, not a new key


def test_only_discovery_items_are_discovered_and_leftover_rows_keep_the_schema():
    found = FetchItem("http://a.test/n", "a.test", 7, 1 / 3, 2, hop=1)
    target = FetchItem("http://a.test/r", "a.test", 7, 0.5, 3, hop=0, redirect_chain=("http://a.test/", "http://a.test/r"))
    assert found.discovered and not target.discovered  # a redirect target is not one, whatever its hop
    leftover = pa.Table.from_pylist([found.leftover_row()], schema=schema.LEFTOVER)
    assert leftover.column_names == schema.LEFTOVER.names
    assert leftover.to_pylist()[0]["url"] == "http://a.test/n"


def test_a_row_has_every_fetched_column():
    fetched = row(listed(), "deferred", error="host set aside")
    assert list(fetched) == schema.FETCHED.names
    assert (fetched["url"], fetched["host"], fetched["outcome"], fetched["error"]) == \
        ("http://a.test/", "a.test", "deferred", "host set aside")
    assert pa.Table.from_pylist([fetched], schema=schema.FETCHED).num_rows == 1
