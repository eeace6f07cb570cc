#!/usr/bin/env bash
# The generation steps of a GPU run (staged next to `generate`, `generation`
# (the package's test executable), torch_generate.py and generate_report.py):
#
#   generation.sh check <outdir>
#       the GPU tests of the generation package (HIP vs CPU: 64 greedy steps,
#       bf16, the KV cache at prompts 1, 7, 512, 4096); the embedded default on
#       HIP; then Llama-3.2-1B-shaped seeded weights against Hugging Face
#       transformers on the same safetensors: greedy tokens identical for 128
#       steps in f32, logits within 5e-2 of the largest in bf16 while the
#       tokens agree. The GGUF tests (HIP vs CPU on the same quantized files) and
#       the static-cache tests (its step on HIP vs the CPU) run after the package
#       tests.
#   generation.sh bench <outdir> <shape> [batches] [prompt lengths]
#       writes the shape's seeded bf16 weights, then the generation benchmark of
#       candle-hip and of PyTorch eager on them, and the joined report
#       (<outdir>/generate-<shape>.md and .png).
#   generation.sh gguf-bench <outdir> <shape> [schemes] [batches]
#       writes the shape as a GGUF file per quantization scheme (default
#       q4_0,q8_0,q4k) and benchmarks each on HIP, then the bf16 model, rows to
#       <outdir>/gguf-<shape>.jsonl (prompt 128, 64 new tokens).
#   generation.sh gguf-graph <outdir> [shapes] [schemes]
#       each shape (default llama-3.2-1b) written as a GGUF file per scheme (default
#       q4_0,q8_0,q4k), decoded through a captured graph (--gguf --graph, bf16
#       activations) and through quantized_llama (eager, f32): batch 1, prompt 128,
#       128 new tokens; rows to <outdir>/gguf-graph.jsonl (Candle-CUDA's to
#       gguf-graph-candle-cuda.jsonl).
#   generation.sh graph <outdir> [shapes]
#       decode through a captured HIP graph (--graph) against eager decode (fused
#       attention, the default, and --no-flash-attn), for each shape (default
#       llama-3.2-1b,llama-3.1-8b; seeded bf16 weights built on the GPU), batch 1,
#       prompts of 128 and 2048 tokens, 128 new tokens; then PyTorch eager on the
#       1B shape's folder. Rows to <outdir>/graph.jsonl and graph-torch.jsonl.
#   generation.sh tp <outdir> [shapes]
#       tensor parallelism over two GPUs: the tensor_parallel tests, then for each
#       shape (default tiny,llama-3.1-8b; seeded bf16 weights built on the GPUs) 64
#       greedy steps at --tp 2 against --tp 1 (tokens identical, logits compared),
#       and decode/prefill tokens/s at tp 1 and 2 (rows to <outdir>/tp.jsonl).
#
# Candle-CUDA rows (Candle's own CUDA backend, crates.io candle 0.11.1 unmodified:
# tests/candle-cuda, staged as candle-cuda-bench.xz by `STAGE_CANDLE_CUDA=1 stage.sh`):
# when that binary is staged, bench, gguf-bench and graph also time it on the same
# files and shapes (rows to <outdir>/*-candle-cuda.jsonl; bench's report and
# gguf-bench's reports get its columns); when it is not, one line says so and
# nothing else changes. CANDLE_CUDA=0 skips it.
#
# Model folders go to $GENERATE_WORK (default /tmp/generate-models), not
# <outdir>: the 8B shape is 16 GB. Appends "step|status|-|-|-" rows to
# <outdir>/rows.txt; exits non-zero if a step failed.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="${1:-}"
out="${2:-}"
if [[ -z "$mode" || -z "$out" ]]; then
    echo "usage: $0 check|bench|gguf-bench|gguf-graph|graph|tp <outdir> [shape batches prompts | shape schemes batches | shapes]" >&2
    exit 2
fi
mkdir -p "$out"
work="${GENERATE_WORK:-/tmp/generate-models}"
mkdir -p "$work"
failures=0

