// Decode kernels of candle-hip, timed on the NVIDIA test platform with their
// sources compiled the way the shim compiles them (NVRTC, the replacement
// headers of ../headers, -DCANDLE_HIP_WAVE=32), so that variants of a kernel
// source can be compared in one run without rebuilding any Rust binary.
//
//   nvcc -O2 -std=c++17 kernel_bench.cu -lnvrtc -lcuda -o kernel_bench
//   ./kernel_bench <headers dir> <kernels dir> gemv VARIANT...
//   ./kernel_bench <headers dir> <kernels dir> attn VARIANT...
//   ./kernel_bench <headers dir> <kernels dir> prefill VARIANT...
//   ./kernel_bench <headers dir> <kernels dir> qmv VARIANT...
//   ./kernel_bench <headers dir> <kernels dir> dq VARIANT...
//
// VARIANT: path/to/source.hip[:NAME=VALUE,...][@A,B[,C[,D]]]: a gemv.hip or
// attention.hip (a copy with changes, or the repository's), compiled with
// the given -D definitions. gemv: A waves per block (8), B blocks per
// compute unit (4), C the waves per output (0: the host's rule). attn: A
// threads per block (128), B blocks per compute unit (3), C query rows per
// block (16); prefill: A waves per block (4; B, C unused); qmv (a quantized.hip): A waves per block of the mat-vec (4), B
// activations per thread of their rounding (8; 0: one activation block per
// thread), C rows of activations (1), D outputs per wave (2). A source that
// takes other values than its defaults must define them from the -D options.
//
// gemv: gemv_fused_bf16 at the Llama-3.2-1B and Llama-3.1-8B decode shapes
// (batch 1): the norm+qkv, o+residual, norm+gate/up, down+residual,
// norm+lm_head and SwiGLU+down+residual products, each launched once per
// layer over that layer's own weights (so they stream from memory, as in a
// decode step) inside one CUDA graph; then a whole token's products (every
// layer's four and the head) in one graph, against the weight-streaming
// bound (weight bytes / the copy rate). attn: flash_decode_d<D>_bf16 and
// its merge for one query over Llama-3 heads (32 query, 8 key/value; head
// dimension 64 as Llama-3.2-1B, 128 as Llama-3.1-8B) at several cache
// lengths, full or filled to a length read on the device (as the static
// decode step runs it), with and without the merge (one split writes the
// output itself and has none, unless KERNEL_BENCH_NO_DIRECT is set). prefill:
// flash_attn_d<D>_bf16 at the shapes of the attention benchmark (32 heads of
// 128, causal and not, 512 to 16k tokens) and Llama-3.2-1B's (32 query, 8
// key/value heads of 64), in TFLOP/s (4·b·h·s²·d, halved when causal). qmv: quantized.rs's
// mat-vec (activation rounding, then qmatvec, or qmatvec_few for up to 2
// rows where the source has it; with KERNEL_BENCH_QMV_STEP each with the
// graph decode step's norm, SwiGLU and residual; with KERNEL_BENCH_QMV_NO_ACT
// without the rounding's launches, =empty with an empty kernel on the
// rounding's grid in their place; KERNEL_BENCH_QMV_SPLIT=1 leaves the
// split kernels of long rows out) for q4_0, q8_0, q4k, q5k and q6k
// weights at the same decode shapes, per layer and for a whole token
// against the bound (quantized weight bytes / the copy rate). dq (a
// quantized.hip, A B C unused): dequantization to bf16 of each shape's
// gate/up weight, as prefill runs it, against the copy rate, for every
// block type candle-core reads (quantized.rs `dequantize`). Every
// variant's output is compared with the first variant's. The launch rules
// mirror the host's: ops/gemv.rs `split` and `launch_config`,
// fused/linear.rs's grid cap and shared memory, fused/attention.rs's
// `decode_splits` and quantized.rs's `matvec` (and the prefill grid, 16
// query rows per wave); change them here when they change there.
// KERNEL_BENCH_SHAPE=<name,...> times only those shapes (gemv, qmv) or cases
// (attn, prefill: names as printed), KERNEL_BENCH_QTYPE=<name,...> only those
// block types (qmv: q4_0, q8_0, q4k, q5k, q6k; dq: any); KERNEL_BENCH_COMPILE_ONLY=1 only compiles
// (no GPU needed); KERNEL_BENCH_PTXAS=1 prints ptxas's registers and spills
// per kernel; KERNEL_BENCH_CUBIN=<file> writes the last compiled variant's
// code object there (for `cuobjdump -sass`).
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#define CHECK_CUDA(x)                                                                 \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)
#define CHECK_CU(x)                                                       \
  do {                                                                    \
    CUresult e = (x);                                                     \
    if (e != CUDA_SUCCESS) {                                              \
      const char* s = "?";                                                \
      cuGetErrorString(e, &s);                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s);      \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

static std::string g_headers, g_kernels;
static int g_sms;

static std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    fprintf(stderr, "cannot read %s\n", path.c_str());
    exit(1);
  }
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A parsed VARIANT argument.
struct Variant {
  std::string file, label;
  std::vector<std::string> defines;
  int a = 0, b = 0, c = 0, d = 1;

  // The column heading: the file's name and A,B,C (C left out when 0 and
  // `c_optional`, gemv's "the host's rule"), then D unless it is 1.
  std::string heading(bool c_optional) const {
    std::string h = label + "@" + std::to_string(a) + "," + std::to_string(b);
    h = c_optional && c == 0 ? h : h + "," + std::to_string(c);
    return d == 1 ? h : h + "," + std::to_string(d);
  }
};

static bool compile_only() { return getenv("KERNEL_BENCH_COMPILE_ONLY") != nullptr; }
// qmv: each product with its decode-step input and residual (launch_qmv).
static bool qmv_step() { return getenv("KERNEL_BENCH_QMV_STEP") != nullptr; }
// qmv: the mat-vecs alone, on activations rounded before the timing (what
// the rounding's launches cost is the difference).
static bool qmv_no_act() { return getenv("KERNEL_BENCH_QMV_NO_ACT") != nullptr; }
// qmv with KERNEL_BENCH_QMV_NO_ACT=empty: an empty kernel on the rounding's
// grid instead (what any launch there costs).
static bool qmv_empty_act() {
  const char* mode = getenv("KERNEL_BENCH_QMV_NO_ACT");
  return mode != nullptr && std::string(mode) == "empty";
}
__global__ void kb_empty() {}

