"""A range answer placed on the query's grid: series that share their timestamps are placed at once, as the
series one by one would be."""

from __future__ import annotations

import math

import numpy as np

from playbooks._diagnose_execute import _on_grid
from playbooks.prometheus import Series


def _one_by_one(data, start, step, n):
    out = []
    for s in data:
        grid = np.full(n, np.nan)
        for t, v in zip(s.timestamps, s.values, strict=True):
            i = round((t - start) / step)
            if 0 <= i < n and math.isfinite(v):
                grid[i] = v
        out.append((s.labels, grid))
    return out


def _same(a, b):
    return [la for la, _ in a] == [lb for lb, _ in b] and all(
        np.array_equal(x, y, equal_nan=True) for (_, x), (_, y) in zip(a, b, strict=True)
    )


def test_series_sharing_their_timestamps_land_where_each_alone_would():
    ts = (90.0, 150.0, 210.0, 270.0, 330.0)  # the first before the grid, the last after it
    data = [
        Series({"gpu": "0"}, ts, (1.0, 2.0, math.inf, 4.0, 5.0)),
        Series({"gpu": "1"}, ts, (6.0, math.nan, 8.0, -math.inf, 10.0)),
    ]
    got = _on_grid(data, 150.0, 60.0, 3)
    assert _same(got, _one_by_one(data, 150.0, 60.0, 3))
    assert got[0][1].tolist()[0] == 2.0 and math.isnan(got[0][1][1]) and got[1][1].tolist()[1] == 8.0


def test_series_with_their_own_timestamps_are_placed_one_by_one():
    data = [
        Series({"gpu": "0"}, (150.0, 210.0), (1.0, 2.0)),
        Series({"gpu": "1"}, (210.0,), (3.0,)),
        Series({"gpu": "2"}, (), ()),
        Series({"gpu": "3"}, (150.0, 155.0), (4.0, 5.0)),  # two points on one grid point
    ]
    assert _same(_on_grid(data, 150.0, 60.0, 3), _one_by_one(data, 150.0, 60.0, 3))
    assert _same(_on_grid(data[3:], 150.0, 60.0, 3), _one_by_one(data[3:], 150.0, 60.0, 3))
    assert _on_grid([], 150.0, 60.0, 3) == []
