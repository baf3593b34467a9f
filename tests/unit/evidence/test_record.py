import json

import pytest

from inferencekit.evidence import build_record, canonical_json, compute_id, integrity_problems, metric
from inferencekit.evidence.record import artifact
from inferencekit.stats import combine_claims, summarize


def test_canonical_json_sorts_keys_and_refuses_nan():
    assert canonical_json({"b": 1, "a": {"d": [1, 2], "c": "é"}}) == '{"a":{"c":"é","d":[1,2]},"b":1}'.encode()
    with pytest.raises(ValueError, match="non-finite"):
        canonical_json({"x": [float("nan")]})


def test_record_id_is_the_hash_of_its_content_and_an_edit_is_named(tmp_path):
    f = tmp_path / "outputs" / "a.json"
    f.parent.mkdir()
    f.write_text('{"text": "hi"}')
    rec = build_record(kind="bench", claim_class="observed", summary="s", identity={"engine": {}},
                       metrics=[metric("ttft_ms", 1.5, "ms", "p50", 3)], artifacts=[artifact(f, tmp_path, "reply")])
    assert rec["evidence_id"].startswith("ev_") and len(rec["evidence_id"]) == 27
    assert rec["evidence_id"] == compute_id(json.loads(canonical_json(rec)))
    assert integrity_problems(rec, tmp_path) == []
    f.write_text('{"text": "hi!"}')
    (p,) = integrity_problems(rec, tmp_path)
    assert p.startswith("artifact changed: outputs/a.json")
    f.unlink()
    assert integrity_problems(rec, tmp_path) == ["artifact missing: outputs/a.json"]
    edited = dict(rec, summary="better numbers")
    assert "record content changed" in integrity_problems(edited, None)[0]


def test_combine_claims_order():
    assert combine_claims(["PASS", "UNPROVEN", "FAIL"]) == "FAIL"
    assert combine_claims(["PASS", "NOT RUN", "UNPROVEN"]) == "UNPROVEN"
    assert combine_claims(["PASS", "NOT RUN"]) == "PASS"
    assert combine_claims([]) == "NOT RUN"
    with pytest.raises(ValueError):
        combine_claims(["OK"])


def test_summarize_by_hand():
    s = summarize([1, 2, 3, 4])
    assert (s["mean"], s["p50"], s["min"], s["max"]) == (2.5, 2.5, 1, 4)
    assert s["std"] == pytest.approx(1.118034, rel=1e-6)  # population std
    assert s["p90"] == pytest.approx(3.7)  # linear: 1 + 0.9*3 = 3.7 → between 3 and 4


def test_wilson_interval_matches_the_published_values():
    from inferencekit.stats import wilson_interval

    # Wilson (1927) score interval; 9/10 at 95% is [0.596, 0.982] (Newcombe 1998, Table I method 3 style)
    lo, hi = wilson_interval(9, 10)
    assert round(lo, 3) == 0.596 and round(hi, 3) == 0.982
    assert wilson_interval(0, 10)[0] == 0.0 and round(wilson_interval(0, 10)[1], 3) == 0.278
    with pytest.raises(ValueError):
        wilson_interval(3, 2)