# Runs a step logged to <outdir>/<log>.log and records its status.
step() {
    local log="$1" status
    shift
    echo "----- $log: $*"
    "$@" > "$out/$log.log" 2>&1
    status=$?
    tail -n 25 "$out/$log.log"
    if [[ $status -eq 0 ]]; then
        echo "generation $log|ok|-|-|-" >> "$out/rows.txt"
    else
        echo "generation $log|exit $status|-|-|-" >> "$out/rows.txt"
        failures=$((failures + 1))
    fi
    return $status
}

# candle-cuda-bench, when it is staged and not switched off (CANDLE_CUDA=0);
# stage.sh stages it xz-compressed, unpacked here into $work once.
candle_cuda=""
if [[ "${CANDLE_CUDA:-1}" != 0 && -x "$here/candle-cuda-bench" ]]; then
    candle_cuda="$here/candle-cuda-bench"
elif [[ "${CANDLE_CUDA:-1}" != 0 && -f "$here/candle-cuda-bench.xz" ]]; then
    if [[ ! -x "$work/candle-cuda-bench" || "$here/candle-cuda-bench.xz" -nt "$work/candle-cuda-bench" ]]; then
        xz -dc "$here/candle-cuda-bench.xz" > "$work/candle-cuda-bench.part" &&
            chmod +x "$work/candle-cuda-bench.part" &&
            mv "$work/candle-cuda-bench.part" "$work/candle-cuda-bench"
    fi
    [[ -x "$work/candle-cuda-bench" ]] && candle_cuda="$work/candle-cuda-bench"
elif [[ "${CANDLE_CUDA:-1}" != 0 && "$mode" =~ ^(bench|gguf-bench|gguf-graph|graph)$ ]]; then
    echo "note: candle-cuda-bench is not staged (STAGE_CANDLE_CUDA=1 stage.sh stages it);" \
        "no Candle-CUDA rows"
fi

# A Candle-CUDA step: logged and recorded like any step, but not counted as a failure of
# the run (Candle 0.11.1's own limits, such as its quantized path failing at batch > 1,
# are findings, not our failures).
cuda_step() {
    local before=$failures status
    step "$@"
    status=$?
    failures=$before
    return $status
}

# The weights of shape $1 in dtype $2, written once.
model_dir() {
    local dir="$work/$1-$2"
    if [[ ! -f "$dir/model.safetensors" ]]; then
        "$here/generate" write-model --shape "$1" --dtype "$2" --out "$dir" >&2 || return 1
    fi
    echo "$dir"
}

case "$mode" in
check)
    step tests "$here/generation" --include-ignored --nocapture --test-threads=1
    step gguf-tests "$here/gguf" --include-ignored --nocapture --test-threads=1
    step static-cache-tests "$here/static_cache" --include-ignored --nocapture --test-threads=1
    step embedded-default "$here/generate" --device hip --max-tokens 64
    prompt="128000,791,4062,14198,39935,35308,927,279,16053,5679"
    for dtype in f32 bf16; do
        dir="$(model_dir llama-3.2-1b "$dtype")" || { failures=$((failures + 1)); continue; }
        ours="$work/ours-$dtype.bin"
        ref="$work/torch-$dtype.bin"
        step "llama-3.2-1b-$dtype-ours" "$here/generate" --model "$dir" --dtype "$dtype" \
            --device hip --prompt-ids "$prompt" --max-tokens 128 --ignore-eos \
            --logits-out "$ours" --json
        step "llama-3.2-1b-$dtype-torch" python3 "$here/torch_generate.py" greedy \
            --model "$dir" --dtype "$dtype" --prompt-ids "$prompt" --max-tokens 128 --out "$ref"
        if [[ $dtype == f32 ]]; then
            step "llama-3.2-1b-f32-compare" python3 "$here/torch_generate.py" compare \
                --ours "$ours" --reference "$ref" --tokens 128
        else
            step "llama-3.2-1b-bf16-compare" python3 "$here/torch_generate.py" compare \
                --ours "$ours" --reference "$ref" --tokens 1 --rtol 5e-2
        fi
    done
    rm -rf "$work"/llama-3.2-1b-f32
    ;;
