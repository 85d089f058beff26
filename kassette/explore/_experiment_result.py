"""An experiment's outcome, read from the store: a row per branch, the summary, a forest plot.

An `Experiment` is what `kx.experiment` returns and what `kx.load(store).experiments` reopens:
both read the same journals (the experiment's own run `NAME.experiment`, whose input is the
design and whose steps `score:SOURCE/RUN_ID/score` are the scores, and the branch runs
`NAME.SOURCE.VARIANT.i`), so a reopened experiment shows exactly what the call that ran it
showed, without running anything. A call adds only what it alone knows (`Live`): branches it
stopped or could not start, scores that raised, and the budget it was given.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from kassette._engine import RunResult
from kassette.core import read_journal
from kassette.errors import InvalidArgumentError, RunNotFoundError
from kassette.explore._running import Board, Halted, Raised
from kassette.explore._stats import power_table, summarize

if TYPE_CHECKING:
    from kassette.explore._frames import Journals
    from kassette.explore._progress import Budget
    from kassette.explore._widgets import CompareView

__all__ = ["Experiment"]

EXPERIMENT_VERSION = "kassette.experiment/1"  # the version of every experiment's own run
RECORDED = "recorded"  # the baseline that scores each source run's own recorded result
# an experiment run's parallel block `score:SOURCE` holds the scores of that source run's
# branches (and of the source, for a recorded baseline): step `score:SOURCE/RUN_ID/score`
SCORE_STEP = "score:"
NOT_RUN = "not run"  # a branch never launched (the experiment was decided, or stopped)
STOPPED = "stopped"
RAISED = "raised"
FRAME_COLUMNS = [
    "source_run_id",
    "variant",
    "repeat",
    "run_id",
    "status",
    "score",
    "cost_usd",
    "tokens",
]
_RUN_STATUS_WORDS = {  # a journal's state, in the words of an invocation (decision 1)
    "completed": "success",
    "failed": "failed",
    "suspended": "suspended",
    "canceled": "canceled",
    "running": STOPPED,
}


def experiment_run_id(name: str) -> str:
    return f"{name}.experiment"


def branch_run_id(name: str, source: str, variant: str, repeat: int) -> str:
    return f"{name}.{source}.{variant}.{repeat}"


@dataclass
class Live:
    """What the call that ran an experiment knows beyond its journals."""

    board: Board | None = None
    budget: Budget | None = None
    interrupted: bool = False
    stopped_by: str | None = None  # "interrupt" or "budget"
    decided_after: int | None = None
    score_errors: dict[str, str] = field(default_factory=dict)


class Experiment:
    """One experiment: its design, a row per branch (`frame`), the paired comparison of each
    variant with the baseline (`summary`), and how many runs an effect needs (`power`).

    Shown in a notebook cell: the summary table and a forest plot (each variant's difference
    from the baseline with its interval, and the zero line)."""

    def __init__(self, storage: Any, design: dict[str, Any], *, live: Live | None) -> None:
        self.storage = storage
        self.design = design
        self._live = live
        self._frame: pd.DataFrame | None = None
        self._result: dict[str, Any] | None = None

    # -- the design ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.design["name"])

    @property
    def run_id(self) -> str:
        """The experiment's own run: its input is the design, its steps the scores."""
        return experiment_run_id(self.name)

    @property
    def baseline(self) -> str:
        return str(self.design["baseline"])

    @property
    def variants(self) -> list[str]:
        """Every arm, the baseline first."""
        return [self.baseline, *(v for v in self.design["variants"] if v != self.baseline)]

    @property
    def stopped_early(self) -> bool:
        """Whether `stop_when` stopped the experiment before every source run was tried."""
        return self.decided_after is not None

    @property
    def decided_after(self) -> int | None:
        """After how many source runs (in the run order) every variant was decided."""
        if self._live is not None and self._live.decided_after is not None:
            return self._live.decided_after
        result = self._recorded_result()
        return None if result is None else result.get("decided_after")

    # -- data ------------------------------------------------------------------------------

    @property
    def frame(self) -> pd.DataFrame:
        """A row per branch (and per source run, for a recorded baseline): `source_run_id`,
        `variant`, `repeat`, `run_id`, `status` ("success", "failed", "suspended", "canceled";
        "stopped": stopped at a step boundary, open; "raised"; "not run": never launched),
        `score` (booleans stay booleans; NaN where missing), `cost_usd` and `tokens` (the
        branch's own model calls; 0 for a recorded baseline), and `cluster` when clustered."""
        if self._frame is None:
            self._frame = self._read_frame()
        return self._frame

    def summary(self, alpha: float = 0.05) -> pd.DataFrame:
        """A row per variant against the baseline (`kx.summarize` on `frame`)."""
        clusters = "cluster" if self.design.get("clusters") else None
        return summarize(self.frame, baseline=self.baseline, cluster=clusters, alpha=alpha)

    def power(
        self, effect: float | None = None, *, alpha: float = 0.05, power: float = 0.8
    ) -> pd.DataFrame:
        """Per variant: `detectable_effect` (the smallest difference these pairs detect with
        `power`) and `runs_needed` (source runs to detect `effect`, default the observed
        difference), from the spread of the per-source differences."""
        return power_table(
            self.frame, baseline=self.baseline, effect=effect, alpha=alpha, power=power
        )

    def compare(self, variant: str, *, pairs: int = 3) -> CompareView:
        """A `CompareView` of the `pairs` source runs where `variant` and the baseline differ
        most: each baseline run beside the variant's branch (the first repeat)."""
        from kassette.explore._frames import load
        from kassette.explore._widgets import CompareView

        if variant not in self.variants or variant == self.baseline:
            raise InvalidArgumentError(
                f"variant must be one of {self.variants[1:]}, not {variant!r}"
            )
        frame = self.frame[self.frame["score"].notna()]
        means = (
            frame.assign(score=frame["score"].astype("float64"))
            .groupby(["source_run_id", "variant"])["score"]
            .mean()
            .unstack("variant")
        )
        gaps = (means[variant] - means[self.baseline]).abs().dropna()
        chosen = gaps.sort_values(ascending=False, kind="stable").index[:pairs]
        run_ids = []
        for source in chosen:
            run_ids += [self._first_run(source, self.baseline), self._first_run(source, variant)]
        if not run_ids:
            raise InvalidArgumentError(
                f"no source run has scores for both {variant!r} and the baseline"
            )
        return CompareView(load(self.storage, run_ids=run_ids), run_ids, baseline=run_ids[0])

    def forest(self, alpha: float = 0.05) -> Any:
        """The forest plot (an `altair.Chart`): each variant's difference from the baseline
        and its interval, and the zero line."""
        import altair as alt

        summary = self.summary(alpha)
        # keys in alphabetical order: a notebook stores them sorted, and nbval compares text
        records = [
            {
                "ci_high": _number(row.ci_high),
                "ci_low": _number(row.ci_low),
                "difference": _number(row.difference),
                "p_holm": _number(row.p_holm),
                "pairs": int(row.pairs),
                "verdict": _verdict(row.difference, row.p_holm, alpha),
                "variant": row.variant,
            }
            for row in summary.itertuples()
        ]
        data = alt.InlineData(values=records)
        y = alt.Y("variant:N", sort=None, title=None)
        x_title = f"difference from {self.baseline} ({100 * (1 - alpha):g}% interval)"
        # the table's colours: better and worse (Holm-adjusted p < alpha), or undecided
        color = alt.Color(
            "verdict:N",
            legend=None,
            scale=alt.Scale(domain=list(_VERDICT_COLOURS), range=list(_VERDICT_COLOURS.values())),
        )
        rules = (
            alt.Chart(data)
            .mark_rule(strokeWidth=2)
            .encode(x=alt.X("ci_low:Q", title=x_title), x2="ci_high:Q", y=y, color=color)
        )
        tooltip = ["variant:N", "difference:Q", "ci_low:Q", "ci_high:Q", "p_holm:Q", "pairs:Q"]
        points = (
            alt.Chart(data)
            .mark_point(filled=True, size=70)
            .encode(x="difference:Q", y=y, color=color, tooltip=tooltip)
        )
        zero = (
            alt.Chart(alt.InlineData(values=[{"zero": 0}]))
            .mark_rule(strokeDash=[4, 3], color="#111827")
            .encode(x="zero:Q")
        )
        height = max(60, 28 * len(records))
        return (zero + rules + points).properties(width=420, height=height, title=self.name)

    # -- display ---------------------------------------------------------------------------

    def status_line(self) -> str:
        """What the experiment ran: 'decided after 34 of 200 runs, $1.12 of $5', or the
        branches run of those planned, with what stopped it."""
        sources = len(self.design["sources"])
        frame = self.frame
        branches = frame[frame["variant"] != RECORDED] if self.baseline == RECORDED else frame
        ran = int(branches["status"].isin(["success", "failed", "suspended", "canceled"]).sum())
        spent = _money(frame["cost_usd"])
        budget = self._live.budget if self._live is not None else None
        if self.decided_after is not None:
            text = f"decided after {self.decided_after} of {sources} runs"
        else:
            text = f"{ran} of {len(branches)} branches done"
        text += (
            f", {spent}"
            if budget is None or math.isinf(budget.usd)
            else f", {spent} of ${budget.usd:g}"
        )
        if budget is not None and not math.isinf(budget.tokens):
            text += f", {int(frame['tokens'].sum()):,} of {int(budget.tokens):,} tokens"
        if self.decided_after is not None:
            text += f"; {int((branches['status'] == NOT_RUN).sum())} branches not run"
        stopped = int((branches["status"] == STOPPED).sum())
        if stopped:
            why = self._live.stopped_by if self._live is not None else None
            text += (
                f"; {stopped} stopped" + (f" by {why}" if why else "") + ": call again to continue"
            )
        if self._live is not None and self._live.score_errors:
            text += f"; {len(self._live.score_errors)} scores raised: call again to retry"
        return text

    def __repr__(self) -> str:
        return f"<Experiment {self.name}: {self.status_line()}>"

    def _repr_html_(self) -> str:
        summary = self.summary()
        title = html.escape(f"Experiment {self.name}: {self.status_line()}")
        table = _summary_html(summary, self.baseline)
        return f"<div class='kassette-experiment'><p><b>{title}</b></p>{table}</div>"

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        display(HTML(self._repr_html_()))  # type: ignore[no-untyped-call]
        # the spec itself, which JupyterLab's built-in Vega-Lite renderer draws (offline)
        spec = self.forest().to_dict()
        spec["$schema"] = "https://vega.github.io/schema/vega-lite/v5.json"
        plain = f"forest plot: {len(self.variants) - 1} variants against {self.baseline}"
        display(  # type: ignore[no-untyped-call]
            {"application/vnd.vegalite.v5+json": spec, "text/plain": plain}, raw=True
        )

    # -- reading the store -----------------------------------------------------------------

    def _recorded_result(self) -> dict[str, Any] | None:
        if self._result is None:
            try:
                state = read_journal(self.storage, self.run_id).state
            except RunNotFoundError:
                return None
            if state.status != "completed" or not isinstance(state.result, dict):
                return None
            self._result = state.result
        return self._result

    def _first_run(self, source: str, variant: str) -> str:
        if variant == RECORDED:
            return source
        return branch_run_id(self.name, source, variant, 0)

    def _read_frame(self) -> pd.DataFrame:
        from kassette.explore._frames import load

        design = self.design
        scores = _scores_of(self.storage, self.run_id)
        rows = []
        for source in design["sources"]:
            for variant in self.variants:
                if variant == RECORDED:
                    rows.append((source, variant, 0, source))
                    continue
                for repeat in range(design["repeats"]):
                    rows.append(
                        (source, variant, repeat, branch_run_id(self.name, source, variant, repeat))
                    )
        frame = pd.DataFrame(rows, columns=["source_run_id", "variant", "repeat", "run_id"])
        branch_ids = [r for (_, v, _, r) in rows if v != RECORDED]
        existing = [r for r in branch_ids if self.storage.read(r) is not None]
        runs = load(self.storage, run_ids=existing).runs.set_index("run_id") if existing else None
        status: list[str] = []
        cost: list[float | None] = []
        tokens: list[int] = []
        for source, variant, _, run_id in rows:
            if variant == RECORDED:
                recorded = _source_status(self.storage, source)
                status.append(recorded)
                cost.append(0.0)
                tokens.append(0)
                continue
            status.append(self._status(run_id, runs))
            if runs is not None and run_id in runs.index:
                row = runs.loc[run_id]
                cost.append(None if pd.isna(row["cost_usd"]) else float(row["cost_usd"]))
                tokens.append(int(_zero(row["input_tokens"]) + _zero(row["output_tokens"])))
            else:
                cost.append(None)
                tokens.append(0)
        frame["status"] = status
        values = [scores.get(run_id) for run_id in frame["run_id"]]
        present = [v for v in values if v is not None]
        if present and all(isinstance(v, bool) for v in present):
            frame["score"] = pd.array(values, dtype="boolean")
        else:
            frame["score"] = pd.Series(
                [math.nan if v is None else float(v) for v in values], dtype="float64"
            )
        frame["cost_usd"] = pd.array(cost, dtype="Float64")
        frame["tokens"] = pd.array(tokens, dtype="Int64")
        if design.get("clusters"):
            frame["cluster"] = frame["source_run_id"].map(design["clusters"])
        return frame

    def _status(self, run_id: str, runs: pd.DataFrame | None) -> str:
        live = self._live
        if live is not None and live.board is not None:
            outcome = _outcome_of(live.board, run_id)
            if isinstance(outcome, Halted):
                return STOPPED
            if isinstance(outcome, Raised):
                return RAISED
            if isinstance(outcome, RunResult):
                return outcome.status
        if runs is None or run_id not in runs.index:
            return NOT_RUN
        return _RUN_STATUS_WORDS.get(str(runs.loc[run_id, "status"]), STOPPED)


