"""The context store: add, get, exists, list, remove; keys are validated."""

from __future__ import annotations

from conftest import Koto


def test_context_round_trip(koto: Koto) -> None:
    koto.ok("init", "s", "--template", koto.template("lifecycle"), "--var", "TASK=t")
    content = b"line one\n\x00binary\xff\n"
    assert koto("context", "add", "s", "notes/a.bin", input=content).stdout == b""
    koto.write("b.txt", "from a file")
    assert koto("context", "add", "s", "b.txt", "--from-file", "b.txt").code == 0
    assert koto("context", "get", "s", "notes/a.bin").stdout == content
    assert koto("context", "get", "s", "b.txt", "--to-file", "out/deep/b.txt").code == 0
    assert (koto.cwd / "out/deep/b.txt").read_text() == "from a file"
    assert koto("context", "exists", "s", "b.txt").code == 0
    assert koto("context", "exists", "s", "nope").code == 1
    assert koto.ok("context", "list", "s") == ["b.txt", "notes/a.bin"]
    assert koto.ok("context", "list", "s", "--prefix", "notes/") == ["notes/a.bin"]
    assert koto("context", "add", "s", "b.txt", input=b"replaced").code == 0
    assert koto("context", "get", "s", "b.txt").stdout == b"replaced"
    assert koto("context", "remove", "s", "b.txt").code == 0
    assert koto("context", "remove", "s", "b.txt").code == 0  # idempotent
    missing = koto("context", "get", "s", "b.txt")
    assert missing.code == 3
    assert missing.json["code"] == "context_missing"
    assert koto.ok("context", "list", "s") == ["notes/a.bin"]
    added = [(e["key"], e["size"]) for e in koto.entries("s", "context_added")]
    assert added == [("notes/a.bin", len(content)), ("b.txt", 11), ("b.txt", 8)]
    assert [e["key"] for e in koto.entries("s", "context_removed")] == ["b.txt"]


def test_context_keys_are_validated(koto: Koto) -> None:
    koto.ok("init", "s", "--template", koto.template("lifecycle"), "--var", "TASK=t")
    for key in ("../escape", "/etc/passwd", "a/../b", "a//b", ".", "a/./b", "a\\b", "x" * 256):
        result = koto("context", "add", "s", key, input=b"x")
        assert result.code == 2, key
        assert result.json["code"] == "invalid_key", key
        assert koto("context", "get", "s", key).code == 2
    assert koto.ok("context", "list", "s") == []
    assert not list(koto.root.rglob("passwd"))


def test_altered_context_content_is_detected(koto: Koto) -> None:
    koto.ok("init", "s", "--template", koto.template("lifecycle"), "--var", "TASK=t")
    koto("context", "add", "s", "k", input=b"original")
    [blob] = (koto.session_dir("s") / "ctx").iterdir()
    blob.write_bytes(b"altered")
    result = koto("context", "get", "s", "k")
    assert result.code == 3
    assert "altered" in result.json["error"]


def test_context_of_a_missing_session(koto: Koto) -> None:
    result = koto("context", "add", "nobody", "k", input=b"x")
    assert result.code == 2
    assert result.json["code"] == "workflow_not_initialized"
