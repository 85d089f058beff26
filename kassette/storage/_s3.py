"""S3Storage: journals as objects in an S3-compatible bucket, appended by compare-and-swap.

One object per run, `{prefix}/{runId}/journal.jsonl`. Object stores cannot append, so an append
rewrites the whole object: the new body is the old one plus the new lines, put with
`If-Match: <ETag of the old one>`; a new run is put with `If-None-Match: *`. When another writer
got there first the store answers 412 and nothing is written: that is the `ConflictError` the
core turns into a retry or a `FencedError`. The ETag is the token. The body this instance last
read or wrote is kept per run, so an append inside a session costs one PUT.

There are no locks: session fencing through these conditional writes is what keeps a journal
consistent. Every botocore error is translated in one place, `_translate`. boto3 is imported
only when a client is created. Any endpoint boto3 can reach (`AWS_ENDPOINT_URL`) works if it
applies conditional PutObject atomically, as AWS S3 and Cloudflare R2 document; see
docs/object-storage-design.md.

An `S3Storage` pickles as its bucket, prefix, endpoint, region and client settings (never
credentials): unpickled in another process (a Dask worker, say), it builds its own client,
with credentials from that process's boto3 environment.

Beyond the `Storage` protocol, a tool that keeps files of its own beside a run's journal (koto
keeps a session's template and context there) can read, write and locate them as objects
under `{prefix}/{runId}/`, and delete a run with everything beside it. Those writes are
unconditional, so they suit content-addressed or write-once objects; the journal itself is
written only by `append`.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from kassette._extras import requires
from kassette.errors import (
    ConflictError,
    InvalidArgumentError,
    JournalCorruptionError,
    KassetteError,
    RunNotFoundError,
    StorageError,
)
from kassette.storage._base import Snapshot, is_run_id, validate_run_id
from kassette.storage._chunks import (
    CHUNKS,
    HEAD,
    Head,
    Policy,
    View,
    check_view,
    live_chunks,
    parse_head,
    plan_append,
)

if TYPE_CHECKING:
    from botocore.exceptions import ClientError
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ErrorTypeDef, ObjectIdentifierTypeDef

__all__ = ["S3Storage"]

_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
_CACHED_RUNS = 64
_PARALLEL_GETS = 8
_READ_ATTEMPTS = 5  # heads read while chunks go away under a reader (see `_load`)
_MAX_KEY_BYTES = 1024
_CONFLICT_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})
_REFUSED_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidToken",
        "SignatureDoesNotMatch",
    }
)


class S3Storage:
    """Journals in `bucket` under `prefix`; `client` defaults to `boto3.client("s3")`."""

    # when a head stops being the whole journal, and a new chunked head's rules: the
    # benchmark sets short_lines past any run to measure the single-object layout
    _policy = Policy()
    # whether a commit that merges chunks empties the small ones it supersedes: the benchmark
    # turns it off to measure what the bucket held before
    _empty_superseded = True

    def __init__(self, bucket: str, prefix: str = "", client: S3Client | None = None) -> None:
        self.bucket = _validate_bucket(bucket)
        self.prefix = _validate_prefix(prefix)
        self._client = client if client is not None else _default_client()
        _check_conditional_writes(self._client)
        self._views: OrderedDict[str, View] = OrderedDict()
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        url = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return f"S3Storage({url!r})"

    def __reduce__(self) -> tuple[Any, tuple[str, str, str, str | None, Any]]:
        # a client does not pickle: the copy builds its own for the same endpoint, region and
        # settings, with credentials from boto3's environment where it is unpickled
        meta = self._client.meta
        settings = (meta.endpoint_url, meta.region_name, meta.config)
        return _rebuild, (self.bucket, self.prefix, *settings)

    def _base(self, run_id: str) -> str:
        """The key prefix of everything of run `run_id`, ending in '/'."""
        run_id = validate_run_id(run_id)
        return f"{self.prefix}/{run_id}/" if self.prefix else f"{run_id}/"

    def _object_key(self, run_id: str, name: str) -> str:
        key = self._base(run_id) + _validate_object_name(name)
        if len(key.encode()) > _MAX_KEY_BYTES:
            raise InvalidArgumentError(
                f"invalid object name {name!r}: its key would be longer than S3's "
                f"{_MAX_KEY_BYTES} bytes"
            )
        return key

    def read(self, run_id: str) -> Snapshot | None:
        view = self._load(run_id)
        return None if view is None else Snapshot(view.data, view.token)

    def append(self, run_id: str, data: bytes, *, token: str | None) -> str:
        view = None if token is None else self._view_at(run_id, token)
        write = plan_append(view, data, self._policy)
        key = self._base(run_id) + write.name
        action = "create" if view is None else "append to"
        etag = self._put(action, run_id, key, write.body, if_match=write.if_match)
        after = write.view(etag, view)
        self._remember(run_id, after)
        if write.superseded and self._empty_superseded:  # only now: the head is committed
            self._empty_chunks(run_id, [self._base(run_id) + name for name in write.superseded])
        return after.token

    def list_runs(self) -> Iterator[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        run_ids = []
        with self._boundary("list runs in", None, base):
            # a long run's chunks fold into one common prefix each instead of a key each
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base, Delimiter=f"/{CHUNKS}"
            )
            for page in pages:
                for item in page.get("Contents", []):
                    run_id, slash, name = item.get("Key", "")[len(base) :].partition("/")
                    if slash and name == HEAD and is_run_id(run_id):
                        run_ids.append(run_id)
        yield from sorted(run_ids)

    def run_stamps(self, run_ids: Iterable[str] | None = None) -> dict[str, object]:
        """Each run's journal objects (its head and chunks) with their ETags, from listings
        alone (`kassette.storage.RunStamps`): every append puts one of them, so its ETag moves.
        All runs cost one listing (1,000 keys a request); `run_ids`, one listing each."""
        base = f"{self.prefix}/" if self.prefix else ""
        wanted = None if run_ids is None else [validate_run_id(run_id) for run_id in run_ids]
        prefixes = [base] if wanted is None else [f"{base}{run_id}/" for run_id in wanted]
        found: dict[str, list[tuple[str, str]]] = {}
        for prefix in prefixes:
            with self._boundary("list runs in", None, prefix):
                pages = self._client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=prefix
                )
                for page in pages:
                    for item in page.get("Contents", []):
                        run_id, slash, name = item.get("Key", "")[len(base) :].partition("/")
                        if slash and (name == HEAD or name.startswith(CHUNKS)):
                            found.setdefault(run_id, []).append((name, item.get("ETag", "")))
        return {
            run_id: tuple(sorted(objects))
            for run_id, objects in sorted(found.items())
            if is_run_id(run_id) and any(name == HEAD for name, _ in objects)
        }

    def lock(self, run_id: str, session: int) -> contextlib.AbstractContextManager[None]:
        validate_run_id(run_id)
        return contextlib.nullcontext()

    def read_object(self, run_id: str, name: str) -> bytes | None:
        """The object `name` beside run `run_id`'s journal; `None` if there is none."""
        key = self._object_key(run_id, name)
        try:
            with self._boundary("read", run_id, key):
                data: bytes = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except RunNotFoundError:  # NoSuchKey
            return None
        return data

    def write_object(self, run_id: str, name: str, data: bytes) -> None:
        """Store `data` as the object `name` beside run `run_id`'s journal, replacing any."""
        key = self._object_key(run_id, name)
        with self._boundary("write", run_id, key):
            self._client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def object_url(self, run_id: str, name: str) -> str:
        """Where the object `name` of run `run_id` is, as an `s3://` URL for people to read."""
        return f"s3://{self.bucket}/{self._object_key(run_id, name)}"

    def delete_run(self, run_id: str) -> None:
        """Delete run `run_id`'s journal and every object beside it; a missing run is no error."""
        base = self._base(run_id)
        with self._mutex:
            self._views.pop(run_id, None)
        with self._boundary("delete", run_id, base):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=base
            )
            for page in pages:  # at most 1000 keys, as many as one DeleteObjects takes
                keys: list[ObjectIdentifierTypeDef] = [
                    {"Key": item["Key"]} for item in page.get("Contents", []) if "Key" in item
                ]
                if not keys:
                    continue
                response = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True}
                )
                for failure in response.get("Errors", []):  # refused keys, in a 200 answer
                    key = failure.get("Key", base)
                    raise _translate(_per_key_error(failure), "delete", self.bucket, key, run_id)

    def _load(self, run_id: str) -> View | None:
        """The run's journal as it is now: its head, then its live chunks (None: no run).

        A chunk is emptied only once a head that does not name it is committed (see
        `_empty_chunks`), so a chunk found empty or missing under the head read means the head
        has moved since: the journal is read again from the new head (up to `_READ_ATTEMPTS`
        heads). Under a head that has not moved, it is corruption.
        """
        head_key = self._base(run_id) + HEAD
        got = self._get(run_id, head_key)
        for _ in range(_READ_ATTEMPTS):
            if got is None:
                return None
            body, etag = got
            view = self._read_chunks(run_id, parse_head(body, run_id), etag)
            if isinstance(view, View):
                self._remember(run_id, view)
                return view
            again = self._get(run_id, head_key)
            if again is not None and again[1] == etag:
                raise JournalCorruptionError(
                    f"run {run_id}: chunk {view} of its journal is missing",
                    run_id=run_id,
                )
            got = again
        raise StorageError(
            f"run {run_id}: its journal's head moved on {_READ_ATTEMPTS} times while its chunks "
            "were read; read it again",
            run_id=run_id,
        )

    def _read_chunks(self, run_id: str, head: Head, etag: str) -> View | str:
        """The journal under `head`: its live chunks read, or the name of the first one that
        is missing."""
        if not head.chunked:
            return View(head, etag)
        base = self._base(run_id)
        numbers = live_chunks(head.sealed, head.fanout)
        probe = [head.sealed + 1] if head.full else []  # sealed already, maybe
        names = [base + head.chunk(number) for number in numbers + probe]
        found = dict(zip(numbers + probe, self._get_all(run_id, names), strict=True))
        pending = found.get(head.sealed + 1)
        if pending is not None and not pending[0]:  # emptied: superseded since the head was read
            return head.chunk(head.sealed + 1)
        if pending is not None:
            numbers = live_chunks(head.sealed + 1, head.fanout)
        missing = [number for number in numbers if not (found[number] or (b"",))[0]]
        if missing:
            return head.chunk(missing[0])
        bodies = tuple(found[number][0] for number in numbers)  # type: ignore[index]
        lines = sum(chunk.count(b"\n") for chunk in bodies)
        return check_view(View(head, etag, bodies, lines, pending[1] if pending else None), run_id)

    def _empty_chunks(self, run_id: str, keys: list[str]) -> None:
        """Replace superseded chunks with empty objects, as far as the store lets us: a refusal
        or an outage only leaves them whole (the next merge empties them again), and the append
        they follow has committed either way.

        Emptied, not deleted: a seal is a PUT with `If-None-Match: *`, which only a chunk key
        that stays created turns into a compare-and-swap. A writer holding a stale journal
        would otherwise seal a deleted chunk again, be told it succeeded, and lose its entry
        (no head would ever name that chunk). A chunk is never empty otherwise.
        """

        def empty(key: str) -> None:
            with contextlib.suppress(KassetteError), self._boundary("empty", run_id, key):
                self._client.put_object(Bucket=self.bucket, Key=key, Body=b"")

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(_PARALLEL_GETS, len(keys))) as pool:
            list(pool.map(empty, keys))

    def _get(self, run_id: str, key: str) -> tuple[bytes, str] | None:
        """The object at `key` and its ETag, or None when there is none."""
        try:
            with self._boundary("read", run_id, key):
                response = self._client.get_object(Bucket=self.bucket, Key=key)
                data = response["Body"].read()
        except RunNotFoundError:  # NoSuchKey
            return None
        return data, response["ETag"]

    def _put(self, action: str, run_id: str, key: str, body: bytes, *, if_match: str | None) -> str:
        """PUT `body` at `key` if it is still at ETag `if_match` (None: if it does not exist);
        return the new ETag. A precondition that fails is a `ConflictError`."""
        try:
            with self._boundary(action, run_id, key):
                if if_match is None:
                    response = self._client.put_object(
                        Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*"
                    )
                else:
                    response = self._client.put_object(
                        Bucket=self.bucket, Key=key, Body=body, IfMatch=if_match
                    )
        except RunNotFoundError as exc:  # If-Match on a head that is gone
            raise ConflictError(f"run {run_id} no longer exists", run_id=run_id) from exc
        return response["ETag"]

    def _get_all(self, run_id: str, keys: list[str]) -> list[tuple[bytes, str] | None]:
        """`_get` of each key, several at a time: a long run's chunks are read in one wait."""
        if len(keys) <= 1:
            return [self._get(run_id, key) for key in keys]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(_PARALLEL_GETS, len(keys))) as pool:
            return list(pool.map(lambda key: self._get(run_id, key), keys))

    def _view_at(self, run_id: str, token: str) -> View:
        """The journal at `token`, from the cache or a fresh read; `ConflictError` if it moved."""
        with self._mutex:
            cached = self._views.get(run_id)
        if cached is not None and _same_token(cached.token, token):
            return cached
        view = self._load(run_id)
        if view is None:
            raise ConflictError(f"run {run_id} no longer exists", run_id=run_id)
        if not _same_token(view.token, token):
            raise ConflictError(f"run {run_id} changed since it was read", run_id=run_id)
        return view

    def _remember(self, run_id: str, view: View) -> None:
        with self._mutex:
            self._views[run_id] = view
            self._views.move_to_end(run_id)
            while len(self._views) > _CACHED_RUNS:
                self._views.popitem(last=False)

    @contextlib.contextmanager
    def _boundary(self, action: str, run_id: str | None, key: str) -> Iterator[None]:
        """Where botocore ends: every error it raises leaves as a kassette error."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError) as exc:
            raise _translate(exc, action, self.bucket, key, run_id) from exc


def _translate(
    exc: Exception, action: str, bucket: str, key: str, run_id: str | None
) -> KassetteError:
    """The kassette error for a botocore error raised while doing `action` on `key`."""
    from botocore.exceptions import ClientError, NoCredentialsError

    where = f"s3://{bucket}/{key}"
    if isinstance(exc, NoCredentialsError):
        return StorageError(
            f"cannot {action} {where}: no AWS credentials found (set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)",
            run_id=run_id,
        )
    if not isinstance(exc, ClientError):  # connection refused or reset, timeouts, ...
        return StorageError(f"cannot {action} {where}: {exc}", run_id=run_id)
    error = exc.response.get("Error", {})
    code = error.get("Code", "")
    message = error.get("Message", "")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code in _CONFLICT_CODES or status == 412:
        return ConflictError(
            f"run {run_id} changed since it was read ({code or status})", run_id=run_id
        )
    if code == "NoSuchKey":
        return RunNotFoundError(f"run {run_id} not found at {where}", run_id=run_id)
    if code == "NoSuchBucket":
        return StorageError(
            f"cannot {action} {where}: bucket {bucket!r} does not exist (NoSuchBucket)",
            run_id=run_id,
        )
    if code in _REFUSED_CODES or status == 403:
        return StorageError(
            f"cannot {action} {where}: the credentials were refused ({code or status}: "
            f"{message}); check the AWS credentials and the bucket policy",
            run_id=run_id,
        )
    label = code if code and code != str(status) else "HTTP"
    answer = f"{label} {status}" if status else label  # a key's error in a 200 has no status
    return StorageError(f"cannot {action} {where}: {answer} {message}".rstrip(), run_id=run_id)


def _per_key_error(failure: ErrorTypeDef) -> ClientError:
    """A key DeleteObjects could not delete, as the error a request about that key raises."""
    from botocore.exceptions import ClientError

    code, message = failure.get("Code", ""), failure.get("Message", "")
    return ClientError({"Error": {"Code": code, "Message": message}}, "DeleteObjects")


def _default_client(**settings: Any) -> S3Client:
    with requires("S3Storage"):
        import boto3
    return boto3.client("s3", **settings)


def _check_conditional_writes(client: S3Client) -> None:
    """An older botocore cannot send `If-Match` on PutObject, and appends would all fail."""
    shape = client.meta.service_model.operation_model("PutObject").input_shape
    members = shape.members if shape is not None else {}
    if "IfMatch" not in members or "IfNoneMatch" not in members:
        raise ImportError(
            "S3Storage needs a boto3 that sends conditional PutObject (If-Match), 1.35.69 or "
            'later: pip install --upgrade "kassette[s3]"'
        )


def _validate_bucket(bucket: object) -> str:
    if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise InvalidArgumentError(
            f"invalid S3 bucket name {bucket!r}: use 3-63 of a-z 0-9 . - _, starting and "
            "ending with a letter or digit"
        )
    return bucket


def _validate_prefix(prefix: object) -> str:
    """The prefix without a trailing slash; refuses what could escape or alias it."""
    if not isinstance(prefix, str):
        raise InvalidArgumentError(f"invalid S3 prefix {prefix!r}: not a string")
    if prefix.startswith("/"):
        raise InvalidArgumentError(f"invalid S3 prefix {prefix!r}: it may not start with '/'")
    prefix = prefix.rstrip("/")
    if not prefix:
        return ""
    problem = _path_problem(prefix)
    if problem is not None:
        raise InvalidArgumentError(f"invalid S3 prefix {prefix!r}: {problem}")
    return prefix


def _validate_object_name(name: object) -> str:
    """A relative key under a run's prefix that cannot escape it or stand for its journal."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"invalid object name {name!r}: not a string")
    if name == HEAD or name.startswith(CHUNKS):
        raise InvalidArgumentError(
            f"invalid object name {name!r}: that is the run's journal, written only by append"
        )
    problem = _path_problem(name)
    if problem is not None:
        raise InvalidArgumentError(f"invalid object name {name!r}: {problem}")
    return name