static Variant parse_variant(std::string arg, int a, int b, int c, int d = 1) {
  Variant v;
  v.a = a, v.b = b, v.c = c, v.d = d;
  v.label = arg.substr(arg.rfind('/') + 1);
  size_t at = arg.find('@');
  if (at != std::string::npos) {
    sscanf(arg.c_str() + at + 1, "%d,%d,%d,%d", &v.a, &v.b, &v.c, &v.d);
    arg = arg.substr(0, at);
  }
  size_t colon = arg.find(':');
  if (colon != std::string::npos) {
    std::string defs = arg.substr(colon + 1);
    arg = arg.substr(0, colon);
    for (size_t p = 0; p < defs.size();) {
      size_t q = std::min(defs.find(',', p), defs.size());
      v.defines.push_back("-D" + defs.substr(p, q - p));
      p = q + 1;
    }
  }
  v.file = arg;
  return v;
}

// Compiles `path` as the shim compiles a hipRTC program (CUDA's headers from
// /usr/local/cuda or $CUDA_HOME); with
// KERNEL_BENCH_COMPILE_ONLY set, only compiles (no GPU needed) and returns null.
static CUmodule compile(const std::string& path, std::vector<std::string> options) {
  std::string src = "#include <hip/hip_runtime.h>\n#line 1 \"" + path + "\"\n" + read_file(path);
  nvrtcProgram prog;
  nvrtcCreateProgram(&prog, src.c_str(), path.c_str(), 0, nullptr, nullptr);
  for (const char* o : {"-DCANDLE_HIP_WAVE=32", "--gpu-architecture=sm_90", "-std=c++17",
                        "-I/usr/local/cuda/include"})
    options.push_back(o);
  if (const char* cuda = getenv("CUDA_HOME")) options.push_back(std::string("-I") + cuda + "/include");
  options.push_back("-I" + g_headers);
  options.push_back("-I" + g_kernels);
  const bool ptxas_report = getenv("KERNEL_BENCH_PTXAS") != nullptr;
  if (ptxas_report) options.push_back("--ptxas-options=-v");
  std::vector<const char*> argv;
  for (auto& o : options) argv.push_back(o.c_str());
  nvrtcResult r = nvrtcCompileProgram(prog, (int)argv.size(), argv.data());
  size_t log_size;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  nvrtcGetProgramLog(prog, &log[0]);
  if (r != NVRTC_SUCCESS) {
    fprintf(stderr, "compiling %s failed:\n%s\n", path.c_str(), log.c_str());
    exit(1);
  }
  if (ptxas_report) printf("%s: ptxas report\n%s\n", path.c_str(), log.c_str());
  size_t size;
  nvrtcGetCUBINSize(prog, &size);
  std::vector<char> cubin(size);
  nvrtcGetCUBIN(prog, cubin.data());
  nvrtcDestroyProgram(&prog);
  if (const char* out = getenv("KERNEL_BENCH_CUBIN")) {
    FILE* f = fopen(out, "wb");
    if (f == nullptr || fwrite(cubin.data(), 1, size, f) != size) {
      fprintf(stderr, "writing %s failed\n", out);
      exit(1);
    }
    fclose(f);
  }
  if (compile_only()) {
    printf("compiled %s: %zu bytes\n", path.c_str(), size);
    return nullptr;
  }
  CUmodule m;
  CHECK_CU(cuModuleLoadData(&m, cubin.data()));
  return m;
}

static CUfunction function(CUmodule m, const char* name) {
  CUfunction f;
  CHECK_CU(cuModuleGetFunction(&f, m, name));
  return f;
}