bench)
    shape="${3:?shape}"
    batches="${4:-1,8}"
    prompts="${5:-128,512,2048}"
    dir="$(model_dir "$shape" bf16)" || exit 1
    rm -f "$out/generate-$shape-ours.jsonl" "$out/generate-$shape-torch.jsonl"
    step "bench-$shape-ours" "$here/generate" bench --model "$dir" --dtype bf16 --device hip \
        --batch "$batches" --prompt-len "$prompts" --new-tokens 128 --iters 3 \
        --json "$out/generate-$shape-ours.jsonl"
    step "bench-$shape-torch" python3 "$here/torch_generate.py" bench --model "$dir" \
        --dtype bf16 --batch "$batches" --prompt-len "$prompts" --new-tokens 128 --iters 3 \
        --json "$out/generate-$shape-torch.jsonl"
    cuda_report=()
    if [[ -n "$candle_cuda" ]]; then
        rm -f "$out/generate-$shape-candle-cuda.jsonl"
        cuda_step "bench-$shape-candle-cuda" "$candle_cuda" bench --model "$dir" --dtype bf16 \
            --batch "$batches" --prompt-len "$prompts" --new-tokens 128 --iters 3 \
            --json "$out/generate-$shape-candle-cuda.jsonl"
        cuda_report=(--candle-cuda "$out/generate-$shape-candle-cuda.jsonl")
    fi
    python3 "$here/generate_report.py" "$out/generate-$shape-ours.jsonl" \
        "$out/generate-$shape-torch.jsonl" "$out/generate-$shape" \
        "$shape, bf16, 128 new tokens" "${cuda_report[@]}"
    ;;
