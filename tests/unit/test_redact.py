"""Scrubbing a registered secret, also when a server's reply splits it across network chunks."""

from inferencekit import redact


def test_a_secret_is_scrubbed_whole_or_split_across_chunks(monkeypatch) -> None:
    monkeypatch.setattr(redact, "_SECRETS", set())
    redact.register("short")  # under 8 characters: not a key, never scrubbed
    assert not redact.has_secrets() and redact.scrub(b"short") == b"short"
    redact.register("sk-abcdefgh1234")
    assert redact.scrub(b'{"auth": "Bearer sk-abcdefgh1234"}') == b'{"auth": "Bearer <redacted>"}'
    assert redact.scrub_text("x sk-abcdefgh1234 y") == "x <redacted> y"
    whole = redact.scrub_chunks([(1, b"a sk-abcdefgh1234"), (2, b" b")])
    assert whole == [(1, b"a <redacted>"), (2, b" b")]  # timing kept where the key sits in one chunk
    split = redact.scrub_chunks([(1, b"Bearer sk-abcd"), (2, b"efgh1234 end")])
    assert split == [(2, b"Bearer <redacted> end")]  # one chunk at the last time: its bytes never written
