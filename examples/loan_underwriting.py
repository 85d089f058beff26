"""Loan underwriting: a credit check and an appraisal in parallel, each signed off by a human,
then a decision; a fork re-runs the decision under a new policy without redoing the analysis.

    python examples/loan_underwriting.py

`ctx.parallel` runs the two branches; each branch analyses, then suspends for its reviewer.
The run waits for both (two pending events) and continues when the second sign-off arrives.
Later the lending policy changes: `fork(step="decide")` copies everything before the decision,
replays the analysis and both sign-offs from the journal and runs only the decision again.
The analysts are scripted and offline; every call they make is counted.
"""

from __future__ import annotations

import tempfile
from collections import Counter

from kassette import LocalStorage, kassette
from kassette.core import read_journal

APPLICATION = {"applicant": "Ada", "amount": 320_000, "property": "12 Quai Rambaud, Lyon"}
calls: Counter[str] = Counter()


def credit_report(application):
    calls["credit-report"] += 1
    return {"score": 702, "debt_to_income": 0.38}


def appraise(application):
    calls["appraisal"] += 1
    return {"value": 365_000}


def make_underwriter(storage, max_debt_to_income):
    """The workflow; the lending policy is code, so a fork can run the decision under another."""

    @kassette(storage=storage, version="underwriting-v1")
    def underwrite(ctx, application):
        def credit(branch):
            report = branch.step("credit-report", lambda: credit_report(application))
            review = branch.suspend("credit-review", reason=f"score {report['score']}")
            return {**report, "reviewer": review["by"]}

        def appraisal(branch):
            valuation = branch.step("appraisal", lambda: appraise(application))
            review = branch.suspend("appraisal-review", reason=f"valued {valuation['value']}")
            return {**valuation, "reviewer": review["by"]}

        checks = ctx.parallel({"credit": credit, "appraisal": appraisal}, name="checks")
        loan_to_value = application["amount"] / checks["appraisal"]["value"]

        def decide():
            calls["decide"] += 1
            affordable = checks["credit"]["debt_to_income"] <= max_debt_to_income
            return {
                "approved": affordable and loan_to_value <= 0.9,
                "ltv": round(loan_to_value, 3),
                "reviewers": [checks["credit"]["reviewer"], checks["appraisal"]["reviewer"]],
            }

        return ctx.step("decide", decide)

    return underwrite


def main():
    with tempfile.TemporaryDirectory(prefix="kassette-loans-") as directory:
        storage = LocalStorage(directory)
        underwrite = make_underwriter(storage, max_debt_to_income=0.40)

        r = underwrite.start(APPLICATION, run_id="loan-1")
        print(f"start      {r.status}, waiting for {', '.join(r.events)}")
        r = underwrite.resume("loan-1", "credit-review", {"by": "grace"})
        print(f"credit ok  {r.status}, waiting for {', '.join(r.events)}")
        r = underwrite.resume("loan-1", "appraisal-review", {"by": "linus"})
        print(f"appraised  {r.status}: {r.result}")

        stricter = make_underwriter(storage, max_debt_to_income=0.35)
        f = stricter.fork("loan-1", step="decide", new_run_id="loan-1-policy-2026")
        source = read_journal(storage, "loan-1-policy-2026").status().source
        print(f"fork       {f.run_id} from offset {source['fromOffset']}: {f.status}: {f.result}")
        print("calls      " + ", ".join(f"{name} x{n}" for name, n in sorted(calls.items())))


if __name__ == "__main__":
    main()
