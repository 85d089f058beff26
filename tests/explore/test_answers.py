"""How a comparison shows a model call: word diffs and the request parameters that changed."""

from __future__ import annotations

from kassette.explore._answers import ELIDED, request_changes, word_diff


def test_a_word_diff_marks_the_changed_words_and_shortens_unchanged_runs() -> None:
    words = " ".join(f"w{number}" for number in range(30))
    old = f"The cat sat on the mat. {words} It was warm."
    new = f"The dog sat on the mat. {words} It was cold."
    diff = word_diff(old, new, context=2)
    assert diff == [
        ("=", "The "),
        ("-", "cat "),
        ("+", "dog "),
        ("=", "sat on "),
        (ELIDED, "32 words"),  # sat on the mat., 30 words, It was: 36, less 2 each side
        ("=", "It was "),
        ("-", "warm."),
        ("+", "cold."),
    ]
    restored = "".join(text for op, text in diff if op in ("=", "+"))
    assert restored == "The dog sat on It was cold."  # what is left after shortening
    assert word_diff(old, old) == []


def test_a_short_unchanged_run_is_kept_whole() -> None:
    assert word_diff("a b c d", "a B c D", context=4) == [
        ("=", "a "),
        ("-", "b "),
        ("+", "B "),
        ("=", "c "),
        ("-", "d"),
        ("+", "D"),
    ]


def test_request_changes_name_each_differing_parameter() -> None:
    base = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "Write a haiku about rain"}],
        "temperature": 0.7,
    }
    hotter = {**base, "temperature": 1.3, "top_p": 0.9}
    assert request_changes(base, hotter) == ["temperature 0.7 → 1.3", "top_p unset → 0.9"]
    reworded = {**base, "messages": [{"role": "user", "content": "Write a limerick"}]}
    assert request_changes(base, reworded) == [
        'messages[0].content "Write a haiku about rain" → "Write a limerick"'
    ]
    longer = {**base, "messages": [*base["messages"], {"role": "user", "content": "more"}]}
    assert request_changes(base, longer) == ["messages (list of 1) → (list of 2)"]
    assert request_changes(base, base) == request_changes(None, base) == []
