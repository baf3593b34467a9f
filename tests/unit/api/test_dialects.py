"""Request fields that make an engine sample its whole distribution (the equivalence audit's text surface)."""

from inferencekit.api.dialects import DIALECTS


def test_full_distribution_turns_off_each_engines_truncation():
    # llama-server and llama-cpp-python sample with top_k 40, top_p 0.95 and min_p 0.05 unless told otherwise
    # (docs/engines.md); k <= 0 turns top-k off there, -1 on vLLM and SGLang
    assert DIALECTS["llama-server"].full_distribution() == {"top_p": 1.0, "top_k": 0, "min_p": 0.0}
    assert DIALECTS["llama-cpp-python"].full_distribution() == {"repeat_penalty": 1.0, "top_p": 1.0, "top_k": 0,
                                                                "min_p": 0.0}
    assert DIALECTS["vllm"].full_distribution() == {"top_p": 1.0, "top_k": -1, "min_p": 0.0}
    assert DIALECTS["sglang"].full_distribution()["top_k"] == -1
    # a plain OpenAI endpoint may reject fields it does not know: only top_p
    assert DIALECTS["openai"].full_distribution() == {"top_p": 1.0}
