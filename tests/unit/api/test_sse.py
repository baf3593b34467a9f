from inferencekit.api.sse import split_events


def test_events_split_across_chunks_take_the_time_of_their_last_byte():
    chunks = [(10, b'data: {"a":'), (20, b' 1}\n'), (30, b"\n"), (40, b"data: [DONE]\n\n")]
    events, unterminated = split_events(chunks)
    assert events == [(30, '{"a": 1}'), (40, "[DONE]")]
    assert unterminated is False


def test_comments_blank_lines_and_other_fields_are_skipped():
    raw = b": keep-alive\n\nevent: message\nid: 7\nretry: 100\ndata: x\n\n\n\n: ping\n\ndata: y\n\n"
    events, _ = split_events([(5, raw)])
    assert events == [(5, "x"), (5, "y")]


def test_multi_line_data_is_joined_with_newline_and_no_space_variant_is_read():
    events, _ = split_events([(1, b"data:first\ndata: second\n\n")])
    assert events == [(1, "first\nsecond")]


def test_crlf_split_between_chunks_and_lone_cr():
    chunks = [(1, b"data: a\r"), (2, b"\n\r\n"), (3, b"data: b\r\rdata: c\n\n")]
    events, _ = split_events(chunks)
    assert events == [(2, "a"), (3, "b"), (3, "c")]


def test_stream_cut_inside_an_event_is_flagged_and_the_partial_payload_kept():
    events, unterminated = split_events([(1, b"data: one\n\n"), (2, b'data: {"half')])
    assert events == [(1, "one"), (2, '{"half')]
    assert unterminated is True


def test_utf8_split_between_chunks_decodes_whole():
    text = "data: é😀\n\n".encode()
    events, _ = split_events([(1, text[:8]), (2, text[8:])])
    assert events == [(2, "é😀")]


def test_empty_stream():
    assert split_events([]) == ([], False)


def test_lines_that_are_not_sse_are_handed_back_not_dropped():
    foreign: list[bytes] = []
    events, _ = split_events([(1, b'event: x\nid: 7\nretry: 10\n: note\n{"bare": 1}\ndata: a\n\nnot sse'), (2, b"")],
                             foreign)
    assert events == [(1, "a")]
    assert foreign == [b'{"bare": 1}', b"not sse"]  # event/id/retry are SSE fields; comments are comments
