"""Wiring kassette to a queue: invoke the run a message names, then ack or redeliver it.

kassette ships the journal; your queue or job runner is the dispatcher. `dispatch` below is the
whole contract (docs/errors-and-dispatching.md explains each line). `main` feeds it the messages
a real queue produces, duplicates and races included, and prints what it decides:

    python examples/dispatcher.py
"""

import tempfile

from kassette import (
    EventNotPendingError,
    FencedError,
    KassetteError,
    LocalStorage,
    RunLockedError,
    StorageError,
    TerminalRunError,
    kassette,
)
from kassette.core import open_run

ACK, REDELIVER, DEAD_LETTER = "ack", "redeliver", "dead-letter"


def dispatch(workflow, message):
    """Invoke the run a message names; return what the queue should do with it, and why."""
    run_id, event = message["run_id"], message.get("event")
    try:
        if event is None:
            result = workflow.start(message.get("input"), run_id=run_id)
        else:
            result = workflow.resume(run_id, event, message.get("value"))
    except (TerminalRunError, FencedError) as exc:
        # Ended already (RunCancelledError is a TerminalRunError), or a newer session owns the
        # run and its own delivery will finish it: nothing is left for this message to do.
        return ACK, type(exc).__name__
    except (RunLockedError, StorageError) as exc:
        return REDELIVER, type(exc).__name__  # transient: the same message works later
    except EventNotPendingError as exc:
        # An event can arrive before the run reaches its suspend: wait while the run is open.
        running = workflow.status(run_id).status == "running"
        return (REDELIVER if running else DEAD_LETTER), type(exc).__name__
    except KassetteError as exc:
        # ReplayError (version, input, code or journal disagree), a bad event or run id:
        # this code can never process the message. Park it for a human.
        return DEAD_LETTER, type(exc).__name__
    # success, suspended, failed or canceled: settled, and the journal says which.
    return ACK, result.status


def make_triage(storage, version):
    def analyze(ctx, ticket):
        if not ticket["title"]:
            raise ValueError("empty ticket")  # the run fails; the error is journaled
        if ticket.get("operator cancels"):
            triage.cancel(ctx.run_id, reason="duplicate ticket")  # as if from another process
        return {"destructive": True}

    @kassette(storage=storage, version=version)
    def triage(ctx, ticket):
        analysis = ctx.step("analyze", lambda: analyze(ctx, ticket))
        if analysis["destructive"]:
            approval = ctx.suspend("human-approval")
            if not approval["approved"]:
                return "skipped"
        return ctx.step("apply-fix", lambda: "fixed")

    return triage


def main():
    with tempfile.TemporaryDirectory(prefix="kassette-dispatch-") as directory:
        play(LocalStorage(directory))


def play(storage):
    triage, triage_v2 = make_triage(storage, "v1"), make_triage(storage, "v2")
    approve = {"event": "human-approval", "value": {"approved": True}}
    ticket = {"title": "disk full"}

    def deliver(label, workflow, message):
        decision, why = dispatch(workflow, message)
        print(f"{label:<44} -> {decision:<11} {why}")

    deliver("start INC-1", triage, {"run_id": "INC-1", "input": ticket})
    with storage.lock("INC-1", session=99):  # another worker is busy with INC-1
        deliver(
            "resume INC-1 while another worker holds it", triage, {"run_id": "INC-1", **approve}
        )
    deliver("resume INC-1 human-approval", triage, {"run_id": "INC-1", **approve})
    deliver("resume INC-1 human-approval (duplicate)", triage, {"run_id": "INC-1", **approve})
    deliver("start INC-2 with an empty ticket", triage, {"run_id": "INC-2", "input": {"title": ""}})
    canceled = {"title": "disk full", "operator cancels": True}
    deliver("start INC-3, canceled while it runs", triage, {"run_id": "INC-3", "input": canceled})
    triage.start(ticket, run_id="INC-4")
    deliver("start INC-4 with workflow version v2", triage_v2, {"run_id": "INC-4"})
    open_run(storage, "INC-5", input=ticket).close()  # a session that has not suspended yet
    deliver("resume INC-5 before it suspends", triage, {"run_id": "INC-5", **approve})
    deliver("resume INC-6, a run that does not exist", triage, {"run_id": "INC-6", **approve})


if __name__ == "__main__":
    main()
