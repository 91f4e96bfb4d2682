"""Wall time <-> step alignment: canned step samples, then a served restored job."""

from __future__ import annotations

import math

import numpy as np
import pytest

from playbooks.alignment import AlignmentError, StepAxis, step_axis_from_series
from playbooks.profiles import PROFILES

NOW = 1_773_000_000.0


def _axis(pairs: list[tuple[float, float]], **kw) -> StepAxis:
    return StepAxis.from_samples([NOW + t for t, _ in pairs], [s for _, s in pairs], **kw)


STEADY = [(0, 0), (10, 1), (20, 2), (30, 3), (40, 4)]
# Step 2 holds for 30 s (a slow step), then training goes on.
HOLD = [(0, 0), (10, 1), (20, 2), (30, 2), (40, 2), (50, 3)]
# Samples missing between 20 s and 120 s while the step went on from 2 to 7.
GAP = [(0, 0), (10, 1), (20, 2), (120, 7), (130, 8)]
# Restored at step 3 after reaching 5: the step goes back.
RESTORE = [(0, 1), (10, 2), (20, 3), (30, 4), (40, 5), (100, 3), (110, 4), (120, 5), (130, 6)]
# Staleness fills already dropped show up as NaN samples.
NANS = [(0, 0), (10, float("nan")), (20, 2), (30, 3)]


@pytest.mark.parametrize(
    ("pairs", "t", "expected"),
    [
        (STEADY, 0, 0.0),
        (STEADY, 25, 2.5),
        (STEADY, 40, 4.0),
        (STEADY, -1, math.nan),
        (STEADY, 41, math.nan),
        (HOLD, 35, 2.0),
        (HOLD, 45, 2.5),
        (GAP, 70, 4.5),
        (RESTORE, 35, 4.5),
        (RESTORE, 70, math.nan),
        (RESTORE, 105, 3.5),
        (NANS, 10, 1.0),
    ],
)
def test_step_at_maps_time_to_step(pairs, t, expected) -> None:
    """step_at interpolates inside pieces, holds during stalls and is NaN outside and between pieces."""
    got = _axis(pairs).step_at(NOW + t)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("pairs", "step", "occurrence", "expected"),
    [
        (STEADY, 3, "latest", 30.0),
        (STEADY, 2.5, "latest", 25.0),
        (STEADY, 9, "latest", math.nan),
        (STEADY, -1, "latest", math.nan),
        (HOLD, 2, "latest", 20.0),
        (HOLD, 3, "latest", 50.0),
        (GAP, 5, "latest", 80.0),
        (RESTORE, 4, "latest", 110.0),
        (RESTORE, 4, "earliest", 30.0),
        (RESTORE, 1, "latest", 0.0),
        (RESTORE, 6, "earliest", 130.0),
    ],
)
def test_time_at_maps_step_to_time(pairs, step, occurrence, expected) -> None:
    """time_at gives when a step was first reached, the latest occurrence after a restore by default."""
    got = _axis(pairs).time_at(step, occurrence=occurrence)
    assert (math.isnan(got) and math.isnan(expected)) or got - NOW == pytest.approx(expected)


@pytest.mark.parametrize(
    ("pairs", "pieces", "gaps", "restores"),
    [
        (STEADY, 1, 0, 0),
        (HOLD, 1, 0, 0),
        (GAP, 1, 1, 0),
        (RESTORE, 2, 0, 1),
        (RESTORE + [(200, 2), (210, 3)], 3, 0, 2),
        ([], 0, 0, 0),
    ],
)
def test_it_finds_pieces_gaps_and_restores(pairs, pieces, gaps, restores) -> None:
    """The step going back splits pieces; long holes inside a piece are gaps."""
    axis = _axis(pairs)
    assert (len(axis.pieces), len(axis.gaps), len(axis.restores)) == (pieces, gaps, restores)


def test_restore_records_from_and_to_steps() -> None:
    """A restore names the step it left and the step it went back to."""
    (restore,) = _axis(RESTORE).restores
    assert (restore.from_step, restore.to_step, restore.time - NOW, restore.last_time_before - NOW) == (
        5,
        3,
        100,
        40,
    )
    assert [t - NOW for t in _axis(RESTORE).occurrences(4)] == [30.0, 110.0]


def test_it_is_vectorised_and_keeps_shape() -> None:
    """Arrays in, arrays out, with NaN where the data does not reach."""
    axis = _axis(RESTORE)
    got = axis.step_at(np.array([NOW - 5, NOW + 5, NOW + 70, NOW + 125]))
    np.testing.assert_allclose(got, [np.nan, 1.5, np.nan, 5.5])
    back = axis.time_at(np.array([1.5, 3.5, 99]))
    np.testing.assert_allclose(back - NOW, [5.0, 105.0, np.nan])


def test_unsorted_samples_and_duplicates_are_tolerated() -> None:
    """Samples in any order with repeated timestamps give the same axis as sorted ones."""
    shuffled = [STEADY[3], STEADY[0], STEADY[2], STEADY[1], STEADY[4], STEADY[2]]
    assert _axis(shuffled).step_at(NOW + 25) == pytest.approx(2.5)


def test_last_advance_is_the_start_of_a_final_stall() -> None:
    """The hang starts when the last step value first appears, not when the samples end."""
    axis = _axis([(0, 0), (10, 1), (20, 2), (30, 2), (300, 2)])
    assert axis.last_advance() - NOW == 20.0
    assert math.isnan(StepAxis(pieces=()).last_advance())


def test_mismatched_arrays_are_refused() -> None:
    """Times and steps of different lengths raise AlignmentError."""
    with pytest.raises(AlignmentError):
        StepAxis.from_samples([1.0, 2.0], [1.0])
    with pytest.raises(AlignmentError):
        _axis(STEADY).time_at(1, occurrence="middle")


def test_restored_generated_job_maps_steps_to_times(served_job) -> None:
    """On a served restored job the axis starts at the restore point and round-trips steps and times."""
    client, truth, _ = served_job("restore-resource-leak")
    start, end = truth["data_range"]
    axis = step_axis_from_series(client.query_range(PROFILES["amd"].expr("step"), start, end, 15.0))
    assert not axis.empty
    assert axis.first_step == truth["first_step"] == truth["restored_from"] + 1
    assert axis.last_step == truth["last_step"]
    mid = (truth["first_step"] + truth["last_step"]) / 2
    assert axis.step_at(axis.time_at(mid)) == pytest.approx(mid, abs=0.01)
    assert truth["train_start"] <= axis.time_at(truth["first_step"]) <= truth["warmup_end"]
    assert math.isnan(axis.step_at(start - 10))
