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


def test_credential_like_fields_of_json_options_are_registered(monkeypatch) -> None:
    # issue 19, item 8: header-like fields in --extra-body / --chat-template-kwargs are sent but never written
    from inferencekit.api.body import parse_json_object

    monkeypatch.setattr(redact, "_SECRETS", set())
    parsed = parse_json_object('{"headers": {"Authorization": "Bearer tok-0123456789", "X-Api-Key": "xk-abcdefghij"},'
                               ' "hf_token": "hf_qwertyuiop", "auth": {"user": "someone-long", "pass": "pw-12345678"},'
                               ' "max_tokens": 5, "tokenizer": "HuggingFaceTB/SmolLM2", "author": "a-long-name",'
                               ' "top_k": 1}', "--extra-body")
    assert parsed["headers"]["X-Api-Key"] == "xk-abcdefghij"  # what is sent is unchanged
    written = redact.scrub_text(str(parsed))
    for secret in ("tok-0123456789", "xk-abcdefghij", "hf_qwertyuiop", "someone-long", "pw-12345678"):
        assert secret not in written, secret
    for kept in ("HuggingFaceTB/SmolLM2", "a-long-name", "'max_tokens': 5"):  # not credential names
        assert kept in written, kept
    assert redact.scrub_text("echoed: tok-0123456789") == "echoed: <redacted>"  # the bare key after "Bearer "
