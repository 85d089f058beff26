"""Where sessions live: a journal per session and the session's files, on one backend.

`Sessions` is the one store, over any `kassette.storage.ObjectStorage` (a journal store that
also keeps objects beside each run): the session's files (its compiled template
`template-<sha256>.json`, its context content `ctx/<sha256>`) are the objects of run NAME.
Files are content-addressed, so writing one never races.

- Local (the default): `LocalStorage($KOTO_HOME/sessions)`, so a session's files sit in
  `$KOTO_HOME/sessions/NAME/`; its journal is the `file:` storage of that same directory, run
  `koto-NAME.state`: the file upstream koto names `koto-NAME.state.jsonl`. A session created
  before that name (`NAME.jsonl`, run NAME) is still read and written under its own name.
- S3 (`session.backend = "s3"`): one `S3Storage` holds both; the journal is its run NAME
  (`{prefix}/NAME/journal.jsonl`), the files are objects beside it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kassette.errors import KassetteError
from kassette.koto._config import Config
from kassette.koto._errors import KotoError, from_kassette
from kassette.koto._names import NAME, session_dir, validate_name
from kassette.storage import LocalStorage, ObjectStorage, Storage

__all__ = ["Sessions", "open_store", "run_id", "session_name"]


def run_id(name: str) -> str:
    """The run id of session `name`'s journal on the local backend (upstream's file name)."""
    return f"koto-{name}.state"


def session_name(run_id: str) -> str:
    """The session a journal's run id belongs to (`koto-NAME.state`, or NAME)."""
    if run_id.startswith("koto-") and run_id.endswith(".state"):
        return run_id[len("koto-") : -len(".state")]
    return run_id


class Sessions:
    """Sessions on one backend: journals and files.

    `objects` keeps each session's files as the objects of run NAME. With `local_journals`,
    each session's journal is the run `koto-NAME.state` of a `LocalStorage` on the session's
    own directory; otherwise it is the run NAME of `objects` itself.
    """

    def __init__(self, home: Path, objects: ObjectStorage, *, local_journals: bool) -> None:
        self.home = home
        self.objects = objects
        self.local_journals = local_journals

    def journal(self, name: str) -> tuple[Storage, str]:
        """The storage holding session `name`'s journal, and the journal's run id there."""
        validate_name(name)
        if not self.local_journals:
            return self.objects, name
        directory = session_dir(self.home, name)
        if (
            not (directory / f"{run_id(name)}.jsonl").exists()
            and (directory / f"{name}.jsonl").exists()
        ):
            return LocalStorage(directory), name  # created before upstream's file name
        return LocalStorage(directory), run_id(name)

    def read_file(self, name: str, path: str) -> bytes | None:
        try:
            return self.objects.read_object(name, path)
        except KassetteError as exc:
            raise from_kassette(exc, name) from exc

    def write_file(self, name: str, path: str, data: bytes) -> None:
        try:
            self.objects.write_object(name, path, data)
        except KassetteError as exc:
            raise from_kassette(exc, name) from exc

    def locate(self, name: str, path: str) -> str:
        """Where a session file is, as a path or URL, for people to read."""
        return self.objects.object_url(name, path)

    def names(self) -> list[str]:
        """Every session's name, sorted."""
        try:
            if not self.local_journals:
                return sorted(self.objects.list_runs())
            entries = sorted(os.listdir(self.home / "sessions"))
        except FileNotFoundError:
            return []
        except (OSError, KassetteError) as exc:
            raise from_kassette(exc) from exc
        sessions = self.home / "sessions"
        return [
            name
            for name in entries
            if NAME.fullmatch(name)
            and any((sessions / name / f"{run}.jsonl").exists() for run in (run_id(name), name))
        ]

    def remove(self, name: str) -> None:
        """Delete everything of the session (idempotent), its local directory included."""
        import shutil  # here: `koto next` imports this module, and shutil costs it time

        try:
            self.objects.delete_run(validate_name(name))
            shutil.rmtree(session_dir(self.home, name))
        except FileNotFoundError:
            pass
        except (OSError, KassetteError) as exc:
            raise from_kassette(exc, name) from exc


def open_store(home: Path, config: Config) -> Sessions:
    """The session store the configuration asks for (local unless `session.backend = "s3"`)."""
    if config.get("session.backend") != "s3":
        return Sessions(home, LocalStorage(home / "sessions"), local_journals=True)
    bucket = config.get("session.s3.bucket")
    if not bucket:
        raise KotoError("invalid_config", "session.backend is s3 but session.s3.bucket is not set")
    from kassette.koto._s3store import open_s3_storage

    try:
        storage = open_s3_storage(config, bucket)
    except ImportError as exc:
        raise KotoError("persistence_error", str(exc)) from exc
    except (KassetteError, ValueError) as exc:  # a bad bucket name or prefix
        raise KotoError("invalid_config", str(exc)) from exc
    return Sessions(home, storage, local_journals=False)
