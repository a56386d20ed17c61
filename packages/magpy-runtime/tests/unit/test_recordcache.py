"""Unit tests for the one hit loop and the limit (_recordcache.py), the record sources' order
(_sources.py) and the settings key (_settings.py), with stand-in records."""

from __future__ import annotations

from typing import Any

import attrs

from magpy_codegen import ConfiguredInductor
from magpy_refgraph import SpeculationMiss
from magpy_runtime import config
from magpy_runtime._settings import Settings
from magpy_runtime.cache._recordcache import (
    MISSED,
    NATIVE,
    Hit,
    Limit,
    Miss,
    RecordCache,
    limit_of,
)
from magpy_runtime.cache._sources import SOURCES


@attrs.define(eq=False)
class _Guard:
    passes: bool

    def check(self, *roots: Any) -> Any:
        return [roots[0]] if self.passes else None


@attrs.define(eq=False)
class _Rec:
    """What the hit loop reads of a ``Record``."""

    guard: _Guard
    mock: Any
    failed: bool = False
    hits: int = 0
    memoize: Any = None

    def program_failed(self, miss: SpeculationMiss) -> bool:
        return self.failed


def _mock(value: Any) -> Any:
    return lambda *args: (value, args[-1])


def _raises(*args: Any) -> Any:
    raise SpeculationMiss("a value it assumed differed")


def test_the_first_passing_record_serves_and_moves_to_the_front() -> None:
    a, b = _Rec(_Guard(False), _mock("a")), _Rec(_Guard(True), _mock("b"))
    cache = RecordCache([a, b])  # type: ignore[list-item]
    found = cache.lookup(("root",))
    assert isinstance(found, Hit) and found.value == ("b", ["root"]) and found.record is b
    assert cache.records == [b, a] and b.hits == 1


def test_a_site_keeps_its_order_and_accept_can_pass_over_a_record() -> None:
    a, b = _Rec(_Guard(True), _mock("a")), _Rec(_Guard(True), _mock("b"))
    cache = RecordCache([a, b], move_to_front=False)  # type: ignore[list-item]
    found = cache.lookup(("L", "S"), accept=lambda rec: 0 if rec is a else 7)
    assert isinstance(found, Hit) and found.record is b and found.tag == 7
    assert cache.records == [a, b]


def test_a_miss_says_whether_an_assumption_failed() -> None:
    assert RecordCache([]).lookup(("x",)) is MISSED
    wrong = _Rec(_Guard(True), _raises)
    found = RecordCache([wrong]).lookup(("x",))  # type: ignore[list-item]
    assert isinstance(found, Miss) and found.assumed_wrong


def test_the_programs_own_error_runs_natively() -> None:
    failed = _Rec(_Guard(True), _raises, failed=True)
    later = _Rec(_Guard(True), _mock("later"))
    assert RecordCache([failed, later]).lookup(("x",)) is NATIVE  # type: ignore[list-item]


def test_the_sources_are_tried_siblings_first_then_the_store() -> None:
    assert [s.name for s in SOURCES] == ["siblings", "stored"]


def test_settings_key_one_shape_for_the_pool_and_the_store() -> None:
    inductor = ConfiguredInductor("max-autotune", {"b": 1, "a": 2}, fast_random=False)
    again = ConfiguredInductor("max-autotune", {"a": 2, "b": 1}, fast_random=False)
    assert Settings(inductor).key() == Settings(again).key()
    assert Settings(inductor).key() != Settings(inductor, dynamic=False).key()
    assert Settings(inductor, max_records=3).stored_key() == {
        "backend": {
            "mode": "max-autotune",
            "options": [("a", "2"), ("b", "1")],
            "fast_random": inductor.fast_random,
        },
        "fullgraph": False,
        "dynamic": None,
    }
    assert Settings("eager").stored_key() == {
        "backend": "eager",
        "fullgraph": False,
        "dynamic": None,
    }
    assert Settings(lambda gm, ex: gm).stored_key() is None
    assert Settings({"unhashable": 1}).key() is None


def test_the_limit_is_the_callables_own_else_the_configs() -> None:
    """``limit_of``: ``options["magpy.max_records"]`` wins over ``magpy.config.max_records``,
    and each is named as the source."""
    assert limit_of(3) == Limit(3, "options['magpy.max_records']")
    with config.patch(max_records=5):
        found = limit_of(None)
    assert found.allowed == 5 and "max_records" in found.source


def test_a_cache_is_full_at_its_limit_and_knows_its_last_record() -> None:
    """The go-eager policy: full at as many records as allowed; the next record is the last
    one allowed when it brings the cache to the limit."""
    recs = [_Rec(_Guard(False), _mock(i)) for i in range(2)]
    cache = RecordCache(recs[:1])  # type: ignore[arg-type]
    two = Limit(2, "test")
    assert not cache.full(two) and cache.last(two)
    cache.records.append(recs[1])  # type: ignore[arg-type]
    assert cache.full(two) and cache.last(two)
    assert not RecordCache([]).full(two) and not RecordCache([]).last(two)
