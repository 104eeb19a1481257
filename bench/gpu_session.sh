#!/usr/bin/env bash
# One device call's worth of TinyMoE measurements, on the GPU machine, with the runtime only.
#
#   bench/gpu_session.sh speed     # B2 and B32 side by side (Latch, its A/B builds, the
#                                  # torch.compile + CUDA-graph control), then launch profiles
#   bench/gpu_session.sh numerics  # the bf16 probes against float64 (bench/bf16_probe_gpu.py)
#   bench/gpu_session.sh workloads # looped B32 and selective B2 against their controls
#   bench/gpu_session.sh ab        # steps to time: B32 with $B32_AB, B2 with $B2_AB,
#                                  # each batch in both engine orders, then launch profiles
#                                  # of the B32 builds (default: -tilewise, both batches);
#                                  # B32_AB= or B2_AB= (empty) leaves that batch out, so
#                                  # the two batches can go in two calls
#
# Carry the artifacts the stage needs (run's `carry`): bench/artifacts/tinymoe196m for speed
# and workloads, bench/artifacts/bf16probe for numerics; build them here first:
#   python bench/tinymoe196m_build.py --builds b2-bf16,b32-bf16,$AB_BUILDS,b32-bf16-looped,b2-bf16-every16
# (AB_BUILDS: the b2-bf16-<switches> and b32-bf16-<switches> of each latch-<switches> in AB)
#   LATCH_CACHE=0 python bench/bf16_probe_build.py
# Each stage fits one call (600 s): the scripts' own budgets stop them in time, and every
# result is written by the script itself to bench/results/ and to $OUT (do not copy other
# files into $OUT: what comes back is limited).  LATCH_COMMIT (default: the checkout's
# HEAD, when git is there) names the commit in the records; AB (default below) the
# `latch-<switches>` engines run beside `latch`, whose builds must be among the artifacts.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=.:tests/py:bench
export LATCH_COMMIT="${LATCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
: "${OUT:=bench/results}"
: "${AB:=latch-onechunkloads,latch-loadpadding}"
ART=bench/artifacts/tinymoe196m
stage="${1:-speed}"
log() { echo "== $(date -u +%H:%M:%S) $*"; }

case "$stage" in
speed)
    engines="latch"
    [ -n "$AB" ] && engines="$engines,$AB"
    log "tinymoe_bench_gpu: B2, B32; engines $engines,torch-compile-graph"
    timeout 420 python bench/tinymoe_bench_gpu.py --batches 2,32 \
        --engines "$engines,torch-compile-graph" --iters 20 --curve-steps 50 --budget-s 390 \
        > "$OUT/session-speed.txt" 2>&1
    tail -30 "$OUT/session-speed.txt"
    for b in b32 b2; do
        log "launch profile $b"
        timeout 60 python bench/gpu_profile_launches.py "$ART/tinymoe196m-$b-bf16.latch" \
            --model "tinymoe-$b" --top 12 --repeats 3 2>&1 | tail -20
    done
    ;;
ab)
    : "${B32_AB:=latch-tilewise}" "${B2_AB:=latch-tilewise}"
    reversed() { echo "$1" | tr ',' '\n' | tac | paste -sd, -; }
    for spec in "32:$B32_AB:12:10:150" "2:$B2_AB:30:20:110"; do
        IFS=: read -r batch ab iters steps budget <<< "$spec"
        [ -z "$ab" ] && continue    # B32_AB= or B2_AB= leaves that batch out
        log "B$batch: latch,$ab,torch-compile-graph, then reversed"
        timeout $((budget + 30)) python bench/tinymoe_bench_gpu.py --batches "$batch" \
            --engines "latch,$ab,torch-compile-graph" --iters "$iters" --curve-steps "$steps" \
            --budget-s "$budget" 2>&1 | grep -E "^B$batch|WARNING|wrote"
        timeout $((budget + 30)) python bench/tinymoe_bench_gpu.py --batches "$batch" \
            --engines "$(reversed "$ab"),latch" --iters "$iters" --curve-steps "$steps" \
            --budget-s "$budget" 2>&1 | grep -E "^B$batch|WARNING|wrote"
    done
    [ -n "$B32_AB" ] && for e in latch ${B32_AB//,/ }; do
        suffix="${e#latch}"
        log "launch profile b32$suffix"
        timeout 60 python bench/gpu_profile_launches.py "$ART/tinymoe196m-b32-bf16$suffix.latch" \
            --model tinymoe-b32 --top 8 --repeats 3 2>&1 | tail -12
    done
    ;;
numerics)
    log "bf16 probes"
    timeout 560 python bench/bf16_probe_gpu.py 2>&1 | tail -40
    ;;
workloads)
    log "looped B32"
    timeout 330 python bench/tinymoe_bench_gpu.py --workloads looped-b32 \
        --engines latch,torch-compile-graph --iters 10 --curve-steps 0 --budget-s 300 2>&1 | tail -15
    log "selective B2"
    timeout 230 python bench/selective_gpu.py --cycles 2 2>&1 | tail -15
    ;;
*)
    echo "usage: bench/gpu_session.sh speed|numerics|workloads|ab" >&2
    exit 2
    ;;
esac
log "done"
