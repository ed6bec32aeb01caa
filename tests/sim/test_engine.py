"""The event core: deterministic order at equal times, cancellation, loud failures."""

import pytest

from trimtab.sim.engine import Engine, Kind


def test_equal_times_follow_the_declared_kind_order_then_insertion():
    engine = Engine()
    seen = []
    for kind, label in [(Kind.TICK, "tick"), (Kind.ARRIVAL, "arr1"), (Kind.FAILURE, "fail"),
                        (Kind.ARRIVAL, "arr2"), (Kind.FINISH, "fin"), (Kind.REPAIR, "rep")]:
        engine.at(5.0, kind, seen.append, label)
    engine.at(1.0, Kind.TICK, seen.append, "early")
    engine.run()
    assert seen == ["early", "fin", "rep", "fail", "arr1", "arr2", "tick"]


def test_cancelled_events_do_not_fire_and_the_past_is_refused():
    engine = Engine()
    seen = []
    token = engine.at(2.0, Kind.FINISH, seen.append, "x")
    engine.at(3.0, Kind.FINISH, seen.append, "y")
    engine.cancel(token)
    engine.run()
    assert seen == ["y"]
    with pytest.raises(ValueError, match="past"):
        engine.at(1.0, Kind.TICK, seen.append, "z")


def test_a_failing_callback_stops_the_run_loudly():
    engine = Engine()

    def boom():
        raise RuntimeError("boom")

    engine.at(1.0, Kind.TICK, boom)
    with pytest.raises(RuntimeError, match="boom"):
        engine.run()
