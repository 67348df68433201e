#!/usr/bin/env bash
# The 8-GPU check (docs/eight-gpu-check.md) in one command, from the repository root:
#   bash scripts/eight_gpu_check.sh OUT          # on the 8-GPU host: under 10 minutes
#   bash scripts/eight_gpu_check.sh OUT --cpu    # steps 2 and 3 on CPU (gloo), no GPU parts
# It needs python3 with torch (and nvidia-ml-py on the GPU host); specmon runs from this
# checkout (PYTHONPATH), so nothing is installed. Most important first: a step cut short by
# its timeout leaves the others their time. It writes at most 8 files into OUT:
#   nccl_sweep.jsonl, nccl_sweep.txt,      2. the all-reduce benchmark per NCCL setting,
#   ledger.sqlite3                            launched by specmon, and its ledger
#   probe_rank_check.json                  3. the probe across the TP ranks
#   agent_cost.json, gpu_check.json        1. the GPU agent on every GPU (GPU host only)
#   log.txt                                everything printed, in order
set -u -o pipefail
OUT=${1:?usage: bash scripts/eight_gpu_check.sh OUT [--cpu]}
MODE=${2:-gpu}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
exec > >(tee -a "$OUT/log.txt") 2>&1

# NVLink multicast stays off on shared hosts (the device machines' rule), in every process.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# specmon's own state and config in the work dir (and no platformdirs needed)
export SPECMON_STATE_DIR="$WORK/state" SPECMON_DATA_DIR="$WORK/data" SPECMON_CONFIG_DIR="$WORK"
PY=${PYTHON:-python3}
status=0

if [ "$MODE" = "--cpu" ]; then
    # a CPU run has no 10-minute limit to keep: generous timeouts for a busy machine
    # (RANKS, ITERS, BATCHES may be set smaller to try the script quickly)
    RANKS=${RANKS:-8} ITERS=${ITERS:-500} BATCHES=${BATCHES:-1,8,64}
    DEVICE=cpu SWEEP_S=3000 PROBE_S=1200 POINT_S=600
else
    RANKS=8 DEVICE=cuda ITERS=2000 BATCHES=1,2,4,8,16,32,64 SWEEP_S=330 PROBE_S=100 POINT_S=60
    "$PY" -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
    nvidia-smi -L
    nvidia-smi topo -m
fi

echo "== 2. all-reduce per NCCL setting, launched through specmon (local transport)"
cat > "$WORK/specmon.toml" <<EOF
[hosts.here]
transport = "local"
state_dir = "$WORK/runs"

[profiles.allreduce-tp8]
description = "TP8 decode-shaped all-reduce: bf16 7168 x batch"
command = ["{python}", "-m", "specmon.nccl_bench"]
model_path = "allreduce-h7168-bf16"
tp = $RANKS
gpu_agent = "none"
stop_grace_s = 10

[profiles.allreduce-tp8.env]
NCCL_DEBUG = "INFO"
NCCL_NVLS_ENABLE = "0"
SPECMON_NCCL_BENCH_DEVICE = "$DEVICE"
SPECMON_NCCL_BENCH_ITERS = "$ITERS"
SPECMON_NCCL_BENCH_BATCHES = "$BATCHES"
EOF
sweep() {  # one nccl-sweep into the shared ledger; JSON lines and progress appended
    timeout "$1" "$PY" -m specmon --config "$WORK/specmon.toml" nccl-sweep here \
        --profile allreduce-tp8 --run-timeout "$POINT_S" --ledger "$WORK/ledger.sqlite3" \
        --json "${@:2}" >> "$OUT/nccl_sweep.jsonl" 2>> "$OUT/nccl_sweep.txt" || status=1
}
# NCCL's own choice first (nothing set: the reference), then the 12 settings.
sweep "$((POINT_S + 30))" --grid NCCL_PROTO=unset
sweep "$SWEEP_S" --grid NCCL_PROTO=LL,LL128,Simple --grid NCCL_ALGO=Ring,Tree \
    --grid NCCL_P2P_LEVEL=unset,SYS
cp "$WORK/ledger.sqlite3" "$OUT/" 2>/dev/null
grep -v "^  launch:" "$OUT/nccl_sweep.txt" | tail -n 24
echo "-- NCCL's own lines naming the settings, counted over all runs (one per rank and run):"
cat "$WORK"/runs/runs/*/server.log 2>/dev/null \
    | grep -o "NCCL INFO NCCL_[A-Z0-9_]* set by environment to .*" | sort | uniq -c

echo "== 3. the probe in every TP rank of the EAGLE stand-in (verify all-reduces)"
timeout "$PROBE_S" "$PY" scripts/probe_rank_check.py --ranks "$RANKS" --device "$DEVICE" \
    --out "$WORK/probe" 2>&1 | grep -v "^\[specmon probe\]" || status=1
cp "$WORK/probe/probe_rank_check.json" "$OUT/" 2>/dev/null

if [ "$MODE" != "--cpu" ]; then
    echo "== 1a. agent CPU cost, measured on every GPU, next to nvidia-smi's loops"
    timeout 70 "$PY" benchmarks/agent_cost.py --out "$WORK/agent" --window 20 --warmup 5 \
        | tail -n 30 || status=1
    cp "$WORK/agent/agent_cost.json" "$OUT/" 2>/dev/null
    echo "== 1b. agent readings against torch and nvidia-smi, one load process per GPU"
    timeout 70 "$PY" scripts/gpu_check.py --out "$WORK/gpu" --ballast-gib 8 \
        --idle-seconds 3 --load-seconds 10 --after-seconds 4 > "$WORK/gpu_check.out" \
        || status=1
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); load=r.get("load", {}); print(json.dumps({"checks": load.get("checks"), "per_gpu": load.get("figures", {}).get("per_gpu"), "fallback_ok": r.get("fallback", {}).get("ok")}, indent=1))' \
        "$WORK/gpu/gpu_check.json"
    cp "$WORK/gpu/gpu_check.json" "$OUT/" 2>/dev/null
fi
exit $status
