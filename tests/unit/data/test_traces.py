import gzip
import importlib.util
from dataclasses import replace

import pytest

from inferencekit.data.traces import (
    SKIP_REASONS,
    TraceRow,
    context_note,
    fit_context,
    load_sample,
    load_trace,
    parse_trace,
    replay_rate,
    scale,
)
from inferencekit.errors import OpError
from tests.paths import ROOT

MOONCAKE_OK = '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [0, 1]}\n'
AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_OK = "2023-11-16 18:17:03.9799600,4808,10\n"
BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BURST_OK = "5,ChatGPT,472,18,490,Conversation log\n"


def write(tmp_path, text, name):
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- the packaged samples: exact rows ----

def test_mooncake_sample_rows():
    t = load_sample("mooncake", max_context=2048)
    assert (t.format, len(t.rows), t.read, t.reordered, t.block_size) == ("mooncake", 200, 200, 0, 64)
    assert t.skipped == {"over_context": 0, "no_output": 0, "no_input": 0}
    assert t.rows[0] == TraceRow(1, 0.0, 1123, 43, tuple(range(18)))
    assert t.rows[1] == TraceRow(2, pytest.approx(0.409), 587, 221, tuple(range(18, 28)))
    assert t.rows[3].hash_ids == tuple(range(16)) + (41,)  # the 16-block shared prefix, then a tail of its own
    last = t.rows[-1]
    assert (last.line, last.t_s, last.input_len, last.output_len) == (200, pytest.approx(110.674), 1278, 48)
    assert last.hash_ids == tuple(range(16)) + (699, 700, 701, 702)
    assert all(r.input_len + r.output_len <= 2048 for r in t.rows)
    assert [r.t_s for r in t.rows] == sorted(r.t_s for r in t.rows)
    assert t.describe()["requests"] == 200 and t.path == "inferencekit:traces/mooncake_sample.jsonl"


def test_azure_sample_rows():
    t = load_sample("azure", max_context=2048)
    assert (len(t.rows), t.read, t.block_size) == (50, 50, None)
    assert t.rows[0] == TraceRow(2, 0.0, 911, 68, None)
    assert t.rows[1].line == 3 and t.rows[1].t_s == pytest.approx(0.517727, abs=1e-9)
    assert (t.rows[1].input_len, t.rows[1].output_len) == (589, 164)
    # 18:17:17.7797987 - 18:17:04.2892575
    assert t.rows[-1] == TraceRow(51, pytest.approx(13.4905412, abs=1e-9), 618, 116, None)


def test_burstgpt_sample_skips_its_three_failed_requests():
    t = load_sample("burstgpt", max_context=2048)
    assert (len(t.rows), t.read) == (47, 50)
    assert t.skipped == {"over_context": 0, "no_output": 3, "no_input": 0}
    assert t.rows[0] == TraceRow(2, 0.0, 235, 727, None)
    assert t.rows[1] == TraceRow(3, 0.0, 596, 34, None)  # an equal time keeps the file's order
    assert t.rows[-1] == TraceRow(51, 517.0, 54, 89, None)
    assert {29, 46, 48}.isdisjoint(r.line for r in t.rows)


