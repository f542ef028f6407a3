"""``no_cyclic_gc`` (pipelines.history.tables): the collector paused while a batch's decoded
records are built, and what was built handed to the oldest generation on the way out, so
that re-enabling the collector does not walk millions of live records at once."""

from __future__ import annotations

import gc
import weakref

from pipelines.history.tables import no_cyclic_gc


def _in_generation(obj: object, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation=generation))


def test_the_section_pauses_the_collector_and_its_objects_join_the_oldest_generation() -> None:
    assert gc.isenabled()
    with no_cyclic_gc():
        assert not gc.isenabled()
        built = [[i] for i in range(1000)]
    assert gc.isenabled()
    assert _in_generation(built, 2) and _in_generation(built[-1], 2)
    assert not _in_generation(built, 0) and not _in_generation(built, 1)


def test_a_nested_section_leaves_the_collector_paused_and_cycles_are_still_collected() -> None:
    with no_cyclic_gc():
        with no_cyclic_gc():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    with no_cyclic_gc():
        cycle = _Node()
        cycle.me = cycle
    probe = weakref.ref(cycle)
    del cycle
    gc.collect()
    assert probe() is None


class _Node:
    me: object = None
