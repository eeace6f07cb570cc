// hip-on-cpu: what a kernel sees of the GPU it runs on.
//
// A compiled module runs each block of a launch on one CPU thread, every GPU
// thread of the block as a fiber (its own stack, switched cooperatively).
// The fibers meet at the two places where GPU threads wait for each other:
// a block barrier (__syncthreads) and a wave-level operation (shuffles,
// ballots, any/all). The scheduler in "hipcpu/exec.h" resumes a wave's lanes
// once all of its active lanes reached the same wave operation and computes
// the result exactly as AMD hardware does at the module's wave size
// (__AMDGCN_WAVEFRONT_SIZE: 64 for CDNA targets, 32 for RDNA ones).
//
// This header declares that state and the operations; it is included by the
// replacement <hip/hip_runtime.h>.
#pragma once

#include <cstddef>
#include <cstdint>

#ifndef __AMDGCN_WAVEFRONT_SIZE
#error "hip-on-cpu: __AMDGCN_WAVEFRONT_SIZE must be defined (64 or 32)"
#endif

namespace hipcpu {

/// The wave size every kernel of this module runs at.
constexpr int kWave = __AMDGCN_WAVEFRONT_SIZE;
static_assert(kWave == 32 || kWave == 64, "AMD waves have 32 or 64 lanes");

/// threadIdx, blockIdx, blockDim and gridDim.
struct Dim3 {
  unsigned int x, y, z;
};

/// Where a barrier or wave operation is in the source, so that lanes meeting
/// at different ones (divergence) are reported instead of paired up (GCC has
/// no `__builtin_COLUMN`: two on one source line are not told apart).
struct Site {
  const char* file;
  int line;
};

/// Wave-level operations. `Collective` is any other instruction that reads
/// operands of several lanes (MFMA, WMMA, readlane, ...): a function of the
/// whole wave's operands, see [`Collective`].
enum class WaveOp : int { Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All, Collective };

/// Computes a wave-wide instruction: `in[lane]` points at the operands lane
/// `lane` passed and `out[lane]` at its result (both null for a lane that is
/// not active). Returns null, or a message when the operands break the
/// instruction's rules (a lane missing where every lane must take part, ...).
using Collective = const char* (*)(const void* const* in, void* const* out, uint64_t active);

/// What a fiber is doing when it is not running.
enum class State : int { Ready, AtBarrier, AtWaveOp, Done };

/// One GPU thread.
struct Thread {
  void* sp;          // saved stack pointer while switched out
  Dim3 idx;          // threadIdx
  unsigned linear;   // index within the block (x fastest)
  State state;
  Site site;         // of the barrier or wave operation it waits at
  WaveOp op;
  int arg;           // source lane, delta or lane mask
  int width;         // shuffle segment width
  uint64_t value;    // this lane's operand (raw bits)
  uint64_t result;   // the operation's result for this lane
  Collective collective;  // for WaveOp::Collective: the instruction,
  const char* name;       // its name for messages,
  const void* operands;   // this lane's operands
  void* out;              // and where its result goes
};

/// Entry points of the scheduler (hipcpu/exec.h) that device code calls.
[[noreturn]] void fail(const char* what);
void block_barrier(Site site);
uint64_t wave_exchange(WaveOp op, uint64_t value, int arg, int width, Site site);
void wave_collective(Collective fn, const char* name, const void* operands, void* out, Site site);

/// Every fiber stack is one aligned region of this size whose first bytes
/// hold a [`StackHeader`]: device code finds its thread and block from the
/// stack pointer, with no thread-local lookup (kernels read `threadIdx`
/// and friends all the time).
constexpr uintptr_t kStackRegion = uintptr_t(1) << 19;

/// What the running fiber's stack region starts with.
struct StackHeader {
  Thread* thread;
  const Dim3* block_idx;
  const Dim3* block_dim;
  const Dim3* grid_dim;
  void* const* dynamic_shared;
};

inline const StackHeader& header() {
  uintptr_t sp;
  asm("mov %%rsp, %0" : "=r"(sp));
  return *reinterpret_cast<const StackHeader*>(sp & ~(kStackRegion - 1));
}
inline Thread* self() { return header().thread; }
inline const Dim3& block_idx() { return *header().block_idx; }
inline const Dim3& block_dim() { return *header().block_dim; }
inline const Dim3& grid_dim() { return *header().grid_dim; }
inline void* dynamic_shared() { return *header().dynamic_shared; }

}  // namespace hipcpu
