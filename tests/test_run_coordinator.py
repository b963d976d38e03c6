"""``crawl run``'s coordinator (cycles/commands/run.py): while a segment is fetched it updates only the
segments fetched before it, never the one whose fetch ends during its update (the main
thread waits for the coordinator before it generates, so that update would hold every host).
Segments are marker files and update is a stub: no crawl, fast tier."""

from __future__ import annotations

import pytest

from cycles.commands import run
from cycles.tables import segment as seg


def make_segment(store, segment: str, *markers) -> None:
    store.path("segments", segment).mkdir(parents=True, exist_ok=True)
    for marker in markers:
        seg.write_marker(store, marker(segment))


class StubUpdate:
    """Marks a segment updated; updating ``s1`` also ends the fetch of ``s2`` (a thin
    segment's fetch that ends while the update beside it still runs)."""

    def __init__(self, store):
        self.store = store
        self.updated: list[str] = []

    def __call__(self, store, config, segment):
        if segment == "s1":
            seg.write_marker(store, seg.Fetched("s2"))
        seg.write_marker(store, seg.Updated(segment))
        self.updated.append(segment)
        return type("Result", (), {"counters": {}})()


def test_the_coordinator_leaves_the_segment_being_fetched_to_the_next_turn(store, monkeypatch):
    make_segment(store, "s1", seg.Generated, seg.Fetched)
    make_segment(store, "s2", seg.Generated, seg.Fetching)
    stub = StubUpdate(store)
    monkeypatch.setattr(run, "update_segment", stub)
    state = run.RunState()
    lines = list(run.coordinate(store, None, state, None, run.RunStop(None), False, fetching="s2"))
    assert stub.updated == ["s1"] and state.updated == ["s1"] and len(lines) == 1
    assert seg.state(store, "s2") == seg.State.FETCHED  # left for the next turn, after a generate


def test_without_a_bound_every_fetched_segment_is_updated_oldest_first(store, monkeypatch):
    make_segment(store, "s1", seg.Generated, seg.Fetched)
    make_segment(store, "s2", seg.Generated, seg.Fetching)
    stub = StubUpdate(store)
    monkeypatch.setattr(run, "update_segment", stub)
    list(run.update_fetched(store, None, run.RunState()))
    assert stub.updated == ["s1", "s2"]


def test_a_thin_fetch_is_ended_when_the_update_beside_it_ends_even_a_failed_one(store, monkeypatch):
    from cycles.fetch.partition import progress_dir
    from cycles.fetch.worker import EARLY_END_FILE

    make_segment(store, "s1", seg.Generated, seg.Fetched)
    make_segment(store, "s2", seg.Generated, seg.Fetching)
    monkeypatch.setattr(run, "THIN_MIN_S", 0.0)
    end_file = progress_dir(store, "s2") / EARLY_END_FILE
    monkeypatch.setattr(run, "update_segment", StubUpdate(store))
    list(run.coordinate(store, None, run.RunState(), None, run.RunStop(None), False, fetching="s2", thin=False))
    assert not end_file.exists()  # a segment that is not thin keeps its time limit
    make_segment(store, "s3", seg.Generated, seg.Fetched)
    make_segment(store, "s4", seg.Generated, seg.Fetching)

    def failing(store, config, segment):
        raise RuntimeError("update failed")

    monkeypatch.setattr(run, "update_segment", failing)
    end_file = progress_dir(store, "s4") / EARLY_END_FILE
    with pytest.raises(RuntimeError):
        list(run.coordinate(store, None, run.RunState(), None, run.RunStop(None), False, fetching="s4", thin=True))
    assert end_file.exists()
    # Once the fetch is over (its bound ended it first), no request is left behind.
    seg.write_marker(store, seg.Fetched("s4"))
    end_file.unlink()
    monkeypatch.setattr(run, "update_segment", StubUpdate(store))
    list(run.coordinate(store, None, run.RunState(), None, run.RunStop(None), False, fetching="s4", thin=True))
    assert not end_file.exists()


def test_compaction_owed_by_an_update_runs_at_the_start_of_the_next_turn(store, monkeypatch):
    """The main thread waits for the whole turn when its fetch ends first: a compaction after
    the update (or the generate) held every host that long. It runs at the start of the
    next turn instead, beside that turn's fetch, before its update."""
    events: list[str] = []
    stub = StubUpdate(store)

    def update(store, config, segment):
        events.append(f"update {segment}")
        return stub(store, config, segment)

    def compact(store, config, who):
        events.append("compact")
        yield f"{who}: compacted"

    monkeypatch.setattr(run, "update_segment", update)
    monkeypatch.setattr(run, "compact_when_due", compact)
    state = run.RunState()
    make_segment(store, "s1", seg.Generated, seg.Fetched)
    make_segment(store, "s2", seg.Generated, seg.Fetching)
    list(run.coordinate(store, None, state, None, run.RunStop(None), False, fetching="s2"))
    assert events == ["update s1"]  # the turn ends with its update: nothing compacted yet
    seg.write_marker(store, seg.Fetched("s2"))
    make_segment(store, "s3", seg.Generated, seg.Fetching)
    list(run.coordinate(store, None, state, None, run.RunStop(None), False, fetching="s3"))
    assert events == ["update s1", "compact", "update s2"]
    # The next turn, with nothing fetched to update, compacts what s2's update owed, once.
    seg.write_marker(store, seg.Fetched("s3"))
    seg.write_marker(store, seg.Updated("s3"))
    make_segment(store, "s4", seg.Generated, seg.Fetching)
    list(run.coordinate(store, None, state, None, run.RunStop(None), False, fetching="s4"))
    make_segment(store, "s5", seg.Generated, seg.Fetching)
    list(run.coordinate(store, None, state, None, run.RunStop(None), False, fetching="s5"))
    assert events == ["update s1", "compact", "update s2", "compact"]