def test_samples_are_what_the_script_builds_and_small():
    spec = importlib.util.spec_from_file_location("make_sample_traces", ROOT / "scripts" / "make_sample_traces.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    built = mod.build()
    for name, data in built.items():
        on_disk = (ROOT / "src" / "inferencekit" / "data" / "traces" / name).read_bytes()
        assert on_disk == data, f"{name}: run scripts/make_sample_traces.py"
        assert len(data) < 60_000


def test_the_real_block_size_refuses_the_sample_cut_at_64():
    with pytest.raises(OpError, match=r"mooncake_sample.jsonl:1: too many 'hash_ids'.*block size"):
        load_sample("mooncake", block_size=512)


# ---- real-format details ----

def test_real_first_lines_parse(tmp_path):
    # the first lines of Mooncake's FAST25 conversation_trace.jsonl (hash_ids cut short in the 2nd: too few)
    p = write(tmp_path, '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": '
                        f'{list(range(14))}}}\n'
                        '{"timestamp": 3000, "input_length": 915, "output_length": 355, "hash_ids": [0, 462]}\n',
              "m.jsonl")
    t = load_trace(p, "mooncake")
    assert [(r.t_s, r.input_len, r.hash_ids) for r in t.rows] == [(0.0, 6758, tuple(range(14))),
                                                                  (3.0, 915, (0, 462))]


def test_azure_2024_offset_times_and_unsorted_rows(tmp_path):
    p = write(tmp_path, AZURE_HEAD + "2024-05-10 00:00:01.009930+00:00,2162,5\n"
                                     "2024-05-10 02:00:00.5+02:00,10,3\n"  # 00:00:00.5 UTC: first
                                     "2024-05-10 00:00:01.009930,7,2\n", "a.csv")
    t = load_trace(p, "azure")
    assert [(r.line, r.t_s) for r in t.rows] == [(3, 0.0), (2, pytest.approx(0.50993)), (4, pytest.approx(0.50993))]
    assert t.reordered == 1


def test_sorting_is_stable_and_counts_reordered_rows(tmp_path):
    p = write(tmp_path, "".join(f'{{"timestamp": {ts}, "input_length": 3, "output_length": 1}}\n'
                                for ts in (10, 10, 5, 20, 5)), "m.jsonl")
    t = load_trace(p, "mooncake")
    assert [r.line for r in t.rows] == [3, 5, 1, 2, 4]
    assert [r.t_s for r in t.rows] == [0.0, 0.0, 0.005, 0.005, 0.015]
    assert t.reordered == 2 and all(r.hash_ids is None for r in t.rows)


def test_gzip_crlf_bom_and_extra_columns(tmp_path):
    p = tmp_path / "b.csv.gz"
    body = "\ufeff" + BURST_HEAD.replace("\n", ",Session ID\r\n") + "5,ChatGPT,472,18,490,API log,7\r\n\r\n"
    p.write_bytes(gzip.compress(body.encode()))
    t = load_trace(p, "burstgpt")
    assert t.rows == (TraceRow(2, 0.0, 472, 18, None),)


# ---- skipping and scaling ----

def test_rows_over_the_context_are_skipped_and_counted(tmp_path):
    p = write(tmp_path, "".join(f'{{"timestamp": {i * 100}, "input_length": {n}, "output_length": 10}}\n'
                                for i, n in enumerate((90, 91, 50, 200, 0))), "m.jsonl")
    t = load_trace(p, "mooncake", max_context=100)
    assert [r.line for r in t.rows] == [1, 3]
    assert t.skipped == {"over_context": 2, "no_output": 0, "no_input": 1} and t.read == 5
    assert [r.t_s for r in t.rows] == [0.0, 0.2]


def test_time_counts_from_the_first_row_kept(tmp_path):
    p = write(tmp_path, AZURE_HEAD + "2023-11-16 18:17:03.0000000,5000,10\n2023-11-16 18:17:05.2500000,10,10\n",
              "a.csv")
    t = load_trace(p, "azure", max_context=2048)
    assert t.rows == (TraceRow(3, 0.0, 10, 10, None),) and t.skipped["over_context"] == 1


def _trace(*rows: tuple[float, int, int]):
    """A Trace of rows ``(t_s, input_len, output_len)`` (lines 1..n), one row already skipped as no_output."""
    return replace(load_sample("azure"), path="t.csv", read=len(rows) + 1,
                   rows=tuple(TraceRow(i + 1, t, n, o) for i, (t, n, o) in enumerate(rows)),
                   skipped={"over_context": 0, "no_output": 1, "no_input": 0}, max_context=None)


def test_fit_context_skips_and_counts_the_rows_over_the_servers_context_and_restarts_the_clock():
    t = fit_context(_trace((0.0, 3000, 100), (1.5, 100, 28), (2.0, 2000, 48), (4.0, 2000, 49)), 2048)
    assert [(r.line, r.t_s) for r in t.rows] == [(2, 0.0), (3, 0.5)]  # 2000 + 48 = 2048 fits, 2049 does not
    assert t.skipped == {"over_context": 2, "no_output": 1, "no_input": 0} and t.max_context == 2048
    assert t.describe()["context_checked"] is True and t.describe()["requests"] == 2
    assert replay_rate(scale(t.rows, 2.0)) == 2 / 1.0  # two rows over one scaled second
    assert context_note(t.describe()) == ("trace replay: 2 of 5 rows were skipped, not sent: their input + output is "
                                          "over the server's context of 2048 tokens per request")


def test_fit_context_without_a_context_checks_nothing_and_says_so():
    t = _trace((0.0, 3000, 100), (1.0, 10, 10))
    assert fit_context(t, None) is t and t.describe()["context_checked"] is False
    assert "reports no context length, so the trace's rows were not checked" in context_note(t.describe())
    assert context_note(fit_context(t, 4096).describe()) is None  # every row fits: nothing to say
    assert replay_rate(t.rows[:1]) == 1.0  # one row: all at once


def test_fit_context_refuses_a_trace_whose_every_row_is_over_the_context():
    with pytest.raises(OpError, match=r"^trace 't.csv': all 3 requests were skipped: 2 over context, 1 no output "
                                      r"\(context 512 tokens\)$"):
        fit_context(_trace((0.0, 3000, 100), (1.0, 500, 13)), 512)
    with pytest.raises(OpError, match="max context must be a positive integer"):
        fit_context(_trace((0.0, 10, 10)), 0)


def test_every_row_skipped_is_an_error(tmp_path):
    p = write(tmp_path, BURST_HEAD + "5,ChatGPT,10,0,10,API log\n6,ChatGPT,3000,5,3005,API log\n", "b.csv")
    with pytest.raises(OpError, match=r"all 2 requests were skipped: 1 over context, 1 no output"):
        load_trace(p, "burstgpt", max_context=2048)


def test_scale():
    rows = (TraceRow(1, 0.0, 5, 5), TraceRow(2, 3.0, 5, 5))
    assert [r.t_s for r in scale(rows, 0.5)] == [0.0, 1.5]
    assert scale(rows, 2)[1] == TraceRow(2, 6.0, 5, 5)
    for bad in (0, -1, float("inf"), float("nan"), True, "2"):
        with pytest.raises(OpError, match="time scale"):
            scale(rows, bad)


# ---- malformed files: path:line ----

@pytest.mark.parametrize("line,msg", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"input_length": 5, "output_length": 1}', "'timestamp'"),
    ('{"timestamp": "5", "input_length": 5, "output_length": 1}', "'timestamp' must be a number"),
    ('{"timestamp": -1, "input_length": 5, "output_length": 1}', "'timestamp' must be a number"),
    ('{"timestamp": true, "input_length": 5, "output_length": 1}', "'timestamp' must be a number"),
    ('{"timestamp": 1, "output_length": 1}', "'input_length' (tokens) is missing"),
    ('{"timestamp": 1, "input_length": 5}', "'output_length' (tokens) is missing"),
    ('{"timestamp": 1, "input_length": -5, "output_length": 1}', "'input_length' must be a non-negative integer"),
    ('{"timestamp": 1, "input_length": 5.5, "output_length": 1}', "'input_length' must be a non-negative integer"),
    ('{"timestamp": 1, "input_length": 5, "output_length": "7"}', "'output_length' must be a non-negative integer"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": 3}', "'hash_ids' must be a list"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}', "'hash_ids'[0] must be"),
    ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1.0]}', "'hash_ids'[0] must be"),
    ('{"timestamp": 1, "input_length": 129, "output_length": 1, "hash_ids": [1, 2]}', "too few 'hash_ids'"),
    ('{"timestamp": 1, "input_length": 64, "output_length": 1, "hash_ids": [1, 2]}', "too many 'hash_ids'"),
])
def test_bad_mooncake_lines_name_path_and_line(tmp_path, line, msg):
    p = write(tmp_path, MOONCAKE_OK + "\n" + line + "\n" + MOONCAKE_OK, "t.jsonl")
    with pytest.raises(OpError) as e:
        load_trace(p, "mooncake", block_size=64)
    assert str(e.value).startswith(f"{p}:3: ")
    assert msg in str(e.value)


