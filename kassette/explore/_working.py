"""How long a run worked, and how long it waited: the runs table's `working_s` and `waiting_s`.

A run works in sessions: each start, retry, resume or fork opens one (a `start` entry), and
between two sessions the run did nothing (it waited for a human's resume, for a sleep's
wake-up, or for someone to retry it). A session worked from its first entry (a step's entry is
written when the step ends, so from `timestamp - duration_ms`) to its last. `working_s` is the
sum over the run's own sessions (a fork's copied prefix is its source's work), and `waiting_s`
is the rest of `duration_s`, the gaps between sessions: empty while the run is open, as
`duration_s` is.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["working_columns"]

Floats = npt.NDArray[np.float64]


def working_columns(
    entries: pa.Table, counts: npt.NDArray[np.int64], duration: pa.Array
) -> list[pa.Array]:
    """`working_s` and `waiting_s` of runs holding `counts` entries each (in `entries`' order,
    with its `copied` column), given their `duration_s`."""
    runs = len(counts)
    working = np.full(runs, np.nan)
    if entries.num_rows:
        owner = np.repeat(np.arange(runs, dtype=np.int64), counts)
        stamps = entries.column("timestamp")
        own = np.logical_not(entries.column("copied").to_numpy(zero_copy_only=False))
        own &= stamps.is_valid().to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(own)
        if len(rows):
            working = _sessions_summed(entries, stamps, rows, owner, runs)
    seconds = pa.array(working, pa.float64(), from_pandas=True)  # NaN: no own entry, null
    waiting = pc.max_element_wise(pc.subtract(duration, seconds), 0.0, skip_nulls=False)
    return [seconds, waiting]


def _sessions_summed(
    entries: pa.Table, stamps: pa.ChunkedArray, rows: npt.NDArray[np.int64],
    owner: npt.NDArray[np.int64], runs: int,
) -> Floats:  # fmt: skip
    """The sum, per run, of each session's span from its first moment to its last."""
    ended = pc.cast(stamps, pa.int64()).to_numpy(zero_copy_only=False)[rows].astype(np.float64)
    took = entries.column("duration_ms").fill_null(0.0).to_numpy(zero_copy_only=False)[rows]
    steps = pc.equal(entries.column("type"), "step").to_numpy(zero_copy_only=False)[rows]
    began = ended - np.where(steps, took, 0.0)
    run = owner[rows]
    session = entries.column("session").fill_null(0).to_numpy(zero_copy_only=False)[rows]
    # a journal's sessions only grow with its offsets: a session is one stretch of rows
    starts = np.flatnonzero(np.r_[True, (run[1:] != run[:-1]) | (session[1:] != session[:-1])])
    spans = np.maximum.reduceat(ended, starts) - np.minimum.reduceat(began, starts)
    summed = np.bincount(run[starts], weights=spans / 1000.0, minlength=runs)
    seen = np.zeros(runs, dtype=bool)
    seen[run[starts]] = True
    return np.where(seen, summed, np.nan)