static int registers(CUfunction f) {
  int r = 0;
  cuFuncGetAttribute(&r, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
  return r;
}

static float bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// n bf16 values in [-0.5, 0.5) from a hash of their index and `seed`.
static void fill(uint16_t* device, size_t n, uint32_t seed) {
  std::vector<uint16_t> host(1 << 20);
  for (size_t off = 0; off < n; off += host.size()) {
    size_t count = std::min(host.size(), n - off);
    for (size_t i = 0; i < count; ++i) {
      uint32_t x = (uint32_t)(off + i) * 2654435761u ^ seed;
      x ^= x >> 15;
      x *= 2246822519u;
      x ^= x >> 13;
      float f = ((x & 0xffff) / 32768.0f - 1.0f) * 0.5f;
      uint32_t bits;
      memcpy(&bits, &f, 4);
      host[i] = (uint16_t)(bits >> 16);
    }
    CHECK_CUDA(cudaMemcpy(device + off, host.data(), count * 2, cudaMemcpyHostToDevice));
  }
}

// GB/s read + written by a 1 GiB device-to-device copy (as the generation
// program's copy_gb_per_s counts it).
static double copy_rate() {
  size_t bytes = 1ull << 30;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEventRecord(e0);
  for (int i = 0; i < 10; ++i) CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * 10 / (ms * 1e-3) / 1e9;
}

// Captures `launches()` into a graph and returns the median of `reps`
// replays, in microseconds.
template <typename F>
static double time_graph(cudaStream_t s, F launches, int reps = 20) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  launches();
  CHECK_CUDA(cudaStreamEndCapture(s, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> times;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(e0, s);
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return times[times.size() / 2] * 1e3;
}

// The Llama shapes whose decode products the gemv and qmv modes time.
struct DecodeShape {
  const char* name;
  int layers;
  uint32_t hidden, inter, q, kv, vocab;
};
static const DecodeShape kDecodeShapes[] = {{"llama-3.2-1b", 16, 2048, 8192, 2048, 512, 128256},
                                            {"llama-3.1-8b", 32, 4096, 14336, 4096, 1024, 128256}};

// Whether the environment variable `var` (unset: everything) names `name`,
// alone or in a comma-separated list.
static bool env_selects(const char* var, const char* name) {
  const char* only = getenv(var);
  if (only == nullptr) return true;
  const std::string list = std::string(",") + only + ",";
  return list.find(std::string(",") + name + ",") != std::string::npos;
}

// Whether KERNEL_BENCH_SHAPE names the shape or case.
static bool selected(const char* name) { return env_selects("KERNEL_BENCH_SHAPE", name); }

// Whether KERNEL_BENCH_QTYPE names the block type (qmv, dq).
static bool qtype_selected(const char* name) { return env_selects("KERNEL_BENCH_QTYPE", name); }

// ---------------------------------------------------------------------------
// gemv_fused

struct Product {
  const char* name;
  uint32_t n, k, input;  // input: CH_GEMV_INPUT_* of gemv.hip
  bool residual;
};

// ops/gemv.rs `split` at 32-lane waves, CH_GEMV_UNROLL 4, bf16.
static int host_split(size_t n, size_t k) {
  size_t packs = k / 8, cap = std::min<size_t>(std::min<size_t>(packs / (32 * 4), 16), 1024 / 32);
  size_t wanted = (size_t)g_sms * 16;
  int s = 1;
  while ((size_t)s * 2 <= cap && n * s < wanted) s *= 2;
  return s;
}

static void launch_gemv(const Variant& v, CUfunction f, cudaStream_t s, const Product& p, uint16_t* x,
                        uint16_t* w, uint16_t* y, uint16_t* norm_w, uint16_t* residual) {
  int split = v.c ? v.c : host_split(p.n, p.k);
  int waves = std::max(v.a, split);
  uint32_t blocks = (p.n + waves / split - 1) / (waves / split);
  blocks = std::min<uint32_t>(blocks, g_sms * v.b);
  // Room for k staged elements whatever the input (a source that stages a
  // plain x needs it; fused/linear.rs passes none where gemv.hip reads x in
  // place, which only matters for occupancy).
  uint32_t shared = ((p.k * 2 + 15) / 16) * 16;
  uint64_t stride = p.k;
  uint32_t sp = split, input = p.input, n = p.n, k = p.k;
  float eps = 1e-5f;
  void* nw = p.input == 1 ? (void*)norm_w : nullptr;
  void* res = p.residual ? (void*)residual : nullptr;
  void* args[] = {&x, &w, &y, &n, &k, &stride, &sp, &input, &nw, &eps, &res};
  CHECK_CU(cuLaunchKernel(f, blocks, 1, 1, waves * 32, 1, 1, shared, s, args, nullptr));
}

static void gemv_bench(const std::vector<Variant>& variants) {
  std::vector<CUfunction> fns;
  for (auto& v : variants) {
    auto defs = v.defines;
    defs.push_back("-DCH_ONLY_DTYPES=(1<<CH_DTYPE_bf16)");
    CUmodule m = compile(v.file, defs);
    fns.push_back(m ? function(m, "gemv_fused_bf16") : nullptr);
  }
  if (compile_only()) return;
  double rate = copy_rate();
  printf("copy rate %.0f GB/s, %d SMs; us per launch (GB/s, %% of the copy rate)\n", rate, g_sms);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (const DecodeShape& sh : kDecodeShapes) {
    if (!selected(sh.name)) continue;
    // The first four are a layer's products in order; the SwiGLU variant
    // of the down product reuses the down weights.
    const Product products[] = {{"norm+qkv", sh.q + 2 * sh.kv, sh.hidden, 1, false},
                                {"o+res", sh.hidden, sh.q, 0, true},
                                {"norm+gate/up", 2 * sh.inter, sh.hidden, 1, false},
                                {"down+res", sh.hidden, sh.inter, 0, true},
                                {"norm+lm_head", sh.vocab, sh.hidden, 1, false},
                                {"swiglu+down+res", sh.hidden, sh.inter, 2, true}};
    size_t offset_in_layer[4], layer = 0;
    for (int i = 0; i < 4; ++i) {
      offset_in_layer[i] = layer;
      layer += (size_t)products[i].n * products[i].k;
    }
    const size_t head = layer * sh.layers, total = head + (size_t)sh.vocab * sh.hidden;
    auto weights_of = [&](int product, int l) {
      if (product == 4) return head;
      return layer * l + offset_in_layer[product == 5 ? 3 : product];
    };
    uint16_t *w, *x, *y, *norm_w, *residual;
    const size_t vec = 2 * sh.inter + sh.vocab;
    CHECK_CUDA(cudaMalloc(&w, total * 2));
    CHECK_CUDA(cudaMalloc(&x, vec * 2));
    CHECK_CUDA(cudaMalloc(&y, vec * 2));
    CHECK_CUDA(cudaMalloc(&norm_w, vec * 2));
    CHECK_CUDA(cudaMalloc(&residual, vec * 2));
    fill(w, total, 7);
    fill(x, vec, 1);
    fill(norm_w, vec, 2);
    fill(residual, vec, 3);
    printf("\n%s (%d layers, bf16, batch 1)\n%-16s %6s %6s %5s", sh.name, sh.layers, "product", "n", "k", "split");
    for (auto& v : variants) printf(" | %-24s", v.heading(true).c_str());
    printf("\n");
    for (int pi = 0; pi < 6; ++pi) {
      const Product& p = products[pi];
      printf("%-16s %6u %6u %5d", p.name, p.n, p.k, host_split(p.n, p.k));
      const int count = pi == 4 ? 4 : sh.layers;
      for (size_t vi = 0; vi < variants.size(); ++vi) {
        double us = time_graph(s, [&] {
                      for (int l = 0; l < count; ++l)
                        launch_gemv(variants[vi], fns[vi], s, p, x, w + weights_of(pi, l), y, norm_w, residual);
                    }) / count;
        double gbs = (double)p.n * p.k * 2 / (us * 1e-6) / 1e9;
        printf(" | %7.2f us %5.0f %4.0f%%", us, gbs, 100 * gbs / rate);
      }
      printf("\n");
    }
    const double bound_us = total * 2 / (rate * 1e9) * 1e6;
    printf("%-35s", "a token's products");
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      double us = time_graph(s, [&] {
        for (int l = 0; l < sh.layers; ++l)
          for (int pi = 0; pi < 4; ++pi)
            launch_gemv(variants[vi], fns[vi], s, products[pi], x, w + weights_of(pi, l), y, norm_w, residual);
        launch_gemv(variants[vi], fns[vi], s, products[4], x, w + head, y, norm_w, residual);
      }, 10);
      printf(" | %8.1f us %5.1f%% bound ", us, 100 * bound_us / us);
    }
    printf("\nbound %.1f us (%.2f GB of weights at the copy rate); registers:", bound_us, total * 2 / 1e9);
    for (auto f : fns) printf(" %d", registers(f));
    printf("\n");
    for (int pi = 0; pi < 6; ++pi) {
      const Product& p = products[pi];
      std::vector<uint16_t> first(p.n), got(p.n);
      for (size_t vi = 0; vi < variants.size(); ++vi) {
        CHECK_CUDA(cudaMemset(y, 0, p.n * 2));
        launch_gemv(variants[vi], fns[vi], s, p, x, w + weights_of(pi, 0), y, norm_w, residual);
        CHECK_CUDA(cudaStreamSynchronize(s));
        CHECK_CUDA(cudaMemcpy(vi == 0 ? first.data() : got.data(), y, p.n * 2, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (uint32_t i = 0; vi > 0 && i < p.n; ++i) {
          float a = bf16_to_float(first[i]), b = bf16_to_float(got[i]);
          worst = std::max(worst, (double)fabsf(a - b) / (fabsf(a) + 1e-2));
        }
        if (worst > 2e-2) printf("MISMATCH: %s of variant %zu, relative %.3g\n", p.name, vi, worst);
      }
    }
    cudaFree(w), cudaFree(x), cudaFree(y), cudaFree(norm_w), cudaFree(residual);
  }
}

// Prints a line for each variant whose bf16 output differs from the first
// variant's by more than 1e-2 somewhere.
static void report_mismatches(const std::vector<std::vector<uint16_t>>& outs) {
  for (size_t vi = 1; vi < outs.size(); ++vi) {
    double worst = 0;
    for (size_t i = 0; i < outs[0].size(); ++i)
      worst = std::max(worst, (double)fabsf(bf16_to_float(outs[0][i]) - bf16_to_float(outs[vi][i])));
    if (worst > 1e-2) printf("MISMATCH: variant %zu, absolute %.3g\n", vi, worst);
  }
}

// ---------------------------------------------------------------------------
// flash_decode

// AttnArgs of attention.hip.
struct AttnArgs {
  uint64_t q_stride[3], k_stride[3], v_stride[3];
  uint32_t s_q, s_k, h_q, h_k;
  int32_t win_left, win_right;
  float scale, softcap;
  uint32_t split_keys, splits;
};
static_assert(sizeof(AttnArgs) == 9 * 8 + 10 * 4, "AttnArgs layout");

// Each variant's bf16 kernels <prefix>_d64_bf16 and <prefix>_d128_bf16 of
// an attention.hip (null when only compiling): [prefix][0 for d64, 1 for
// d128][variant].
typedef std::vector<std::vector<CUfunction>> ByDim;
static std::vector<ByDim> attention_kernels(const std::vector<Variant>& variants,
                                            const std::vector<std::string>& prefixes) {
  std::vector<ByDim> out(prefixes.size(), ByDim(2));
  for (auto& v : variants) {
    auto defs = v.defines;
    defs.push_back("-DCH_ONLY_DTYPES=(1<<CH_DTYPE_bf16)");
    CUmodule m = compile(v.file, defs);
    for (size_t pi = 0; pi < prefixes.size(); ++pi)
      for (int di = 0; di < 2; ++di) {
        std::string name = prefixes[pi] + (di == 0 ? "_d64_bf16" : "_d128_bf16");
        out[pi][di].push_back(m ? function(m, name.c_str()) : nullptr);
      }
  }
  return out;
}

static void attn_bench(const std::vector<Variant>& variants) {
  const std::vector<ByDim> kernels = attention_kernels(variants, {"flash_decode", "flash_combine"});
  const ByDim &decode = kernels[0], &merge = kernels[1];
  if (compile_only()) return;
  double rate = copy_rate();
  printf("copy rate %.0f GB/s, %d SMs\n", rate, g_sms);
  printf("flash_decode_d<D>_bf16 + merge, one query, 32 query / 8 key-value heads, a cache of `cache` "
         "positions filled to `filled`: us per call (decode alone; GB/s of the K and V read, %% of "
         "the copy rate, splits)\n%-24s", "case");
  for (auto& v : variants) printf(" | %-36s", v.heading(false).c_str());
  printf("\n");
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int hq = 32, hk = 8;
  const struct {
    int d, batch, keys, filled;  // filled 0: all
  } cases[] = {{64, 1, 256, 200},     {64, 1, 512, 400},    {64, 1, 2304, 2100},  {128, 1, 256, 200},
               {128, 1, 512, 400},    {128, 1, 2304, 2100},
               {128, 1, 1024, 0},     {128, 1, 4096, 0},    {128, 1, 32768, 0}, {128, 8, 4096, 0},
               {128, 1, 131072, 0}};
  for (auto& c : cases) {
    const int d = c.d, di = d == 64 ? 0 : 1;
    const int filled = c.filled ? c.filled : c.keys;
    char name[64];
    snprintf(name, sizeof name, "d%d b%d cache %d/%d", d, c.batch, filled, c.keys);
    if (!selected(name)) continue;
    const size_t kv = (size_t)c.batch * c.keys * hk * d, read = (size_t)c.batch * filled * hk * d;
    const int copies = std::max(1, (int)(400e6 / (kv * 4)));  // >= 400 MB of K and V cycled
    uint16_t *k, *v, *q, *o;
    float* part;
    uint32_t* lens;
    CHECK_CUDA(cudaMalloc(&k, kv * 2 * copies));
    CHECK_CUDA(cudaMalloc(&v, kv * 2 * copies));
    CHECK_CUDA(cudaMalloc(&q, (size_t)c.batch * hq * d * 2));
    CHECK_CUDA(cudaMalloc(&o, (size_t)c.batch * hq * d * 2));
    CHECK_CUDA(cudaMalloc(&part, (size_t)c.batch * hq * 256 * (d + 2) * 4));
    CHECK_CUDA(cudaMalloc(&lens, c.batch * 4));
    std::vector<uint32_t> host_lens(c.batch, (uint32_t)filled);
    CHECK_CUDA(cudaMemcpy(lens, host_lens.data(), c.batch * 4, cudaMemcpyHostToDevice));
    fill(k, kv * copies, 11);
    fill(v, kv * copies, 12);
    fill(q, (size_t)c.batch * hq * d, 13);
    printf("%-24s", name);
    std::vector<std::vector<uint16_t>> outs;
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      const Variant& var = variants[vi];
      AttnArgs a{};
      a.q_stride[0] = a.q_stride[1] = (uint64_t)hq * d, a.q_stride[2] = d;
      a.k_stride[0] = (uint64_t)c.keys * hk * d, a.k_stride[1] = (uint64_t)hk * d, a.k_stride[2] = d;
      memcpy(a.v_stride, a.k_stride, sizeof a.k_stride);
      a.s_q = 1, a.s_k = c.keys, a.h_q = hq, a.h_k = hk;
      a.win_left = 0x3fffffff, a.win_right = 0;
      a.scale = 1.0f / sqrtf((float)d), a.softcap = 0;
      // fused/attention.rs decode_splits over the cache's positions
      // (MIN_SPLIT_KEYS 64, or $KERNEL_BENCH_MIN_SPLIT_KEYS; MAX_SPLITS 256).
      const char* min_keys_var = getenv("KERNEL_BENCH_MIN_SPLIT_KEYS");
      const int min_keys = min_keys_var ? atoi(min_keys_var) : 64;
      const int row_groups = (hq / hk + var.c - 1) / var.c, blocks = c.batch * hk * row_groups;
      const int wanted = var.b * g_sms / blocks;
      int splits = std::max(1, std::min(wanted, std::min(256, std::max(1, (c.keys + min_keys - 1) / min_keys))));
      const int split_keys = (c.keys + splits - 1) / splits;
      splits = (c.keys + split_keys - 1) / split_keys;
      a.split_keys = split_keys, a.splits = splits;
      // One split writes the output itself (fused/attention.rs), where the
      // source's decode kernel takes `o`; others ignore the argument.
      const bool direct = splits == 1 && getenv("KERNEL_BENCH_NO_DIRECT") == nullptr;
      auto call = [&](int copy, bool with_merge) {
        uint16_t *kc = k + kv * copy, *vc = v + kv * copy;
        void* alibi = nullptr;
        void* key_lens = c.filled ? (void*)lens : nullptr;
        void* direct_o = direct ? (void*)o : nullptr;
        void* args[] = {&a, &q, &kc, &vc, &part, &alibi, &key_lens, &direct_o};
        CHECK_CU(cuLaunchKernel(decode[di][vi], splits, hk * row_groups, c.batch, var.a, 1, 1, 0, s, args, nullptr));
        void* args2[] = {&a, &part, &o};
        if (with_merge && !direct) CHECK_CU(cuLaunchKernel(merge[di][vi], hq, c.batch, 1, d, 1, 1, 0, s, args2, nullptr));
      };
      double us = time_graph(s, [&] {
                    for (int i = 0; i < copies; ++i) call(i, true);
                  }) / copies;
      double alone = time_graph(s, [&] {
                       for (int i = 0; i < copies; ++i) call(i, false);
                     }) / copies;
      double gbs = read * 4 / (us * 1e-6) / 1e9;
      printf(" | %7.2f us (%6.2f) %5.0f %3.0f%% s%-3d", us, alone, gbs, 100 * gbs / rate, splits);
      CHECK_CUDA(cudaMemset(o, 0, (size_t)c.batch * hq * d * 2));
      call(0, true);
      CHECK_CUDA(cudaStreamSynchronize(s));
      std::vector<uint16_t> h((size_t)c.batch * hq * d);
      CHECK_CUDA(cudaMemcpy(h.data(), o, h.size() * 2, cudaMemcpyDeviceToHost));
      outs.push_back(h);
    }
    printf("\n");
    report_mismatches(outs);
    cudaFree(k), cudaFree(v), cudaFree(q), cudaFree(o), cudaFree(part), cudaFree(lens);
  }
  printf("registers (decode/merge, d128):");
  for (size_t vi = 0; vi < variants.size(); ++vi) printf(" %d/%d", registers(decode[1][vi]), registers(merge[1][vi]));
  printf("\n");
}

// ---------------------------------------------------------------------------
// flash_attn (prefill)

static void prefill_bench(const std::vector<Variant>& variants) {
  const ByDim kernels = attention_kernels(variants, {"flash_attn"})[0];
  if (compile_only()) return;
  printf("flash_attn_d<D>_bf16, q (b, s, h_q, D), k and v (b, s, h_k, D): us per call (TFLOP/s)\n%-26s", "case");
  for (auto& v : variants) printf(" | %-24s", v.heading(false).c_str());
  printf("\n");
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const struct {
    int d, batch, seq, hq, hk;
    bool causal;
  } cases[] = {{128, 1, 512, 32, 32, true},   {128, 1, 2048, 32, 32, true}, {128, 1, 4096, 32, 32, true},
               {128, 1, 4096, 32, 32, false}, {128, 4, 4096, 32, 32, true}, {128, 1, 16384, 32, 32, true},
               {64, 1, 2048, 32, 8, true}};
  for (auto& c : cases) {
    const int d = c.d, di = d == 64 ? 0 : 1;
    char name[64];
    snprintf(name, sizeof name, "d%d b%d s%d h%d/%d%s", d, c.batch, c.seq, c.hq, c.hk, c.causal ? " causal" : "");
    if (!selected(name)) continue;
    printf("%-26s", name);
    // q, then k and v, then o in one allocation.
    const size_t nq = (size_t)c.batch * c.seq * c.hq * d, nk = (size_t)c.batch * c.seq * c.hk * d;
    uint16_t* buffers;
    CHECK_CUDA(cudaMalloc(&buffers, (2 * nq + 2 * nk) * 2));
    uint16_t *q = buffers, *k = q + nq, *v = k + nk, *o = v + nk;
    fill(q, nq, 21);
    fill(k, nk, 22);
    fill(v, nk, 23);
    const double flops = 4.0 * c.batch * c.hq * (double)c.seq * c.seq * d * (c.causal ? 0.5 : 1.0);
    std::vector<std::vector<uint16_t>> outs;
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      const Variant& var = variants[vi];
      AttnArgs a{};
      a.q_stride[0] = (uint64_t)c.seq * c.hq * d, a.q_stride[1] = (uint64_t)c.hq * d, a.q_stride[2] = d;
      a.k_stride[0] = (uint64_t)c.seq * c.hk * d, a.k_stride[1] = (uint64_t)c.hk * d, a.k_stride[2] = d;
      memcpy(a.v_stride, a.k_stride, sizeof a.k_stride);
      a.s_q = a.s_k = c.seq, a.h_q = c.hq, a.h_k = c.hk;
      a.win_left = 0x3fffffff, a.win_right = c.causal ? 0 : 0x3fffffff;
      a.scale = 1.0f / sqrtf((float)d), a.softcap = 0;
      const int rows = 16 * var.a;
      void* alibi = nullptr;
      void* args[] = {&a, &q, &k, &v, &o, &alibi};
      auto call = [&] {
        CHECK_CU(cuLaunchKernel(kernels[di][vi], (c.seq + rows - 1) / rows, c.hq, c.batch, var.a * 32, 1, 1, 0, s,
                                args, nullptr));
      };
      const double us = time_graph(s, call, c.seq >= 16384 ? 5 : 20);
      printf(" | %10.1f us (%6.1f)", us, flops / (us * 1e-6) / 1e12);
      CHECK_CUDA(cudaMemset(o, 0, nq * 2));
      call();
      CHECK_CUDA(cudaStreamSynchronize(s));
      std::vector<uint16_t> h(nq);
      CHECK_CUDA(cudaMemcpy(h.data(), o, nq * 2, cudaMemcpyDeviceToHost));
      outs.push_back(h);
    }
    printf("\n");
    report_mismatches(outs);
    cudaFree(buffers);
  }
  printf("registers (d64/d128):");
  for (size_t vi = 0; vi < variants.size(); ++vi)
    printf(" %d/%d", registers(kernels[0][vi]), registers(kernels[1][vi]));
  printf("\n");
}

// ---------------------------------------------------------------------------
// quantized mat-vec

// A GGML block type: its name in the kernel names, bytes and values per
// block, the values per activation scale of its vec-dot type, and the offsets
// of its f16 scales (set to a small value so that no product overflows).
struct QType {
  const char* name;
  // The activations' block type (quantize_act_<act>_*; sources before the
  // rounding kernels were shared per activation type name them by `name`).
  const char* act;
  uint32_t bytes, qk, act_block;
  int scales[2];
};

// The block types the qmv and dq modes time.
static const QType kQTypes[] = {{"q4_0", "q8_0", 18, 32, 32, {0, -1}},
                                {"q8_0", "q8_0", 34, 32, 32, {0, -1}},
                                {"q4k", "q8k", 144, 256, 256, {0, 2}},
                                {"q5k", "q8k", 176, 256, 256, {0, 2}},
                                {"q6k", "q8k", 210, 256, 256, {208, -1}}};

// The block types the dq mode times: every type candle-core reads (name
// and block size only; the weights are a constant byte).
static const QType kDqTypes[] = {{"q4_0", "", 18, 32, 0, {}},   {"q4_1", "", 20, 32, 0, {}},
                                 {"q5_0", "", 22, 32, 0, {}},   {"q5_1", "", 24, 32, 0, {}},
                                 {"q8_0", "", 34, 32, 0, {}},   {"q8_1", "", 36, 32, 0, {}},
                                 {"q2k", "", 84, 256, 0, {}},   {"q3k", "", 110, 256, 0, {}},
                                 {"q4k", "", 144, 256, 0, {}},  {"q5k", "", 176, 256, 0, {}},
                                 {"q6k", "", 210, 256, 0, {}},  {"q8k", "", 292, 256, 0, {}}};

// Launches quantized.rs `matvec`: quantize_act then qmatvec. Variant A: waves
// per block of the mat-vec (4); B: activations per quantize_act thread (8;
// 0: one thread per activation block, the first kernel's rule); C: rows; D:
// outputs per wave (2). `input` (CH_QACT_INPUT_*, with norm_w) and
// `residual` (or null) as `fused_matvec` passes them, and no step's RoPE;
// a source whose kernels take fewer arguments ignores them.
static void launch_qmv(const Variant& v, CUfunction act, CUfunction mv, CUfunction mv_split, cudaStream_t s, const QType& t, uint32_t n,
                       uint32_t k, const uint8_t* w, float* x, int8_t* q, float* d, float* sums, float* y,
                       uint32_t input, const float* norm_w, const float* residual) {
  uint32_t rows = v.c;
  uint64_t count = (uint64_t)rows * k;
  uint64_t work = v.b ? count / v.b : count / t.act_block;
  uint32_t blocks = (uint32_t)std::min<uint64_t>((work + 255) / 256, (uint64_t)g_sms * 16);
  float eps = 1e-5f;
  void* act_args[] = {&x, &q, &d, &sums, &count, &input, &norm_w, &eps};
  if (qmv_empty_act()) kb_empty<<<std::max(blocks, 1u), 256, 0, s>>>();
  else if (!qmv_no_act()) CHECK_CU(cuLaunchKernel(act, std::max(blocks, 1u), 1, 1, 256, 1, 1, 0, s, act_args, nullptr));
  // quantized.rs's matvec_split_family (the source's qmatvec_few_split_<q>, where
  // it has one), or KERNEL_BENCH_QMV_SPLIT=1 for none.
  const bool short_of_waves = (n + v.d - 1) / v.d < 12u * (uint32_t)g_sms;
  const char* forced = getenv("KERNEL_BENCH_QMV_SPLIT");
  const bool unsplit = forced && atoi(forced) == 1;
  uint32_t split = mv_split && !unsplit && rows == 1 && k >= 8192 && short_of_waves && v.a % 2 == 0 ? 2 : 1;
  if (split == 2) mv = mv_split;
  uint32_t waves = v.a, outs = waves / split * v.d;
  uint32_t y_dtype = 8;  // CH_DTYPE_f32
  // quantized.hip's QRope, null: plain outputs.
  struct {
    const void *cos, *sin, *pos;
    uint32_t first, heads, kv_heads, d, max_len, rows;
  } rope = {};
  void* mv_args[] = {&w, &q, &d, &sums, &y, &y_dtype, &n, &k, &rows, &residual, &rope};
  CHECK_CU(cuLaunchKernel(mv, (n + outs - 1) / outs, 1, 1, waves * 32, 1, 1, 0, s, mv_args, nullptr));
}

static void qmv_bench(const std::vector<Variant>& variants) {
  std::vector<std::vector<CUfunction>> act(variants.size()), mv(variants.size()), mv_split(variants.size());
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    auto defs = variants[vi].defines;
    defs.push_back("-DCH_ONLY_DTYPES=(1<<CH_DTYPE_f32)");
    CUmodule m = compile(variants[vi].file, defs);
    for (const QType& t : kQTypes) {
      CUfunction a = nullptr;
      if (m && cuModuleGetFunction(&a, m, (std::string("quantize_act_") + t.act + "_f32").c_str()) != CUDA_SUCCESS)
        a = function(m, (std::string("quantize_act_") + t.name + "_f32").c_str());
      act[vi].push_back(a);
      // quantized.rs's choice: qmatvec_few_ for at most 2 rows.
      const std::string kind = variants[vi].c <= 2 ? "qmatvec_few_" : "qmatvec_";
      mv[vi].push_back(m ? function(m, (kind + t.name).c_str()) : nullptr);
      CUfunction split = nullptr;
      if (m && variants[vi].c == 1 &&
          cuModuleGetFunction(&split, m, (std::string("qmatvec_few_split_") + t.name).c_str()) != CUDA_SUCCESS)
        split = nullptr;
      mv_split[vi].push_back(split);
    }
  }
  if (compile_only()) return;
  double rate = copy_rate();
  printf("copy rate %.0f GB/s, %d SMs; us per product: activation rounding + mat-vec (%% of the copy rate "
         "for the quantized weight)\n",
         rate, g_sms);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (const DecodeShape& sh : kDecodeShapes) {
    if (!selected(sh.name)) continue;
    struct QProduct {
      const char* name;
      uint32_t n, k;
    };
    const QProduct products[] = {{"qkv", sh.q + 2 * sh.kv, sh.hidden},
                                 {"o", sh.hidden, sh.q},
                                 {"gate/up", 2 * sh.inter, sh.hidden},
                                 {"down", sh.hidden, sh.inter},
                                 {"lm_head", sh.vocab, sh.hidden}};
    size_t values_in_layer = 0;
    for (int i = 0; i < 4; ++i) values_in_layer += (size_t)products[i].n * products[i].k;
    const size_t head_values = (size_t)sh.vocab * sh.hidden;
    const size_t vec = (size_t)2 * sh.inter + sh.vocab;
    float *x, *d, *sums, *y, *res;
    int8_t* q;
    const int max_rows = 8;
    CHECK_CUDA(cudaMalloc(&x, vec * max_rows * 4));
    CHECK_CUDA(cudaMalloc(&res, vec * max_rows * 4));
    CHECK_CUDA(cudaMemset(res, 0, vec * max_rows * 4));
    CHECK_CUDA(cudaMalloc(&q, vec * max_rows));
    CHECK_CUDA(cudaMalloc(&d, vec * max_rows / 8));
    CHECK_CUDA(cudaMalloc(&sums, vec * max_rows / 8));
    CHECK_CUDA(cudaMalloc(&y, vec * max_rows * 4));
    {
      std::vector<float> hx(vec * max_rows);
      for (size_t i = 0; i < hx.size(); ++i) hx[i] = (float)((i * 2654435761u) >> 8 & 0xffff) / 32768.0f - 1.0f;
      CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    }
    for (size_t ti = 0; ti < sizeof(kQTypes) / sizeof(kQTypes[0]); ++ti) {
      if (!qtype_selected(kQTypes[ti].name)) continue;
      const QType& t = kQTypes[ti];
      const size_t layer_bytes = values_in_layer / t.qk * t.bytes, head_bytes = head_values / t.qk * t.bytes;
      const size_t total = layer_bytes * sh.layers + head_bytes;
      uint8_t* w;
      CHECK_CUDA(cudaMalloc(&w, total));
      {
        std::vector<uint8_t> host(total);
        uint32_t h = 12345;
        for (size_t i = 0; i < total; ++i) {
          h = h * 1664525u + 1013904223u;
          host[i] = (uint8_t)(h >> 24);
        }
        for (size_t b = 0; b < total / t.bytes; ++b)
          for (int sc : t.scales)
            if (sc >= 0) host[b * t.bytes + sc] = 0x00, host[b * t.bytes + sc + 1] = 0x1c;
        CHECK_CUDA(cudaMemcpy(w, host.data(), total, cudaMemcpyHostToDevice));
      }
      size_t offset_in_layer[4], at = 0;
      for (int i = 0; i < 4; ++i) {
        offset_in_layer[i] = at;
        at += (size_t)products[i].n * products[i].k / t.qk * t.bytes;
      }
      auto weights_of = [&](int product, int l) {
        return w + (product == 4 ? layer_bytes * sh.layers : layer_bytes * l + offset_in_layer[product]);
      };
      // KERNEL_BENCH_QMV_STEP: each product as the graph decode step runs
      // it (`fused_matvec`): the norm before qkv, gate/up and the head,
      // SwiGLU before down, the residual after o and down.
      auto launch = [&](size_t vi, int product, int l) {
        static const uint32_t step_input[5] = {1, 0, 1, 2, 1};
        const bool fused = qmv_step();
        const float* residual = fused && (product == 1 || product == 3) ? res : nullptr;
        launch_qmv(variants[vi], act[vi][ti], mv[vi][ti], mv_split[vi][ti], s, t, products[product].n, products[product].k,
                   weights_of(product, l), x, q, d, sums, y, fused ? step_input[product] : 0, x, residual);
      };
      printf("\n%s %s (%d layers, %.2f GB)\n%-10s %6s %6s", sh.name, t.name, sh.layers, total / 1e9, "product", "n",
             "k");
      for (auto& v : variants) printf(" | %-24s", v.heading(false).c_str());
      printf("\n");
      for (int pi = 0; pi < 5; ++pi) {
        const QProduct& p = products[pi];
        printf("%-10s %6u %6u", p.name, p.n, p.k);
        const int count = pi == 4 ? 4 : sh.layers;
        for (size_t vi = 0; vi < variants.size(); ++vi) {
          double us = time_graph(s, [&] {
                        for (int l = 0; l < count; ++l) launch(vi, pi, l);
                      }) / count;
          double gbs = (double)p.n * p.k / t.qk * t.bytes / (us * 1e-6) / 1e9;
          printf(" | %7.2f us %5.0f %4.0f%%", us, gbs, 100 * gbs / rate);
        }
        printf("\n");
      }
      const double bound_us = total / (rate * 1e9) * 1e6;
      printf("%-24s", "a token's products");
      for (size_t vi = 0; vi < variants.size(); ++vi) {
        double us = time_graph(s, [&] {
          for (int l = 0; l < sh.layers; ++l)
            for (int pi = 0; pi < 4; ++pi) launch(vi, pi, l);
          launch(vi, 4, 0);
        }, 10);
        printf(" | %8.1f us %5.1f%% bound ", us, 100 * bound_us / us);
      }
      printf("\nbound %.1f us; registers (act/mat-vec):", bound_us);
      for (size_t vi = 0; vi < variants.size(); ++vi) printf(" %d/%d", registers(act[vi][ti]), registers(mv[vi][ti]));
      printf("\n");
      // Every variant's product of each shape against the first variant's.
      for (int pi = 0; pi < 5; ++pi) {
        const QProduct& p = products[pi];
        const size_t outs = (size_t)p.n * max_rows;
        std::vector<float> first(outs), got(outs);
        for (size_t vi = 0; vi < variants.size(); ++vi) {
          CHECK_CUDA(cudaMemset(y, 0, outs * 4));
          launch(vi, pi, 0);
          CHECK_CUDA(cudaStreamSynchronize(s));
          const size_t used = (size_t)p.n * variants[vi].c;
          CHECK_CUDA(cudaMemcpy(vi == 0 ? first.data() : got.data(), y, used * 4, cudaMemcpyDeviceToHost));
          double worst = 0;
          for (size_t i = 0; vi > 0 && variants[vi].c == variants[0].c && i < used; ++i)
            worst = std::max(worst, (double)fabsf(first[i] - got[i]) / (fabsf(first[i]) + 1e-3));
          if (worst > 1e-5) printf("MISMATCH: %s of variant %zu, relative %.3g\n", p.name, vi, worst);
        }
      }
      cudaFree(w);
    }
    cudaFree(x), cudaFree(q), cudaFree(d), cudaFree(sums), cudaFree(y), cudaFree(res);
  }
}

