"""Layered config: the project's `.koto/config.toml` over the user's `$KOTO_HOME/config.toml`."""

from __future__ import annotations

import tomllib

from conftest import Koto


def test_project_config_wins_over_user_config(koto: Koto) -> None:
    assert koto("config", "get", "session.s3.region").code == 1  # unset
    assert koto("config", "get", "session.backend").stdout == b"local\n"  # the default
    koto.ok("config", "set", "session.s3.region", "eu-west-1", "--user")
    koto.ok("config", "set", "session.s3.bucket", "user-bucket", "--user")
    written = koto.ok("config", "set", "session.s3.bucket", "project-bucket")
    assert written["file"] == str(koto.cwd / ".koto" / "config.toml")
    assert koto("config", "get", "session.s3.bucket").stdout == b"project-bucket\n"
    assert koto("config", "get", "session.s3.region").stdout == b"eu-west-1\n"
    user = tomllib.loads((koto.home / "config.toml").read_text())
    assert user == {"session": {"s3": {"region": "eu-west-1", "bucket": "user-bucket"}}}
    project = tomllib.loads((koto.cwd / ".koto" / "config.toml").read_text())
    assert project == {"session": {"s3": {"bucket": "project-bucket"}}}
    koto.ok("config", "unset", "session.s3.bucket")
    assert koto("config", "get", "session.s3.bucket").stdout == b"user-bucket\n"
    assert koto.ok("config", "list", "--json") == {
        "session.backend": "local",
        "session.s3.bucket": "user-bucket",
        "session.s3.region": "eu-west-1",
    }
    listed = tomllib.loads(koto("config", "list").stdout.decode())
    assert listed["session"]["s3"]["region"] == "eu-west-1"


def test_credentials_stay_out_of_project_config_and_are_redacted(koto: Koto) -> None:
    refused = koto("config", "set", "session.s3.secret_key", "hunter2")
    assert refused.code == 2
    assert "credentials" in refused.json["error"]
    assert not (koto.cwd / ".koto" / "config.toml").exists()
    koto.ok("config", "set", "session.s3.secret_key", "hunter2", "--user")
    koto.ok("config", "set", "session.s3.access_key", "AKIAEXAMPLE", "--user")
    listed = koto("config", "list")
    assert b"hunter2" not in listed.stdout and b"AKIAEXAMPLE" not in listed.stdout
    assert koto.ok("config", "list", "--json")["session.s3.secret_key"] == "<set>"
    assert koto("config", "get", "session.s3.secret_key").stdout == b"<set>\n"
    # a project file written by hand with a credential is refused when read
    koto.write(".koto/config.toml", '[session.s3]\naccess_key = "leaked"\n')
    result = koto("config", "list")
    assert result.code == 2
    assert "credentials cannot be stored in project config" in result.json["error"]


def test_bad_keys_values_and_files(koto: Koto) -> None:
    cases = [
        (("set", "session.nope", "x"), "unknown config key 'session.nope' (known: session.backend"),
        (("get", "nope"), "unknown config key 'nope'"),
        (("set", "session.backend", "ftp"), "session.backend must be one of local, s3, not 'ftp'"),
    ]
    for args, message in cases:
        refused = koto("config", *args)
        assert refused.code == 2 and refused.stdout.startswith(b"{")
        assert refused.json["code"] == "invalid_config"
        assert message in refused.json["error"]
        assert not (koto.cwd / ".koto" / "config.toml").exists()  # nothing written
    assert koto("config", "get", "session.backend").stdout == b"local\n"  # still the default
    koto.write(".koto/config.toml", "this is [not toml\n")
    broken = koto("config", "list")
    assert broken.code == 2 and "not valid TOML" in broken.json["error"]


def test_values_with_quotes_survive_the_writer(koto: Koto) -> None:
    value = 'a "quoted" \\ value\twith tab'
    koto.ok("config", "set", "session.s3.prefix", value, "--user")
    assert koto("config", "get", "session.s3.prefix").stdout.decode() == value + "\n"
