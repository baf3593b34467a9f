"""Scrubbing a registered secret, also when a server's reply splits it across network chunks."""

from inferencekit import redact


def test_a_secret_is_scrubbed_whole_or_split_across_chunks(monkeypatch) -> None:
    monkeypatch.setattr(redact, "_SECRETS", {})
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

    monkeypatch.setattr(redact, "_SECRETS", {})
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


def test_a_short_key_is_scrubbed_in_its_header_form_only(monkeypatch) -> None:
    # issue 19 audit: a key under 8 characters used to be written wherever a server echoed it. Scrubbing it
    # everywhere would cut ordinary text ("EMPTY", vLLM's placeholder key, in a reply), so its header form is scrubbed
    monkeypatch.setattr(redact, "_SECRETS", {})
    redact.register("EMPTY")
    assert redact.has_secrets()
    assert redact.scrub(b'{"message": "bad key: Bearer EMPTY", "h": {"Authorization": "Bearer EMPTY"}}') == \
        b'{"message": "bad key: Bearer <redacted>", "h": {"Authorization": "Bearer <redacted>"}}'
    assert redact.scrub(b"the tank is EMPTY") == b"the tank is EMPTY"  # free text is left alone
    redact.register("")
    assert len(redact._SECRETS) == 2  # an empty value registers nothing


def test_reading_a_short_key_warns_once_on_stderr(monkeypatch, capsys) -> None:
    from inferencekit.api import endpoint

    monkeypatch.setattr(redact, "_SECRETS", {})
    monkeypatch.setattr(endpoint, "_WARNED", set())
    monkeypatch.setenv("IK_SHORT_KEY", "abc")
    assert endpoint.read_api_key("IK_SHORT_KEY") == "abc" == endpoint.read_api_key("IK_SHORT_KEY")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "IK_SHORT_KEY holds a value of 3 characters" in err and "abc" not in err
    monkeypatch.setenv("IK_LONG_KEY", "sk-0123456789")
    endpoint.read_api_key("IK_LONG_KEY")
    assert capsys.readouterr().err == ""