// ---------------------------------------------------------------------------
// dequantization

// quantized.rs `dequantize` to bf16 (the prefill path: every weight
// dequantized before its GEMM) of the gate/up weight of each decode shape,
// against the copy rate for the bytes read and written.
static void dq_bench(const std::vector<Variant>& variants) {
  std::vector<std::vector<CUfunction>> fns(variants.size());
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    auto defs = variants[vi].defines;
    defs.push_back("-DCH_ONLY_DTYPES=(1<<CH_DTYPE_bf16)");
    CUmodule m = compile(variants[vi].file, defs);
    for (const QType& t : kDqTypes)
      fns[vi].push_back(m ? function(m, (std::string("dequantize_") + t.name + "_bf16").c_str()) : nullptr);
  }
  if (compile_only()) return;
  double rate = copy_rate();
  printf("copy rate %.0f GB/s, %d SMs; us per dequantization to bf16 (GB/s read + written, %% of the copy rate)\n",
         rate, g_sms);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  printf("%-24s %-5s", "weight", "type");
  for (auto& v : variants) printf(" | %-24s", v.heading(false).c_str());
  printf("\n");
  for (const DecodeShape& sh : kDecodeShapes) {
    if (!selected(sh.name)) continue;
    const uint64_t values = (uint64_t)2 * sh.inter * sh.hidden;
    uint16_t* y;
    CHECK_CUDA(cudaMalloc(&y, values * 2));
    for (size_t ti = 0; ti < sizeof(kDqTypes) / sizeof(kDqTypes[0]); ++ti) {
      if (!qtype_selected(kDqTypes[ti].name)) continue;
      const QType& t = kDqTypes[ti];
      const size_t bytes = values / t.qk * t.bytes;
      uint8_t* w;
      CHECK_CUDA(cudaMalloc(&w, bytes + 16));
      CHECK_CUDA(cudaMemset(w, 0x11, bytes + 16));
      uint64_t subs = values / 32;
      // quantized.rs: a grid for four threads per sub-block, capped.
      uint32_t blocks = (uint32_t)std::min<uint64_t>((4 * subs + 255) / 256, (uint64_t)g_sms * 16);
      printf("%-24s %-5s", (std::string(sh.name) + " gate/up").c_str(), t.name);
      std::vector<uint16_t> first(values), got(values);
      for (size_t vi = 0; vi < variants.size(); ++vi) {
        void* args[] = {&w, &y, &subs};
        double us = time_graph(s, [&] { CHECK_CU(cuLaunchKernel(fns[vi][ti], blocks, 1, 1, 256, 1, 1, 0, s, args, nullptr)); });
        double gbs = (double)(bytes + values * 2) / (us * 1e-6) / 1e9;
        printf(" | %8.2f us %5.0f %4.0f%%", us, gbs, 100 * gbs / rate);
        CHECK_CUDA(cudaStreamSynchronize(s));
        CHECK_CUDA(cudaMemcpy(vi == 0 ? first.data() : got.data(), y, values * 2, cudaMemcpyDeviceToHost));
        if (vi > 0 && memcmp(first.data(), got.data(), values * 2) != 0) printf(" MISMATCH");
      }
      printf("\n");
      cudaFree(w);
    }
    cudaFree(y);
  }
}