gguf-bench)
    # Decode and prefill of one shape written as GGUF files in each scheme (written here:
    # no weights are carried), then the same shape in bf16, on HIP.
    shape="${3:?shape}"
    schemes="${4:-q4_0,q8_0,q4k}"
    batches="${5:-1,4}"
    rows="$out/gguf-$shape.jsonl"
    cuda_rows="$out/gguf-$shape-candle-cuda.jsonl"
    rm -f "$rows" "$cuda_rows"
    for scheme in ${schemes//,/ }; do
        file="$work/$shape-$scheme.gguf"
        [[ -f "$file" ]] || step "write-$shape-$scheme" "$here/generate" write-gguf \
            --shape "$shape" --quant "$scheme" --out "$file" || continue
        step "gguf-bench-$shape-$scheme" "$here/generate" bench --gguf "$file" --device hip \
            --batch "$batches" --prompt-len 128 --new-tokens 64 --iters 2 --json "$rows"
        if [[ -n "$candle_cuda" ]]; then
            cuda_step "gguf-bench-$shape-$scheme-candle-cuda" "$candle_cuda" bench --gguf "$file" \
                --batch "$batches" --prompt-len 128 --new-tokens 64 --iters 2 --json "$cuda_rows"
            python3 "$here/generate_report.py" "$rows" /dev/null "$out/gguf-$shape-$scheme" \
                "$shape, GGUF $scheme, 64 new tokens" --candle-cuda "$cuda_rows" --match "$file"
        fi
        rm -f "$file"
    done
    dir="$(model_dir "$shape" bf16)" || exit 1
    step "gguf-bench-$shape-bf16" "$here/generate" bench --model "$dir" --dtype bf16 \
        --device hip --batch "$batches" --prompt-len 128 --new-tokens 64 --iters 2 --json "$rows"
    if [[ -n "$candle_cuda" ]]; then
        cuda_step "gguf-bench-$shape-bf16-candle-cuda" "$candle_cuda" bench --model "$dir" \
            --dtype bf16 --batch "$batches" --prompt-len 128 --new-tokens 64 --iters 2 \
            --json "$cuda_rows"
        python3 "$here/generate_report.py" "$rows" /dev/null "$out/gguf-$shape-bf16" \
            "$shape, bf16, 64 new tokens" --candle-cuda "$cuda_rows" --match "$dir"
    fi
    ;;
gguf-graph)
    # Each shape written as GGUF files in each scheme, decoded through a captured graph
    # (--graph: the static-cache Llama with the matrices quantized, bf16 activations) and
    # through quantized_llama (eager, f32); batch 1, prompt 128, 128 new tokens.
    shapes="${3:-llama-3.2-1b}"
    schemes="${4:-q4_0,q8_0,q4k}"
    rows="$out/gguf-graph.jsonl"
    rm -f "$rows"
    for shape in ${shapes//,/ }; do
        for scheme in ${schemes//,/ }; do
            file="$work/$shape-$scheme.gguf"
            [[ -f "$file" ]] || step "write-$shape-$scheme" "$here/generate" write-gguf \
                --shape "$shape" --quant "$scheme" --out "$file" || continue
            step "gguf-graph-$shape-$scheme" "$here/generate" bench --gguf "$file" --graph \
                --dtype bf16 --device hip --batch 1 --prompt-len 128 --new-tokens 128 \
                --iters 2 --json "$rows"
            step "gguf-eager-$shape-$scheme" "$here/generate" bench --gguf "$file" \
                --device hip --batch 1 --prompt-len 128 --new-tokens 128 --iters 2 \
                --json "$rows"
            if [[ -n "$candle_cuda" ]]; then
                cuda_step "gguf-candle-cuda-$shape-$scheme" "$candle_cuda" bench --gguf "$file" \
                    --batch 1 --prompt-len 128 --new-tokens 128 --iters 2 \
                    --json "$out/gguf-graph-candle-cuda.jsonl"
            fi
            rm -f "$file"
        done
    done
    ;;
graph)
    shapes="${3:-llama-3.2-1b,llama-3.1-8b}"
    rows="$out/graph.jsonl"
    rm -f "$rows" "$out/graph-torch.jsonl"
    for shape in ${shapes//,/ }; do
        for mode in eager unfused graph; do
            flag=()
            [[ $mode == unfused ]] && flag=(--no-flash-attn)
            [[ $mode == graph ]] && flag=(--graph)
            step "graph-bench-$shape-$mode" "$here/generate" bench --shape "$shape" \
                --dtype bf16 --device hip --batch 1 --prompt-len 128,2048 --new-tokens 128 \
                --iters 2 "${flag[@]}" --json "$rows"
        done
    done
    dir="$(model_dir llama-3.2-1b bf16)" || exit 1
    step graph-bench-torch python3 "$here/torch_generate.py" bench --model "$dir" \
        --dtype bf16 --batch 1 --prompt-len 128,2048 --new-tokens 128 --iters 2 \
        --json "$out/graph-torch.jsonl"
    if [[ -n "$candle_cuda" ]]; then
        rm -f "$out/graph-candle-cuda.jsonl"
        cuda_step graph-bench-candle-cuda "$candle_cuda" bench --model "$dir" --dtype bf16 \
            --batch 1 --prompt-len 128,2048 --new-tokens 128 --iters 2 \
            --json "$out/graph-candle-cuda.jsonl"
    fi
    ;;
tp)
    shapes="${3:-tiny,llama-3.1-8b}"
    rows="$out/tp.jsonl"
    rm -f "$rows"
    step tp-tests "$here/tensor_parallel" --include-ignored --nocapture --test-threads=1
    # Byte ids: inside every vocabulary, the tiny byte-level one included.
    prompt="1,72,101,108,108,111,44,32,119,111"
    for shape in ${shapes//,/ }; do
        for tp in 1 2; do
            step "tp$tp-$shape-greedy" "$here/generate" --shape "$shape" --dtype bf16 \
                --device hip --tp "$tp" --prompt-ids "$prompt" --max-tokens 64 --ignore-eos \
                --logits-out "$work/tp$tp-$shape.bin" --json
        done
        step "tp-$shape-compare" python3 "$here/torch_generate.py" compare \
            --ours "$work/tp2-$shape.bin" --reference "$work/tp1-$shape.bin" --tokens 64
        for tp in 1 2; do
            step "tp$tp-$shape-bench" "$here/generate" bench --shape "$shape" --dtype bf16 \
                --device hip --tp "$tp" --batch "${TP_BATCHES:-1,8}" --prompt-len "${TP_PROMPTS:-128,2048}" --new-tokens 64 \
                --iters 2 --json "$rows"
        done
        rm -f "$work"/tp?-"$shape".bin*
    done
    ;;
*)
    echo "usage: $0 check|bench|gguf-bench|gguf-graph|graph|tp <outdir> ..." >&2
    exit 2
    ;;
esac
[[ $failures -eq 0 ]]
