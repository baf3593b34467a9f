"""GSM8K through lm-evaluation-harness (``quality gsm8k --backend lm-eval``), fully offline.

lm-eval's ``local-chat-completions`` model sends each problem as one chat request to an
OpenAI-compatible server; the task is defined here (``write_task``) so that lm-eval reads our local
GSM8K JSONL file (``dataset_path: json``) and never downloads from Hugging Face. Pinned release:
``lm-eval[api]==0.4.13`` (``pip install 'inferencekit[lmeval]'``).

The task is zero-shot: the user message is ``PROMPT_TEMPLATE`` of the native backend (reason step
by step, end on ``#### <number>``), generation runs until the model stops or ``max_tokens``, the
target is the number after the answer's last ``####``, and the metric is lm-eval's
``exact_match`` under its usual GSM8K filters: ``strict-match`` (the number after ``#### ``) and
``flexible-extract`` (the last number in the reply), with the regexes its own ``gsm8k.yaml`` ignores
(commas, ``$``, everything up to ``#### ``, a final full stop).

Request fields: lm-eval sends ``messages``, ``model``, ``max_tokens``, ``temperature`` (0), ``stop``
(none), ``seed``, plus every generation kwarg it does not consume, which is how this backend sends
``chat_template_kwargs`` and other extra fields (``refused_settings`` names those it cannot send).
The API key travels as ``OPENAI_API_KEY`` in the subprocess's environment, which lm-eval sends as
``Authorization: Bearer <key>``.

Pure parts: ``write_task``, ``lm_eval_argv``, ``refused_settings``, ``parse_results``,
``parse_samples``. ``run_lm_eval`` runs the subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from inferencekit.api.endpoint import normalize_base_url, read_api_key
from inferencekit.errors import OpError
from inferencekit.extras import require_extra
from inferencekit.quality.gsm8k import PROMPT_TEMPLATE

__all__ = ["LMEVAL_PIN", "TASK_NAME", "lm_eval_argv", "parse_results", "parse_samples", "refused_settings",
           "require_lm_eval", "run_lm_eval", "write_task"]

LMEVAL_PIN = "lm-eval[api]==0.4.13"
TASK_NAME = "inferencekit_gsm8k"
# lm-eval filter name -> our label
_FILTERS = {"strict-match": "strict", "flexible-extract": "flexible"}
# Variables the subprocess inherits; everything else (keys, tokens, HF_* settings) is dropped.
_KEEP_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR",
             "REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
             "no_proxy", "VIRTUAL_ENV")
# Request fields this backend cannot pass through, and why. local-chat-completions builds each body as
# {messages, model, max_tokens, temperature, stop, seed, **gen_kwargs} (openai_completions.py,
# LocalChatCompletion._create_payload) and reads one non-streamed choice per request; the gen_kwargs
# names it consumes itself never reach the server.
_REFUSED_FIELDS = {
    "messages": "lm-eval builds the messages from the task", "model": "lm-eval sends --model",
    "max_tokens": "it comes from --max-tokens", "temperature": "this backend decodes greedily (temperature 0)",
    "seed": "it comes from the run seed", "stop": "the task generates until the model stops",
    "stream": "lm-eval reads one JSON reply, not an event stream", "n": "lm-eval keeps one reply per request",
    "until": "lm-eval reads it as its own stop list", "do_sample": "lm-eval drops it",
    "max_gen_toks": "lm-eval reads it as max_tokens",
}


def require_lm_eval() -> None:
    """Refuse the lm-eval backend when the ``lmeval`` extra is missing (lm-eval, and PyYAML for ``write_task``);
    nothing is imported.

    Raises:
        OpError: a module missing (``extras.require_extra``: ``pip install 'inferencekit[lmeval]' (or make venv)``).
    """
    require_extra("lmeval", "--backend lm-eval")


def write_task(task_dir: Path, data_file: Path, *, name: str = TASK_NAME) -> Path:
    """Write the lm-eval task YAML ``<task_dir>/<name>.yaml`` for a local GSM8K JSONL file.

    Args:
        task_dir: folder given to lm-eval as ``--include_path`` (created).
        data_file: GSM8K JSONL (``{"question", "answer"}`` per line); recorded as an absolute path.
        name: the task name passed to ``--tasks``.

    Returns:
        The path of the YAML file.
    """
    task = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(Path(data_file).resolve())}},
        "test_split": "test",
        "output_type": "generate_until",
        "num_fewshot": 0,
        "doc_to_text": PROMPT_TEMPLATE.replace("{question}", "{{question}}"),
        "doc_to_target": "{{answer.split('####')[-1].strip()}}",
        # no stop strings: the reply ends where the model stops or at max_gen_toks
        "generation_kwargs": {"until": [], "do_sample": False, "temperature": 0.0},
        "repeats": 1,
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                         "ignore_case": True, "ignore_punctuation": False,
                         "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}],
        "filter_list": [
            {"name": "strict-match",
             "filter": [{"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
                        {"function": "take_first"}]},
            {"name": "flexible-extract",
             "filter": [{"function": "regex", "group_select": -1,
                         "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)"},
                        {"function": "take_first"}]},
        ],
        "metadata": {"version": 1.0},
    }
    import yaml  # the lmeval extra's (PyYAML): the CLI loads this module without it

    task_dir.mkdir(parents=True, exist_ok=True)
    path = task_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(task, sort_keys=False, allow_unicode=True, width=1000), encoding="utf-8")
    return path


def lm_eval_argv(*, base_url: str, model: str, task_dir: Path, task: str, limit: int | None, concurrency: int,
                 max_tokens: int, out_dir: Path, seed: int, chat_template_kwargs: Mapping[str, Any] | None = None,
                 extra_body: Mapping[str, Any] | None = None) -> list[str]:
    """The lm-eval command line: ``<this python> -m lm_eval run ...`` (a list for ``subprocess``).

    ``base_url`` is the server root, with or without ``/v1``; requests go to
    ``<root>/v1/chat/completions``. No tokenizer is loaded (``tokenizer_backend=None``), greedy
    (``temperature=0``), at most ``max_tokens`` generated tokens per reply, ``concurrency``
    requests in flight, ``seed`` for lm-eval's own seeds and the requests' ``seed`` field.
    ``limit`` None runs every problem. ``chat_template_kwargs`` and the ``extra_body`` fields that
    ``refused_settings`` does not name go into every request body (lm-eval copies unknown
    generation kwargs into the body); refused fields are left out. Model and generation arguments
    are passed as JSON so any model name survives. Holds no API key.

    Raises:
        OpError: ``base_url`` is not a usable http(s) URL.
    """
    root = normalize_base_url(base_url)
    model_args = {"model": model, "base_url": f"{root}/v1/chat/completions", "num_concurrent": int(concurrency),
                  "max_retries": 3, "tokenized_requests": False, "tokenizer_backend": None,
                  "max_gen_toks": int(max_tokens), "seed": int(seed)}
    gen_kwargs: dict[str, Any] = {k: v for k, v in (extra_body or {}).items() if k not in _REFUSED_FIELDS}
    if chat_template_kwargs:
        gen_kwargs["chat_template_kwargs"] = dict(chat_template_kwargs)
    gen_kwargs.update(temperature=0, do_sample=False, max_gen_toks=int(max_tokens))
    argv = [sys.executable, "-m", "lm_eval", "run",
            "--model", "local-chat-completions",
            "--model_args", json.dumps(model_args),
            "--apply_chat_template",
            "--include_path", str(task_dir),
            "--tasks", task,
            "--num_fewshot", "0",
            "--gen_kwargs", json.dumps(gen_kwargs),
            "--output_path", str(out_dir),
            "--log_samples",
            "--seed", str(int(seed))]
    if limit is not None:
        argv += ["--limit", str(int(limit))]
    return argv


def refused_settings(*, chat_template_kwargs: Mapping[str, Any] | None,
                     extra_body: Mapping[str, Any] | None) -> list[str]:
    """The settings this backend will not send, one sentence each naming the field (empty: all sent).

    lm-eval 0.4.13's ``local-chat-completions`` has no option of its own for
    ``chat_template_kwargs`` or extra fields, but it copies every generation kwarg it does not
    consume into the request body, so ``lm_eval_argv``/``run_lm_eval`` send ``chat_template_kwargs``
    and any other ``extra_body`` field that way. Refused: the ``extra_body`` fields that lm-eval
    sets itself or consumes (``messages``, ``model``, ``max_tokens``, ``temperature``, ``seed``,
    ``stop``, ``until``, ``do_sample``, ``max_gen_toks``) and those that break how it reads replies
    (``stream``, ``n``). ``chat_template_kwargs`` is never refused.
    """
    del chat_template_kwargs  # always passed through
    return [f"extra_body field {key!r} is not sent by the lm-eval backend: {_REFUSED_FIELDS[key]}"
            for key in sorted(extra_body or {}) if key in _REFUSED_FIELDS]


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _newest(folder: Path, pattern: str, since: float) -> Path | None:
    found = [p for p in folder.rglob(pattern) if p.stat().st_mtime >= since]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def run_lm_eval(*, base_url: str, model: str, data_file: Path, limit: int | None, concurrency: int,
                max_tokens: int, out_dir: Path, timeout_s: float, api_key_env: str | None, seed: int = 0,
                chat_template_kwargs: Mapping[str, Any] | None = None,
                extra_body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run lm-eval zero-shot GSM8K on ``data_file`` against the server at ``base_url``.

    Writes into ``out_dir``: ``task/<TASK_NAME>.yaml``, ``lm_eval.stdout.log``,
    ``lm_eval.stderr.log`` and lm-eval's own output under ``lm_eval/`` (``results_*.json`` and
    ``samples_<task>_*.jsonl``). The subprocess gets a sanitized environment: Hugging Face offline
    (``HF_DATASETS_OFFLINE``, ``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``), a fresh empty
    ``HF_HOME`` (deleted afterwards), no prompts, no inherited secrets. The API key, when
    ``api_key_env`` names a variable, reaches lm-eval as ``OPENAI_API_KEY`` in its environment only
    (never in argv or on disk); without one no key variable is set (lm-eval then sends an empty
    bearer token). ``timeout_s`` bounds the whole run, in seconds. ``chat_template_kwargs`` and
    ``extra_body``: as in ``lm_eval_argv`` (fields ``refused_settings`` names are not sent).

    Returns:
        ``parse_results`` of the results file plus ``results_path``, ``samples_path`` (str),
        ``argv`` (list[str]) and ``wall_s`` (float, seconds).

    Raises:
        OpError: lm-eval is not installed (with the pip command); the API key variable is unset;
            the run exits non-zero, times out or writes no results/samples file (with the last
            lines of its stderr).
    """
    require_lm_eval()
    key = read_api_key(api_key_env)
    out_dir = Path(out_dir).resolve()  # the subprocess runs in out_dir: every path it is given must be absolute
    data_file = Path(data_file).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    task_dir = out_dir / "task"
    write_task(task_dir, data_file)
    results_dir = out_dir / "lm_eval"
    argv = lm_eval_argv(base_url=base_url, model=model, task_dir=task_dir, task=TASK_NAME, limit=limit,
                        concurrency=concurrency, max_tokens=max_tokens, out_dir=results_dir, seed=seed,
                        chat_template_kwargs=chat_template_kwargs, extra_body=extra_body)
    stdout_path, stderr_path = out_dir / "lm_eval.stdout.log", out_dir / "lm_eval.stderr.log"
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    with tempfile.TemporaryDirectory(prefix="ik-lmeval-hf-") as hf_home:
        env.update(HF_HOME=hf_home, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   HF_HUB_DISABLE_TELEMETRY="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1", TOKENIZERS_PARALLELISM="false",
                   PYTHONUNBUFFERED="1", PIP_NO_INPUT="1", OMP_NUM_THREADS="1", NO_COLOR="1",
                   # lm-eval records `git describe` of its working folder: not of a repository around out_dir
                   GIT_CEILING_DIRECTORIES=str(out_dir.resolve().parent))
        if key is not None:
            env["OPENAI_API_KEY"] = key
        started = time.time()
        with open(stdout_path, "wb") as so, open(stderr_path, "wb") as se:
            try:
                proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=so, stderr=se, env=env,
                                      cwd=out_dir, timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired:
                raise OpError(f"lm-eval did not finish within {timeout_s:g} s (stopped); last lines of "
                              f"{stderr_path}:\n{_tail(stderr_path)}") from None
    wall_s = time.time() - started
    if proc.returncode != 0:
        raise OpError(f"lm-eval failed (exit {proc.returncode}); last lines of {stderr_path}:\n{_tail(stderr_path)}")
    results_path = _newest(results_dir, "results_*.json", started)
    samples_path = _newest(results_dir, f"samples_{TASK_NAME}_*.jsonl", started)
    if results_path is None or samples_path is None:
        raise OpError(f"lm-eval exited 0 but wrote no results or samples file under {results_dir}; last lines of "
                      f"{stderr_path}:\n{_tail(stderr_path)}")
    parsed = parse_results(json.loads(results_path.read_text(encoding="utf-8")), TASK_NAME)
    return {**parsed, "results_path": str(results_path), "samples_path": str(samples_path), "argv": argv,
            "wall_s": round(wall_s, 3)}