int main(int argc, char** argv) {
  const std::string mode = argc >= 5 ? argv[3] : "";
  if (mode != "gemv" && mode != "attn" && mode != "prefill" && mode != "qmv" && mode != "dq") {
    fprintf(stderr, "usage: %s <headers dir> <kernels dir> gemv|attn|prefill|qmv|dq VARIANT...\n", argv[0]);
    return 2;
  }
  g_headers = argv[1], g_kernels = argv[2];
  std::vector<Variant> variants;
  for (int i = 4; i < argc; ++i) {
    if (mode == "gemv") variants.push_back(parse_variant(argv[i], 8, 4, 0));
    if (mode == "attn") variants.push_back(parse_variant(argv[i], 128, 3, 16));
    if (mode == "prefill") variants.push_back(parse_variant(argv[i], 4, 0, 0));
    if (mode == "qmv" || mode == "dq") variants.push_back(parse_variant(argv[i], 4, 8, 1, 2));
  }
  if (!compile_only()) {
    CHECK_CUDA(cudaFree(0));
    CHECK_CU(cuInit(0));
    cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("%s\n", prop.name);
  }
  if (mode == "gemv") gemv_bench(variants);
  if (mode == "attn") attn_bench(variants);
  if (mode == "prefill") prefill_bench(variants);
  if (mode == "qmv") qmv_bench(variants);
  if (mode == "dq") dq_bench(variants);
  return 0;
}
