"""Configuration: TOML files in two layers, the project's over the user's.

`$KOTO_HOME/config.toml` (KOTO_HOME defaults to `~/.koto`) is the user's, for this machine;
`.koto/config.toml` in the working directory is the project's, shared through version control,
and wins where both set a key. Credentials (`session.s3.access_key`, `session.s3.secret_key`)
belong in the user's file or in the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
which win); a project file holding one is refused, and `config list` shows them as `<set>`.
Files are read with `tomllib` and written by a tiny writer for the flat keys koto uses.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from kassette.koto._errors import KotoError
from kassette.storage import replace_file

__all__ = [
    "CREDENTIALS",
    "KEYS",
    "Config",
    "koto_home",
    "load",
    "project_config_path",
    "to_toml",
    "update",
    "user_config_path",
]

# every key koto reads, with the values it allows (None: any non-empty string)
KEYS: dict[str, tuple[str, ...] | None] = {
    "session.backend": ("local", "s3"),
    "session.s3.bucket": None,
    "session.s3.prefix": None,
    "session.s3.endpoint": None,
    "session.s3.region": None,
    "session.s3.access_key": None,
    "session.s3.secret_key": None,
}
DEFAULTS = {"session.backend": "local"}
CREDENTIALS = frozenset({"session.s3.access_key", "session.s3.secret_key"})
REDACTED = "<set>"


def koto_home() -> Path:
    """Where koto keeps sessions and the user's config: `$KOTO_HOME`, else `~/.koto`."""
    home = os.environ.get("KOTO_HOME")
    return Path(home).expanduser().absolute() if home else Path.home() / ".koto"


def user_config_path(home: Path) -> Path:
    return home / "config.toml"


def project_config_path(cwd: Path) -> Path:
    return cwd / ".koto" / "config.toml"


class Config:
    """The resolved configuration: defaults, then the user's file, then the project's."""

    def __init__(self, values: dict[str, Any], sources: dict[str, str]) -> None:
        self.values = values
        self.sources = sources  # key -> "default", "user" or "project"

    def get(self, key: str) -> str | None:
        value = self.values.get(key)
        return None if value is None else str(value)

    def redacted(self) -> dict[str, Any]:
        return {k: REDACTED if k in CREDENTIALS else v for k, v in sorted(self.values.items())}


def load(home: Path, cwd: Path) -> Config:
    """Read both layers; a project file holding credentials is refused."""
    config = Config(dict(DEFAULTS), dict.fromkeys(DEFAULTS, "default"))
    for layer, path in (("user", user_config_path(home)), ("project", project_config_path(cwd))):
        values = read(path)
        for key in values:
            if key not in KEYS:
                print(f"warning: unknown config key {key!r} in {path}", file=sys.stderr)
            elif layer == "project" and key in CREDENTIALS:
                raise KotoError(
                    "invalid_config",
                    f"{path} sets {key}: credentials cannot be stored in project config; "
                    "use the user config (koto config set --user) or the environment",
                )
        config.values.update(values)
        config.sources.update(dict.fromkeys(values, layer))
    return config


def read(path: Path) -> dict[str, Any]:
    """A config file's keys, flattened to dotted names; {} when there is no file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise KotoError("invalid_config", f"cannot read {path}: {exc}") from exc
    import tomllib

    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise KotoError("invalid_config", f"{path} is not valid TOML: {exc}") from exc
    return _flatten(document, "")


def update(path: Path, key: str, value: str | None, *, project: bool) -> None:
    """Set `key` to `value` (or remove it, for None) in the file at `path`."""
    check_key(key)
    if value is not None:
        if project and key in CREDENTIALS:
            raise KotoError(
                "invalid_config",
                f"{key} contains credentials and cannot be stored in project config; "
                "use --user (or the environment)",
            )
        allowed = KEYS[key]
        if not value or (allowed is not None and value not in allowed):
            expected = f"one of {', '.join(allowed)}" if allowed else "a non-empty string"
            raise KotoError("invalid_config", f"{key} must be {expected}, not {value!r}")
    values = read(path)
    if value is None:
        if key not in values:
            return
        del values[key]
    else:
        values[key] = value
    _write(path, to_toml(values))


def check_key(key: str) -> str:
    if key not in KEYS:
        raise KotoError("invalid_config", f"unknown config key {key!r} (known: {', '.join(KEYS)})")
    return key


def to_toml(values: dict[str, Any]) -> str:
    """Flat dotted keys as TOML: one table per prefix, keys sorted."""
    tables: dict[str, list[str]] = {}
    for key in sorted(values):
        table, _, name = key.rpartition(".")
        tables.setdefault(table, []).append(f"{_bare_or_quoted(name)} = {_value(values[key])}")
    blocks = []
    for table in sorted(tables):
        header = f"[{'.'.join(_bare_or_quoted(p) for p in table.split('.'))}]\n" if table else ""
        blocks.append(header + "\n".join(tables[table]) + "\n")
    return "\n".join(blocks)


def _flatten(document: dict[str, Any], prefix: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in document.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _bare_or_quoted(key: str) -> str:
    if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key):
        return key
    return _string(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return _string(str(value))


def _string(text: str) -> str:
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _write(path: Path, text: str) -> None:
    try:
        replace_file(path, text.encode("utf-8"), mode=0o600)
    except OSError as exc:
        raise KotoError("invalid_config", f"cannot write {path}: {exc}") from exc
