"""The context store: content an agent hands to koto, per session, under path-like keys.

`koto context add NAME KEY` stores bytes (from stdin or `--from-file`); gates can then check
them (`context-exists`, `context-matches`) without a shell. Content is content-addressed: it is
written once as the session file `ctx/<sha256>` on the session's backend, and the journal
records `context_added {key, hash, size}` (or `context_removed {key}`), so the store has the
same history, fencing and backend as the session itself. A read checks the hash again.
"""

from __future__ import annotations

from hashlib import sha256

from kassette.koto import _session as session
from kassette.koto._errors import KotoError
from kassette.koto._names import validate_key
from kassette.koto._store import Sessions

__all__ = ["add", "exists", "get", "keys", "read_content", "remove"]


def read_content(store: Sessions, view: session.SessionView, key: str) -> bytes | None:
    """The content stored under `key` in the session as `view` sees it, or None."""
    item = view.context.get(key)
    if item is None:
        return None
    data = store.read_file(view.name, f"ctx/{item['hash']}")
    if data is None or sha256(data).hexdigest() != item["hash"]:
        raise KotoError(
            "persistence_error",
            f"the content of context key {key!r} in {view.name!r} is missing or altered "
            f"({store.locate(view.name, 'ctx/' + item['hash'])})",
        )
    return data


def add(store: Sessions, name: str, key: str, data: bytes) -> None:
    validate_key(key)
    session.load(store, name)  # the session exists and its template is intact
    digest = sha256(data).hexdigest()
    store.write_file(name, f"ctx/{digest}", data)
    with session.open_session(store, name) as run:
        session.append(run, "context_added", key=key, hash=digest, size=len(data))


def get(store: Sessions, name: str, key: str) -> bytes:
    validate_key(key)
    data = read_content(store, session.load(store, name), key)
    if data is None:
        raise KotoError("context_missing", f"session {name!r} has no context key {key!r}")
    return data


def exists(store: Sessions, name: str, key: str) -> bool:
    validate_key(key)
    return key in session.load(store, name).context


def keys(store: Sessions, name: str, prefix: str = "") -> list[str]:
    return sorted(k for k in session.load(store, name).context if k.startswith(prefix))


def remove(store: Sessions, name: str, key: str) -> None:
    """Forget `key` (idempotent); its content stays, as history, until the session is removed."""
    validate_key(key)
    if key not in session.load(store, name).context:
        return
    with session.open_session(store, name) as run:
        if key in session.load(store, name, run.journal).context:
            session.append(run, "context_removed", key=key)
