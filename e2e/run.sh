#!/usr/bin/env bash
# `make e2e-llm`: the real chain against a small local model.
#   setup (cached) → start llama-cpp-python's OpenAI-compatible server on a free port →
#   run the harness with the product's own settings against a throwaway VAR_DIR →
#   stop the server by its process id, on success and on failure alike.
set -euo pipefail
cd "$(dirname "$0")/.."

E2E_DIR=${E2E_DIR:-.e2e}
APP_PY=${APP_PY:-.venv/bin/python}
E2E_VENV=${E2E_VENV:-$E2E_DIR/venv}
SERVER_PY="$E2E_VENV/bin/python"
# One thread: the machine is shared, and two threads under contention fell to 1 token/s.
N_THREADS=${E2E_THREADS:-1}
MODEL_ALIAS=smollm2-135m-instruct

E2E_DIR="$E2E_DIR" E2E_VENV="$E2E_VENV" bash e2e/setup.sh
MODEL_FILE=$("$SERVER_PY" e2e/model_path.py)
PORT=$("$APP_PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RUN_DIR="$E2E_DIR/run-$(date -u +%Y%m%d-%H%M%S)-$$"
mkdir -p "$RUN_DIR"

"$SERVER_PY" -m llama_cpp.server --model "$MODEL_FILE" --model_alias "$MODEL_ALIAS" \
  --chat_format chatml --n_ctx 4096 --n_threads "$N_THREADS" \
  --host 127.0.0.1 --port "$PORT" >"$RUN_DIR/server.log" 2>&1 &
SERVER_PID=$!
stop_server() {
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM

BASE_URL="http://127.0.0.1:$PORT/v1"
for _ in $(seq 1 120); do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "e2e: the model server exited during start-up:" >&2
    tail -n 30 "$RUN_DIR/server.log" >&2
    exit 1
  fi
  if "$APP_PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/models", timeout=1)' "$BASE_URL" 2>/dev/null; then
    break
  fi
  sleep 0.5
done
echo "e2e: model server pid $SERVER_PID on $BASE_URL (log: $RUN_DIR/server.log)" >&2

# The product's real settings, pointed at the throwaway run folder and the local server.
export VAR_DIR="$RUN_DIR/var"
export MEMORY_ROOT="$RUN_DIR/var/memory"
unset DATABASE_URL
export DJANGO_SETTINGS_MODULE=memoryadmin.settings
export TASKS_BACKEND=django_tasks.backends.immediate.ImmediateBackend
export MEMORY_REVIEW_MODE=${MEMORY_REVIEW_MODE:-auto}
export MEMORY_LLM_BASE_URL="$BASE_URL"
export MEMORY_LLM_MODEL="$MODEL_ALIAS"
export MEMORY_LLM_API_KEY=${MEMORY_LLM_API_KEY:-not-needed}
# This server refuses response_format=json_schema (HTTP 500); a forced tool call
# becomes a grammar, so function_calling is the method that works here.
export MEMORY_LLM_METHOD=${MEMORY_LLM_METHOD:-function_calling}
export MEMORY_LLM_MAX_TOKENS=${MEMORY_LLM_MAX_TOKENS:-512}
export MEMORY_LLM_TIMEOUT=${MEMORY_LLM_TIMEOUT:-300}
export MEMORY_LLM_MAX_RETRIES=${MEMORY_LLM_MAX_RETRIES:-0}

"$APP_PY" -m e2e.harness --run-dir "$RUN_DIR" "$@"