def _path_problem(path: str) -> str | None:
    """Why `path` could escape or alias a place in the bucket, if it could."""
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "empty, '.' and '..' segments are not allowed"
    if any(ord(char) < 0x20 or char in "\\\x7f" for char in path):
        return "control characters and '\\' are not allowed"
    return None


def _same_token(first: str, second: str) -> bool:
    """Tokens are ETags (two, joined by '|', while a head lags its newest chunk); ETags compare
    without their quotes."""
    return [etag.strip('"') for etag in first.split("|")] == [
        etag.strip('"') for etag in second.split("|")
    ]


def _rebuild(
    bucket: str, prefix: str, endpoint_url: str, region: str | None, config: Any
) -> S3Storage:
    """An unpickled `S3Storage`: a new client for the pickled one's endpoint and region."""
    client = _default_client(endpoint_url=endpoint_url, region_name=region, config=config)
    return S3Storage(bucket, prefix, client)


def _from_url(url: str) -> S3Storage:
    """`s3://bucket` or `s3://bucket/prefix`; the client comes from boto3's environment."""
    if not url.startswith("s3://"):
        raise InvalidArgumentError(f"invalid S3 URL {url!r}: expected s3://bucket[/prefix]")
    bucket, _, prefix = url[len("s3://") :].partition("/")
    return S3Storage(bucket, prefix)
