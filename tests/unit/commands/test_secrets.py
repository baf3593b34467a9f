"""The API key's value never reaches disk (issue 19): a server that echoes the Authorization header, a key that
was pasted into the URL path, one inside --extra-body or --chat-template-kwargs; every byte written, run dir and
evidence store, is grepped for the value, for ``bench serve``, ``gates run``, ``probe`` and ``quality`` commands.
The key is read from an environment variable whose name alone is recorded. A key under 8 characters is scrubbed
in its header form (redact.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from inferencekit.cli import main
from inferencekit.redact import MARK
from tests.fault_server import fault_server

KEY = "sk-test-7f3a9c0e1b2d4f6a8c0e2b4d6f8a0c1e"
FIELD_SECRET = "hf_Zq8w7e6r5t4y3u2i1o0p"  # a credential-like field of a JSON option, not the API key


def _written(*roots: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for r in roots if r.is_dir() for p in r.rglob("*") if p.is_file()}


def test_no_written_byte_holds_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("IK_TEST_KEY", KEY)
    home = Path(os.environ["INFERENCEKIT_HOME"])
    with fault_server(echo_auth=True) as (url, seen):
        for i, (base, extra, ctk) in enumerate([
                (url, "{}", "{}"), (f"{url}/{KEY}", "{}", "{}"), (url, f'{{"user": "{KEY}"}}', "{}"),
                (url, "{}", json.dumps({"note": KEY, "hf_token": FIELD_SECRET}))]):
            code = main(["bench", "serve", "--base-url", base, "--api-key-env", "IK_TEST_KEY", "--concurrency", "1",
                         "--num-prompts", "2", "--max-tokens", "4", "--warmup", "0", "--extra-body", extra,
                         "--chat-template-kwargs", ctk, "--run-dir", str(tmp_path / f"r{i}"), "--json", "--quiet"])
            assert code in (1, 3), (base, code)
    assert any(s["headers"].get("Authorization") == f"Bearer {KEY}" for s in seen)  # it was sent, and echoed back
    out = capsys.readouterr()
    files = _written(tmp_path, home)
    assert any(p.endswith(".json") and "/outputs/" in p for p in files)  # the 401 replies were written
    leaks = [p for p, data in files.items() if KEY.encode() in data or FIELD_SECRET.encode() in data]
    assert leaks == [] and KEY not in out.out and KEY not in out.err and FIELD_SECRET not in out.out
    assert any(s["body"].get("chat_template_kwargs", {}).get("hf_token") == FIELD_SECRET for s in seen)  # sent
    assert any(MARK.encode() in data for data in files.values())  # scrubbed, not left out: the reply says where
    assert any(b"IK_TEST_KEY" in data for data in files.values())  # the variable's name is recorded


def _prompts(tmp_path: Path) -> Path:
    p = tmp_path / "prompts.jsonl"
    p.write_text("".join(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Say {i}."}]}) + "\n"
                         for i in range(4)))
    return p


def test_no_written_byte_holds_the_key_for_gates_probe_and_quality(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys) -> None:
    # the same scan over the other request-sending commands, as far as they run against a server that answers every
    # chat request with a 401 quoting the request's headers: each ends with its record (the failures in it)
    monkeypatch.setenv("IK_TEST_KEY", KEY)
    home = Path(os.environ["INFERENCEKIT_HOME"])
    prompts = str(_prompts(tmp_path))
    ctk = json.dumps({"note": KEY, "hf_token": FIELD_SECRET})
    runs = {"probe": ["probe"],
            "gates": ["gates", "run", "--gates", "caching", "--cache-prompts", "1", "--prompts", prompts],
            "trajectory": ["quality", "trajectory", "--prompts", prompts, "--max-tokens", "3"],
            "gsm8k": ["quality", "gsm8k", "--limit", "2", "--max-tokens", "8"]}
    with fault_server(echo_auth=True) as (url, seen):
        for name, argv in runs.items():
            code = main([*argv, "--base-url", url, "--api-key-env", "IK_TEST_KEY", "--chat-template-kwargs", ctk,
                         "--run-dir", str(tmp_path / name), "--json", "--quiet"])
            assert code in (0, 1, 3), (name, code, capsys.readouterr().err)
            assert list((tmp_path / name / "evidence").glob("ev_*.json")), name  # it ran to its record
    assert sum(s["headers"].get("Authorization") == f"Bearer {KEY}" for s in seen) >= len(runs)
    out = capsys.readouterr()
    files = _written(tmp_path, home)
    leaks = [p for p, data in files.items() if KEY.encode() in data or FIELD_SECRET.encode() in data]
    assert leaks == [] and KEY not in out.out + out.err and FIELD_SECRET not in out.out + out.err
    for name in runs:  # each command wrote the echoed 401 somewhere, scrubbed
        assert any(p.startswith(str(tmp_path / name)) and MARK.encode() in data for p, data in files.items()), name


def test_a_short_key_echoed_by_the_server_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys) -> None:
    short = "k3y-42"  # under 8 characters: scrubbed in its header form, the form a server echoes
    monkeypatch.setenv("IK_SHORT_KEY", short)
    with fault_server(echo_auth=True) as (url, seen):
        code = main(["bench", "serve", "--base-url", url, "--api-key-env", "IK_SHORT_KEY", "--concurrency", "1",
                     "--num-prompts", "2", "--max-tokens", "4", "--warmup", "0", "--run-dir", str(tmp_path / "r"),
                     "--json", "--quiet"])
    assert code == 3 and seen[0]["headers"]["Authorization"] == f"Bearer {short}"
    err = capsys.readouterr().err
    assert "IK_SHORT_KEY holds a value of 6 characters, too short to scrub" in err and short not in err
    files = _written(tmp_path)
    assert not [p for p, data in files.items() if f"Bearer {short}".encode() in data]
    assert any(b"Bearer <redacted>" in data for data in files.values())


@pytest.mark.parametrize("query,msg", [(f"org={KEY}", "--base-url has a query string"),
                                       (f"api_key={KEY}", "--base-url carries what looks like a credential")],
                         ids=["innocuous-name", "credential-name"])
def test_a_key_in_a_url_query_is_refused_before_anything_is_sent_or_written(query, msg, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             capsys) -> None:
    # issue 19, item 8: a key in a query parameter not named key/token/secret/password/auth was written to run.json
    # (and the query silently dropped from the requests); now any query is refused: exit 2, one line, nothing sent,
    # no run dir, no byte of the key on disk or in the message
    monkeypatch.setenv("IK_TEST_KEY", KEY)
    home = Path(os.environ["INFERENCEKIT_HOME"])
    before = _written(home)
    hits: list[str] = []
    with fault_server(hits=hits) as (url, _):
        code = main(["bench", "serve", "--base-url", f"{url}/v1?{query}", "--api-key-env", "IK_TEST_KEY",
                     "--num-prompts", "2", "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and hits == [], (code, hits)
    assert err.count("\n") == 1 and msg in err and KEY not in err, err
    assert not (tmp_path / "r").exists()
    assert not [p for p, data in _written(tmp_path, home).items() if KEY.encode() in data]
    assert _written(home) == before  # nothing new in the evidence store either