def _outcome_of(board: Board, run_id: str) -> Any:
    for outcome in board.outcomes:
        if outcome is not None and outcome.run_id == run_id:
            return outcome
    return None


def _scores_of(storage: Any, run_id: str) -> dict[str, Any]:
    """The scores journaled by an experiment's run: branch (or source) run id -> score."""
    try:
        journal = read_journal(storage, run_id)
    except RunNotFoundError:
        return {}
    scores = {}
    for entry in journal.entries:
        step_id = str(entry.get("stepId", ""))
        if entry.get("type") == "step" and step_id.startswith(SCORE_STEP):
            parts = step_id.split("/")
            if len(parts) == 3 and parts[2] == "score":
                scores[parts[1]] = entry.get("result")
    return scores


def _source_status(storage: Any, source: str) -> str:
    from kassette.core import run_status

    try:
        return _RUN_STATUS_WORDS.get(run_status(storage, source).status, STOPPED)
    except RunNotFoundError:
        return NOT_RUN


def _zero(value: Any) -> float:
    return 0.0 if value is None or pd.isna(value) else float(value)


def _number(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _money(costs: pd.Series) -> str:
    total = costs.astype("Float64").sum(skipna=True)
    return f"${float(total):,.2f}" if total >= 0.01 or total == 0 else f"${float(total):,.4f}"


_VERDICT_COLOURS = {"better": "#15803d", "worse": "#b91c1c", "undecided": "#6b7280"}


def _verdict(difference: float, p_holm: float, alpha: float) -> str:
    if pd.isna(p_holm) or p_holm >= alpha:
        return "undecided"
    return "better" if difference > 0 else "worse"


def _summary_html(summary: pd.DataFrame, baseline: str) -> str:
    """The summary as a readable table: intervals as [low, high], p-values to 3 places."""
    head = (
        "<tr><th>variant</th><th>pairs</th><th>baseline</th><th>variant mean</th>"
        "<th>difference [95% CI]</th><th>p</th><th>p (Holm)</th><th>wins / ties / losses</th>"
        "<th>test</th><th>cost</th></tr>"
    )
    body = []
    for row in summary.itertuples():
        verdict = _verdict(row.difference, row.p_holm, 0.05)
        colour = "inherit" if verdict == "undecided" else _VERDICT_COLOURS[verdict]
        body.append(
            "<tr>"
            f"<td><b>{html.escape(str(row.variant))}</b></td><td>{row.pairs}</td>"
            f"<td>{_fmt(row.baseline_mean)}</td><td>{_fmt(row.mean)}</td>"
            f"<td style='color:{colour}'>{_signed(row.difference)} "
            f"[{_signed(row.ci_low)}, {_signed(row.ci_high)}]</td>"
            f"<td>{_p(row.p_value)}</td><td>{_p(row.p_holm)}</td>"
            f"<td>{row.wins} / {row.ties} / {row.losses}</td><td>{html.escape(row.test)}</td>"
            f"<td>{'' if pd.isna(row.cost_usd) else f'${row.cost_usd:,.4f}'}</td>"
            "</tr>"
        )
    caption = html.escape(f"each variant against {baseline}, paired by source run")
    return (
        "<table class='kassette-experiment-summary' style='font-variant-numeric:tabular-nums'>"
        f"<caption style='text-align:left'>{caption}</caption>"
        f"<thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"
    )


def _fmt(value: float) -> str:
    return "" if pd.isna(value) else f"{value:.3f}"


def _signed(value: float) -> str:
    return "" if pd.isna(value) else f"{value:+.3f}"


def _p(value: float) -> str:
    if pd.isna(value):
        return ""
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def experiments_in(journals: Journals) -> dict[str, Any]:
    """The experiments whose runs `journals` holds, by name, reopened from its storage."""
    if journals.storage is None:
        raise InvalidArgumentError("these journals were not loaded from a storage")
    runs = journals.runs
    found = {}
    for row in runs[runs["version"] == EXPERIMENT_VERSION].itertuples():
        design = json.loads(row.input) if isinstance(row.input, str) else None
        if isinstance(design, dict) and "name" in design:
            found[str(design["name"])] = Experiment(journals.storage, design, live=None)
    return found


def _register() -> None:
    import kassette.explore._frames as frames

    frames.EXPERIMENTS_READER = experiments_in


_register()
