"""Which GGUF is an honest replica of the claimed precision (quality/replica.py), or why there is none."""

from __future__ import annotations

from pathlib import Path

import inferencekit.quality.replica as replica


def test_a_replica_is_the_claimed_weights_of_the_reference_model_or_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(replica, "embedded_gguf", lambda: Path("/models/smollm2-q4_1.gguf"))
    monkeypatch.setattr(replica, "cache_root", lambda: tmp_path)
    assert replica.replica_gguf("embedded", "q4_1") == (Path("/models/smollm2-q4_1.gguf"), "the embedded GGUF (Q4_1)")
    # another reference: its quantisations are not at hand, whatever the claim
    gguf, why = replica.replica_gguf("/weights/other-model", "Q4_1")
    assert gguf is None and why.startswith("the reference is not the embedded model")
    assert replica.replica_gguf("embedded", None) == (None, "no --claim: the precision the replica must have is "
                                                            "unknown")
    # a zoo precision counts once it is built
    assert replica.replica_gguf("embedded", "Q8_0") == (None, "no Q8_0 GGUF in the zoo (make zoo ZOO=q8_0)")
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "smollm2-135m-q8_0.gguf").write_bytes(b"GGUF")
    gguf, why = replica.replica_gguf("embedded", "Q8_0")
    assert gguf == tmp_path / "zoo" / "smollm2-135m-q8_0.gguf" and why == "the zoo's Q8_0 GGUF (smollm2-135m-q8_0.gguf)"
