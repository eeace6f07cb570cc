// Feasibility: does prefetching the next weights into L2 during a latency-bound
// phase (attention) shorten a decode layer?  Stand-in kernels, CUDA graphs.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)

__global__ void spin(unsigned ns) {
  unsigned long long t0; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (true) { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); if (t - t0 >= ns) break; }
}
__global__ void stream(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldg(p + i); acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}
__global__ void pf_line(const char* p, size_t bytes) {
  for (size_t o = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 128; o < bytes; o += (size_t)gridDim.x * blockDim.x * 128)
    asm volatile("prefetch.global.L2 [%0];" :: "l"(p + o));
}
__global__ void pf_line_el(const char* p, size_t bytes, const char* p2, size_t bytes2) {
  for (size_t o = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 128; o < bytes + bytes2; o += (size_t)gridDim.x * blockDim.x * 128) {
    const char* a = o < bytes ? p + o : p2 + (o - bytes);
    asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(a));
  }
}
__global__ void pf_bulk(const char* p, size_t bytes, unsigned chunk) {
  for (size_t o = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * (size_t)chunk; o < bytes; o += (size_t)gridDim.x * blockDim.x * chunk) {
    unsigned sz = (unsigned)((bytes - o) < chunk ? (bytes - o) : chunk);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p + o), "r"(sz) : "memory");
  }
}
__global__ void pf_load(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldcg(p + i); acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

int main() {
  const size_t MB = 1 << 20;
  auto r4k = [](double x) { return (size_t)(x / 4096) * 4096; };
  const size_t qkv = r4k(12.6 * MB), o = r4k(8.4 * MB), gu = r4k(67 * MB), down = r4k(33.5 * MB);
  const size_t layer = ((qkv + o + gu + down) / 4096 + 1) * 4096;
  const int L = 16;
  char* w; CK(cudaMalloc(&w, layer * L)); CK(cudaMemset(w, 1, layer * L));
  unsigned* sink; CK(cudaMalloc(&sink, 4));
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s0, s1; CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(4 * L); for (auto& evt : ev) CK(cudaEventCreateWithFlags(&evt, cudaEventDisableTiming));
  auto rd = [&](const char* p, size_t b) { stream<<<sms * 4, 512, 0, s0>>>((const uint4*)p, b / 16, sink); };
  struct Cfg { const char* name; int method; size_t pf; int blocks; unsigned spin_ns; };
  std::vector<Cfg> cfgs;
  cfgs.push_back({"none", 0, 0, 0, 0});
  for (unsigned sp : {7000u, 3000u}) {
    cfgs.push_back({"none", 0, 0, 0, sp});
    for (int bl : {4, 16, 64}) cfgs.push_back({"el+qkv", 4, 8 * MB, bl, sp});
    for (size_t pf : {8 * MB, 16 * MB, 24 * MB, 32 * MB})
      for (int m : {1, 2, 3}) for (int bl : {4, 16, 64}) cfgs.push_back({m == 1 ? "line" : m == 2 ? "bulk" : "load", m, pf, bl, sp});
  }
  cudaEvent_t t0, t1; CK(cudaEventCreate(&t0)); CK(cudaEventCreate(&t1));
  printf("%-6s %6s %6s %6s %10s %10s\n", "method", "pf_MB", "blocks", "spin", "us/layer", "GB/s_eff");
  for (auto& c : cfgs) {
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < L; ++l) {
      const char* b = w + layer * l;
      rd(b, qkv);
      if (c.method) {
        CK(cudaEventRecord(ev[4 * l], s0)); CK(cudaStreamWaitEvent(s1, ev[4 * l], 0));
        if (c.method == 1) pf_line<<<c.blocks, 256, 0, s1>>>(b + qkv, c.pf);
        if (c.method == 2) pf_bulk<<<c.blocks, 32, 0, s1>>>(b + qkv, c.pf, 64 * 1024);
        if (c.method == 4) pf_line_el<<<c.blocks, 256, 0, s1>>>(b + qkv, o, l + 1 < L ? b + layer : w, qkv);
        if (c.method == 3) pf_load<<<c.blocks, 1024, 0, s1>>>((const uint4*)(b + qkv), c.pf / 16, sink);
        CK(cudaEventRecord(ev[4 * l + 1], s1));
      }
      spin<<<32, 128, 0, s0>>>(c.spin_ns);
      rd(b + qkv, o); rd(b + qkv + o, gu); rd(b + qkv + o + gu, down);
      if (c.method) CK(cudaStreamWaitEvent(s0, ev[4 * l + 1], 0));
    }
    CK(cudaStreamEndCapture(s0, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, s0));
    CK(cudaStreamSynchronize(s0));
    const int IT = 20;
    CK(cudaEventRecord(t0, s0));
    for (int i = 0; i < IT; ++i) CK(cudaGraphLaunch(ge, s0));
    CK(cudaEventRecord(t1, s0)); CK(cudaEventSynchronize(t1));
    float ms; CK(cudaEventElapsedTime(&ms, t0, t1));
    double us = ms * 1000.0 / IT / L;
    printf("%-6s %6zu %6d %6u %10.2f %10.1f\n", c.name, c.pf / MB, c.blocks, c.spin_ns, us, (qkv + o + gu + down) / (us * 1e3));
    CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  }
  // copy bandwidth reference
  char* d2; CK(cudaMalloc(&d2, 1024 * MB));
  CK(cudaEventRecord(t0, s0)); for (int i = 0; i < 10; ++i) CK(cudaMemcpyAsync(d2, w, 1024 * MB, cudaMemcpyDeviceToDevice, s0));
  CK(cudaEventRecord(t1, s0)); CK(cudaEventSynchronize(t1)); float ms; CK(cudaEventElapsedTime(&ms, t0, t1));
  printf("copy rate %.1f GB/s (read+write)\n", 2.0 * 10 * 1024 * MB / (ms * 1e6));
  return 0;
}
