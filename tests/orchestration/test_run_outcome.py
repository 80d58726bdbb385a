"""The run's place across threads (harness/run_outcome.py ``Place``): a variant's thread
notes where an exception happened, the thread that records it takes that place. The
record's outcomes themselves are tested through runs in test_errors_are_data.py and
test_signal_outcomes.py."""

from __future__ import annotations

import threading

from harness.run_outcome import Place


def test_a_place_noted_in_a_thread_is_the_place_the_recording_thread_takes():
    place = Place()
    place.at("gates", config="c", variant=None, task=None)   # the recording thread's own place
    caught: list[BaseException] = []

    def variant_thread() -> None:
        place.at("scoring", config="c", variant="spec", task="gsm8k")
        try:
            raise ZeroDivisionError("division by zero")
        except ZeroDivisionError as e:
            place.stamp(e)
            place.at("writing", variant="other")   # a later stamp by an outer thread must not replace it
            place.stamp(e)
            caught.append(e)

    t = threading.Thread(target=variant_thread)
    t.start()
    t.join()
    assert (place.stage, place.variant) == ("gates", None)   # one place per thread
    place.restore(caught[0])
    assert (place.stage, place.config, place.variant, place.task) == ("scoring", "c", "spec", "gsm8k")


def test_an_exception_without_a_noted_place_leaves_the_place():
    place = Place()
    place.at("model", config="c")
    place.restore(ValueError("x"))
    assert (place.stage, place.config, place.variant, place.task) == ("model", "c", None, None)
