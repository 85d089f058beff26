"""A storage for the integration workers (`openai_worker.py`, `anthropic_worker.py`) that dies
between a model call's answer and its journal append, as a process can at any instant."""

from __future__ import annotations

import os
import signal

from kassette import LocalStorage


class KilledInAppend(LocalStorage):
    """`LocalStorage` that SIGKILLs its own process when asked to write an entry holding
    `marker` (a step's `"stepId":"..."`), before writing anything; None never kills."""

    def __init__(self, path: str, marker: bytes | None) -> None:
        super().__init__(path)
        self.marker = marker

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        if self.marker is not None and self.marker in data:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().append(run_id, data, token=token)
