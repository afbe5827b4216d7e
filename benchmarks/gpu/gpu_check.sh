#!/usr/bin/env bash
# Every GPU check of one lent device in one command, each step time-boxed, so that a step that
# fails or hangs costs only its own box and the later steps still run:
#
#   bash benchmarks/gpu/gpu_check.sh CORPUS OUT_DIR
#
#   bench  benchmarks/gpu/gpu.py (BENCH_ARGS; default: small, base, large x 128, 512) against
#          `transformers`                                                        -> OUT/gpu.json
#   train  deepspeed electra/train.py --config large: STEPS steps on CORPUS (bf16, ZeRO-1), then
#          benchmarks/train/check.py (steps/s, memory, MFU, losses; the export loaded by
#          `transformers` against the checkpoint's masters), then the same command resumed for
#          RESUME_STEPS more steps                                               -> OUT/train.json
#   tests  the tests that need CUDA (skipped on a CPU)                           -> OUT/tests.log
#
# CHECKS picks and orders them (default "bench train tests"). CORPUS is a corpus packed at the
# preset's length (build-corpus --seq-len 512). Wheels in .whl/ (packages the device's image
# lacks) are installed first. A CPU dry run of the same steps:
#   WHEELS=none PRESET=tiny GLOBAL=16 MICRO=8 STEPS=20 RESUME_STEPS=4 BENCH_ARGS=--smoke \
#       bash benchmarks/gpu/gpu_check.sh CORPUS_AT_128 /tmp/out
set -u
CORPUS=${1:?usage: gpu_check.sh CORPUS OUT_DIR}
OUT=${2:?usage: gpu_check.sh CORPUS OUT_DIR}
PY=${PYTHON:-python3}
CHECKS=${CHECKS:-bench train tests}
PRESET=${PRESET:-large}; STEPS=${STEPS:-100}; RESUME_STEPS=${RESUME_STEPS:-10}
GLOBAL=${GLOBAL:-64}; MICRO=${MICRO:-32}; BENCH_ARGS=${BENCH_ARGS:-}
T_BENCH=${T_BENCH:-200}; T_TRAIN=${T_TRAIN:-150}; T_RESUME=${T_RESUME:-90}; T_TESTS=${T_TESTS:-120}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PREFECT_SERVER_ANALYTICS_ENABLED=false
stamp() { echo "== $(date +%T) $*"; }

WHEELS=${WHEELS:-.whl}
if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  stamp "installing $(ls "$WHEELS"/*.whl | wc -l) wheels into /tmp/site"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
fi
$PY -c "import torch, deepspeed, transformers; print('torch', torch.__version__, 'deepspeed', deepspeed.__version__, 'transformers', transformers.__version__)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset}"
  export DS_ACCELERATOR=cuda
  # DeepSpeed's FusedAdam is a JIT build on first use (minutes): once, outside the boxes, through
  # the trainer's own call
  stamp "building DeepSpeed's FusedAdam"
  timeout 240 $PY -c "
import torch
from electra.config import OptimizerConfig
from electra.run.optim import fused_adam
print(type(fused_adam([{'params': [torch.zeros(4, device='cuda', requires_grad=True)]}], OptimizerConfig())).__name__)
" 2>&1 | tail -n 3
fi

bench() {
  stamp "benchmarks/gpu/gpu.py $BENCH_ARGS"
  timeout "$T_BENCH" $PY benchmarks/gpu/gpu.py --json "$OUT/gpu.json" $BENCH_ARGS
  echo "exit $?"
}

RUN=$(mktemp -d)/run
launch() {  # launch(limit_s, max_steps): the same command both times; the second resumes
  timeout "$1" deepspeed --num_gpus 1 electra/train.py --config "$PRESET" --data "$CORPUS" --out "$RUN" \
    --max-steps "$2" --global-batch-size "$GLOBAL" --micro-batch "$MICRO" --log-every 10 --save-every "$STEPS" \
    --eval-every $((STEPS / 2)) --set optimizer.warmup_steps=10 --set optimizer.total_steps=1000
}
train() {
  stamp "deepspeed electra/train.py --config $PRESET, $STEPS steps, batch $GLOBAL (micro $MICRO)"
  launch "$T_TRAIN" "$STEPS" > "$OUT/train.log" 2>&1
  echo "exit $?"; grep -E "optimizer:|WARNING electra|Error" "$OUT/train.log" | head -n 5; tail -n 2 "$OUT/train.log"
  $PY benchmarks/train/check.py "$RUN" --json "$OUT/train.json"
  echo "exit $?"
  stamp "the same command to step $((STEPS + RESUME_STEPS)): resumes from step $STEPS"
  launch "$T_RESUME" $((STEPS + RESUME_STEPS)) > "$OUT/resume.log" 2>&1
  echo "exit $?"; grep -E "resum|Error" "$OUT/resume.log" | head -n 5; tail -n 2 "$OUT/resume.log"
  cp "$RUN/metrics.jsonl" "$OUT/metrics.jsonl" 2>/dev/null
  $PY - "$RUN" "$STEPS" "$RESUME_STEPS" <<'PYEOF'
import json, sys
run, steps, more = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
recs = [json.loads(x) for x in open(f"{run}/metrics.jsonl") if x.strip()]
after = [r["step"] for r in recs if r.get("kind") == "train" and r["step"] > steps]
print(f"resume: train records after step {steps}: {after} (want {steps + more} last)",
      "OK" if after and after[-1] == steps + more else "FAILED")
PYEOF
}

tests() {
  stamp "CUDA tests"
  timeout "$T_TESTS" $PY -m pytest -q -p no:cacheprovider -rs --timeout=120 tests/electra/model/test_numerics.py \
    "tests/electra/model/test_unpadding.py::test_cuda_unpadded_matches_padded" \
    "tests/electra/model/test_unpadding.py::test_cuda_varlen_flash_equals_attention_row_by_row" \
    "tests/electra/model/test_objective.py::test_masking_and_sampling_never_wait_for_the_host" \
    "tests/evaluation/test_finetune.py::test_same_code_on_cuda" \
    "tests/electra/test_train.py::test_precision_fallback_only_off_gpu" > "$OUT/tests.log" 2>&1
  echo "exit $?"; grep -E "^(FAILED|ERROR|E  )" "$OUT/tests.log" | head -n 20; tail -n 12 "$OUT/tests.log"
}

for check in $CHECKS; do "$check"; done
stamp done