@pytest.mark.parametrize("line,msg", [
    ("2023-11-16 18:17:03,4808,10", None),  # fine: no fraction
    ("2023-11-16 25:17:03.97,4808,10", "TIMESTAMP"),
    ("2023-11-16,4808,10", "TIMESTAMP"),
    ("yesterday,4808,10", "TIMESTAMP"),
    ("2023-11-16 18:17:03.9799600,-3,10", "ContextTokens must be a non-negative integer"),
    ("2023-11-16 18:17:03.9799600,48.5,10", "ContextTokens must be a non-negative integer"),
    ("2023-11-16 18:17:03.9799600,4808,", "GeneratedTokens must be a non-negative integer"),
    ("2023-11-16 18:17:03.9799600,4808", "2 fields, the header has 3"),
    ('"2023-11-16 18:17:03.9799600,4808,10', "not a valid CSV row"),  # an unclosed quote
    ('2023-11-16 18:17:03.9799600;4808;10', "1 field, the header has 3"),
])
def test_bad_azure_lines_name_path_and_line(tmp_path, line, msg):
    p = write(tmp_path, AZURE_HEAD + AZURE_OK + line + "\n" + AZURE_OK, "t.csv")
    if msg is None:
        assert len(load_trace(p, "azure").rows) == 3
        return
    with pytest.raises(OpError) as e:
        load_trace(p, "azure")
    assert str(e.value).startswith(f"{p}:3: ")
    assert msg in str(e.value)


