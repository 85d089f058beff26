"""Runs and sessions: the record/replay primitives every kassette workflow is built from.

A *run* is one journal. Each invocation opens a *session*: it reads the journal, takes the
storage lock, and appends a `start` entry numbered one above every session already there.
Inside the session, `record` answers a step from the journal when it is there and runs it live
(appending its result) when it is not; `wait_for_event` does the same for suspends. Every
append is a compare-and-swap on the storage token that fences an old session and never
journals an entry twice. A fork (`fork_run`, `open_fork`) is a session of a new run created
with the source's prefix.

Also here, as their public path: the journal as read (`Journal`, `read_journal`), its fold
(`RunState`, `reduce_entry`, `reduce_run`), its encoding and timestamps, and the reader of a
journaled model call (`LLMCall`, `read_llm_call`).
"""

from kassette._clock import Clock
from kassette._codec import Entry, check_entry, encode
from kassette._fork import NO_RESULT
from kassette._journal import Journal, StepIds
from kassette._listeners import Listener, add_listener, remove_listener
from kassette._llm_calls import LLMCall, TokenUsage, read_llm_call, response_from_text
from kassette._public import publish as _publish
from kassette._run import Run, Step, fork_run, open_fork, open_run, read_journal, run_status
from kassette._sessions import cancel_run, checking_before_steps
from kassette._state import RunState, reduce_entry, reduce_run
from kassette._timestamps import format_timestamp, parse_timestamp

__all__ = [
    "NO_RESULT",
    "Clock",
    "Entry",
    "Journal",
    "LLMCall",
    "Listener",
    "Run",
    "RunState",
    "Step",
    "StepIds",
    "TokenUsage",
    "add_listener",
    "cancel_run",
    "check_entry",
    "checking_before_steps",
    "encode",
    "fork_run",
    "format_timestamp",
    "open_fork",
    "open_run",
    "parse_timestamp",
    "read_journal",
    "read_llm_call",
    "reduce_entry",
    "reduce_run",
    "remove_listener",
    "response_from_text",
    "run_status",
]

_publish(globals(), "kassette.core")
