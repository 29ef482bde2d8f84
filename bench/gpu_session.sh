# The GPU checks of one session, in one command, for a machine lent for minutes: what the
# machine is, the README's job (examples/gelu.hlo --check) launched on the GPU, the runtime
# table (bench/gpu_runtime.py: ours vs eager vs torch.compile, the programs with dots first),
# measured block sizes of the dot and attention templates (bench/tile_sweep.py), every corpus
# program run on the GPU against the reference evaluator (bench/gpu_corpus_check.py), the call
# paths only a GPU exercises (bench/gpu_paths_check.py) and host time per call.  Each step has
# its own time limit and writes its log and CSV under $OUT (default gpu_out/) as it goes, so a
# step cut short still leaves what it measured.  Runs from the checkout (PYTHONPATH), nothing
# installed: the machine's own torch, triton and numpy are used.
#
#   bash bench/gpu_session.sh    (defaults sum to 585 s: one device call of at most 600 s;
#   README_S RUNTIME_S SWEEP_S CORPUS_S TF32X3_CORPUS_S PATHS_S HOST_S set the steps' limits;
#   TF32X3_CORPUS_S=0 leaves out the programs with f32 dots checked as 3xTF32)
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export FUSION_KERNEL_CACHE_DIR=${FUSION_KERNEL_CACHE_DIR:-/tmp/fusion-kernel-cache}
export FUSION_MODULE_CACHE_DIR=${FUSION_MODULE_CACHE_DIR:-/tmp/fusion-module-cache}
unset TRITON_INTERPRET
PY=${PYTHON:-python3}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  "$PY" -c "import sys, torch, triton, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())"
  nproc
} 2>&1 | tee "$OUT/env.txt"

echo "== README job on the GPU"
timeout "${README_S:-25}" "$PY" -m triton_backend run examples/gelu.hlo --check 2>&1 \
  | tee "$OUT/readme_job.txt"

echo "== runtime"
timeout "${RUNTIME_S:-240}" "$PY" bench/gpu_runtime.py --csv "$OUT/gpu_runtime.csv" \
  --png "$OUT/gpu_runtime.png" 2>&1 | tee "$OUT/gpu_runtime.txt"

echo "== block sizes of the dot and attention templates, measured"
timeout "${SWEEP_S:-110}" "$PY" bench/tile_sweep.py --csv "$OUT/tile_sweep.csv" 2>&1 \
  | tee "$OUT/tile_sweep.txt"

echo "== corpus on the GPU"
timeout "${CORPUS_S:-90}" "$PY" bench/gpu_corpus_check.py --jobs "$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))" \
  --timeout 100 --csv "$OUT/gpu_corpus_check.csv" 2>&1 | tee "$OUT/gpu_corpus_check.txt"

if [ "${TF32X3_CORPUS_S:-30}" -gt 0 ]; then
  # Issue 26: may 3xTF32 be the f32 default?  bench/tf32x3_emulation.py says yes on the CPU.
  echo "== programs with f32 dots on the GPU as 3xTF32"
  timeout "${TF32X3_CORPUS_S:-30}" "$PY" bench/gpu_corpus_check.py --with-f32-dots \
    --jobs "$(( $(nproc) > 3 ? $(nproc) - 2 : 1 ))" --timeout 30 --f32-dot-precision tf32x3 \
    --csv "$OUT/gpu_corpus_tf32x3.csv" 2>&1 | tee "$OUT/gpu_corpus_tf32x3.txt"
fi

echo "== GPU-only call paths (CUDA graphs, torch op, library dots, TF32) vs the plain call"
timeout "${PATHS_S:-70}" "$PY" bench/gpu_paths_check.py 2>&1 | tee "$OUT/gpu_paths_check.txt"

echo "== host time per call (launches stubbed)"
timeout "${HOST_S:-20}" "$PY" bench/host_overhead.py --json > "$OUT/host_overhead.json" 2> "$OUT/host_overhead.err"
echo "== done"