@pytest.mark.parametrize("line,msg", [
    ("-5,ChatGPT,472,18,490,API log", "Timestamp must be a number of seconds"),
    ("nan,ChatGPT,472,18,490,API log", "Timestamp must be a number of seconds"),
    (",ChatGPT,472,18,490,API log", "Timestamp must be a number of seconds"),
    ("5,ChatGPT,many,18,490,API log", "Request tokens must be a non-negative integer"),
    ("5,ChatGPT,472,18.0,490,API log", "Response tokens must be a non-negative integer"),
    ("5,ChatGPT,472,18,490", "5 fields, the header has 6"),
])
def test_bad_burstgpt_lines_name_path_and_line(tmp_path, line, msg):
    p = write(tmp_path, BURST_HEAD + BURST_OK + line + "\n" + BURST_OK, "t.csv")
    with pytest.raises(OpError) as e:
        load_trace(p, "burstgpt")
    assert str(e.value).startswith(f"{p}:3: ")
    assert msg in str(e.value)


def test_a_header_of_another_format_says_which(tmp_path):
    p = write(tmp_path, BURST_HEAD + BURST_OK, "t.csv")
    with pytest.raises(OpError, match=r"t.csv:1: an azure trace .* lacks TIMESTAMP, ContextTokens, GeneratedTokens "
                                      r"\(it looks like a burstgpt trace: --trace-format burstgpt\)"):
        load_trace(p, "azure")
    with pytest.raises(OpError, match=r"t.csv:1: not valid JSON .*burstgpt"):
        load_trace(p, "mooncake")
    q = write(tmp_path, MOONCAKE_OK, "m.jsonl")
    with pytest.raises(OpError, match=r"m.jsonl:1: .*it looks like a mooncake trace"):
        load_trace(q, "burstgpt")


@pytest.mark.parametrize("fmt,text", [("mooncake", ""), ("mooncake", "\n\n"), ("azure", AZURE_HEAD),
                                      ("burstgpt", "")])
def test_an_empty_trace_is_an_error(tmp_path, fmt, text):
    p = write(tmp_path, text, "e.txt")
    with pytest.raises(OpError, match="holds no requests"):
        load_trace(p, fmt)


def test_bad_arguments_and_files(tmp_path):
    with pytest.raises(OpError, match="not one of mooncake, azure, burstgpt"):
        load_trace(tmp_path / "x", "sharegpt")
    with pytest.raises(OpError, match="does not exist"):
        load_trace(tmp_path / "x", "azure")
    with pytest.raises(OpError, match="block size"):
        parse_trace(b"", "mooncake", "s", block_size=0)
    with pytest.raises(OpError, match="max context"):
        parse_trace(b"", "mooncake", "s", max_context=0)
    bad = tmp_path / "t.jsonl.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(OpError, match="cannot read trace file"):
        load_trace(bad, "mooncake")
    p = tmp_path / "u.csv"
    p.write_bytes(AZURE_HEAD.encode() + b"\xff\xfe,1,1\n")
    with pytest.raises(OpError, match=r"u.csv:2: not UTF-8 text"):
        load_trace(p, "azure")


def test_skip_reasons_are_stable():
    assert SKIP_REASONS == ("over_context", "no_output", "no_input")
