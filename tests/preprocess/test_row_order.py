"""InRowOrder: outcomes put in any order come out in row order, early records spilled to disk past a cap."""

import random

import numpy as np

from beam_pipeline.preprocess.row_order import InRowOrder
from beam_pipeline.preprocess.row_preprocessor import Written
from tf_serving_input import failures


def outcome(position):
    if position % 7 == 3:
        return failures.RowFailure(failures.HTTP_404, f"row {position}")
    return Written(bytes([position % 256]) * (50 + position), np.full(7, position, np.int64))


def test_any_arrival_order_gives_row_order_and_the_same_outcomes():
    positions = list(range(200))
    random.Random(4).shuffle(positions)
    in_order = InRowOrder(memory_bytes=2000)  # Most early records go to the spill file.
    handed = []
    try:
        for position in positions:
            in_order.put(position, f"row{position}", outcome(position))
            handed += list(in_order.ready())
    finally:
        in_order.close()
    assert [row for row, _ in handed] == [f"row{position}" for position in range(200)]
    for position, (_, got) in enumerate(handed):
        want = outcome(position)
        if isinstance(want, Written):
            assert got.record == want.record and (got.moments == want.moments).all()
        else:
            assert got == want
    assert in_order.spilled > 50 and in_order.waiting == 0


def test_nothing_is_handed_on_before_the_row_before_it():
    in_order = InRowOrder()
    in_order.put(1, "b", outcome(1))
    in_order.put(2, "c", outcome(2))
    assert list(in_order.ready()) == [] and in_order.waiting == 2
    in_order.put(0, "a", outcome(0))
    assert [row for row, _ in in_order.ready()] == ["a", "b", "c"]
    assert in_order.spilled == 0  # Small records stay in memory.
    in_order.close()