def parse_results(doc: Mapping[str, Any], task: str) -> dict[str, Any]:
    """The figures of ``task`` in lm-eval's results JSON.

    Returns:
        ``{"strict_accuracy", "strict_stderr", "flexible_accuracy", "flexible_stderr"}`` (floats in
        [0, 1], stderr None where lm-eval gave "N/A"), ``n`` (int, samples evaluated), ``n_original``
        (int, problems in the file), ``task_version``, ``lm_eval_version`` (str | None),
        ``git_hash`` (str | None), ``task_hash`` (str | None), ``gen_kwargs`` (dict, as lm-eval
        used them).

    Raises:
        OpError: ``task`` or its exact_match figures are missing from the document.
    """
    res = (doc.get("results") or {}).get(task)
    if not res:
        raise OpError(f"lm-eval results hold no task {task!r} (tasks: {sorted(doc.get('results') or {})})")
    out: dict[str, Any] = {}
    for flt, label in _FILTERS.items():
        acc = res.get(f"exact_match,{flt}")
        if not isinstance(acc, (int, float)):
            raise OpError(f"lm-eval results for {task!r} lack exact_match,{flt}")
        err = res.get(f"exact_match_stderr,{flt}")
        out[f"{label}_accuracy"] = float(acc)
        out[f"{label}_stderr"] = float(err) if isinstance(err, (int, float)) else None
    counts = (doc.get("n-samples") or {}).get(task) or {}
    config = (doc.get("configs") or {}).get(task) or {}
    out.update(n=counts.get("effective"), n_original=counts.get("original"),
               task_version=(doc.get("versions") or {}).get(task), lm_eval_version=doc.get("lm_eval_version"),
               git_hash=doc.get("git_hash"), task_hash=(doc.get("task_hashes") or {}).get(task),
               gen_kwargs=config.get("generation_kwargs"))
    return out


def parse_samples(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Per-problem rows from lm-eval's ``samples_<task>_*.jsonl`` (blank lines skipped), by ``doc_id``.

    Returns:
        ``[{"doc_id": int (0-based index in the data file), "target": str, "reply": str (the
        model's text), "strict": {"answer": str, "correct": bool}, "flexible": {...}}]``. An
        item's two filters are separate lines in lm-eval's file and are merged here.

    Raises:
        OpError: a line is not JSON or lacks doc_id/filter/exact_match.
    """
    rows: dict[int, dict[str, Any]] = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            s = json.loads(line)
            doc_id, flt, correct = int(s["doc_id"]), s["filter"], s["exact_match"]
        except (ValueError, KeyError, TypeError) as e:
            raise OpError(f"lm-eval samples line {i}: not a sample record ({e})") from None
        label = _FILTERS.get(flt, flt)
        resps = s.get("resps") or [[""]]
        row = rows.setdefault(doc_id, {"doc_id": doc_id, "target": str(s.get("target", "")),
                                       "reply": resps[0][0] if resps and resps[0] else ""})
        filtered = s.get("filtered_resps") or [""]
        row[label] = {"answer": filtered[0], "correct": float(correct) == 1.0}
    return [rows[k] for k in sorted(rows)]
