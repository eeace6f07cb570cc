// hip-on-cpu: the block scheduler, compiled into every module after the
// kernel source (see "hipcpu/device.h" for the model).
//
// A launch is split by the runtime into block ranges, one per CPU thread;
// `run_blocks` runs a range. For each block, every GPU thread is a fiber on
// a stack of this CPU thread's pool. Fibers run in order until they finish
// or wait (at a barrier or a wave operation); when none can run:
//   1. a wave whose live lanes (not finished) all wait at one wave operation
//      executes it;
//   2. else, when every live thread of the block waits at one barrier, the
//      barrier opens;
//   3. else, lanes of a wave waiting at a wave operation while the wave's
//      other live lanes wait at a barrier execute it with only those lanes
//      active (a branch that reconverges before the barrier);
//   4. else the block cannot make progress as HIP defines it (lanes of a
//      wave at different wave operations, threads at different barriers, a
//      barrier inside a branch not every thread takes): the launch fails
//      with a message naming the kernel, block, threads and source lines.
// Finished threads count as arrived at barriers, as on the hardware.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hipcpu/device.h"

namespace hipcpu {

/// A launch as the runtime describes it to a module (layout shared with the
/// shim's `module.rs`: keep both in step).
struct Launch {
  Dim3 grid;
  Dim3 block;
  uint64_t shared_bytes;
  uint64_t first_block;  // linear block index, x fastest
  uint64_t block_step;   // this CPU thread runs first, first + step, ...
  void** args;           // HIP kernelParams: args[i] points at argument i, or
  const char* packed;    // HIP_LAUNCH_PARAM_BUFFER_POINTER: arguments laid out
  uint64_t packed_size;  // at their natural alignment, and its size
  const char* kernel;
  char* error;           // a message on failure (NUL-terminated, truncated)
  uint64_t error_len;
  char* const* stacks;   // the launching CPU thread's fiber stack regions,
  uint64_t stack_count;  // shared by every module (the host's `fibers`)
};

/// A fiber stack region (made by the host, kStackRegion bytes aligned to
/// it): the header page, a guard page, then the stack (growing down from
/// the region's end).
constexpr size_t kPage = 4096;
constexpr size_t kMaxThreads = 1024;

/// Switches from the running context (its stack pointer saved to `*from`)
/// to the one saved at `to`.
extern "C" void hipcpu_switch(void** from, void* to);

#if defined(__x86_64__)
// Saves the callee-saved registers, MXCSR and the x87 control word on the
// current stack, stores the stack pointer, loads the other one and restores
// the same from it (System V ABI: everything else is caller-saved).
asm(R"(
    .text
    .globl hipcpu_switch
    .hidden hipcpu_switch
    .type hipcpu_switch, @function
hipcpu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size hipcpu_switch, .-hipcpu_switch
)");
#else
#error "hip-on-cpu: fibers are implemented for x86_64 only"
#endif

/// Per CPU thread: the fiber pool and the block it runs.
struct Worker {
  std::vector<Thread> threads;
  char* const* stacks = nullptr;  // the launch's regions, one per thread
  void* scheduler_sp = nullptr;
  Thread* current = nullptr;
  Dim3 block_idx{}, block_dim{}, grid_dim{};
  unsigned nthreads = 0;
  std::vector<uint64_t> dyn_shared;  // 8-byte aligned
  void* dyn_shared_ptr = nullptr;
  void (*body)(void*) = nullptr;
  void* body_ctx = nullptr;
  const char* kernel = "";
  std::string error;
};

inline thread_local Worker t_worker;

/// Back to the scheduler; returns when the scheduler resumes this fiber.
inline void yield_to_scheduler() {
  Worker& w = t_worker;
  hipcpu_switch(&w.current->sp, w.scheduler_sp);
}

/// Stops the block: the message becomes the launch's error and the
/// scheduler abandons the block's fibers.
[[noreturn]] void fail(const char* what) {
  Worker& w = t_worker;
  if (w.error.empty()) w.error = what;
  w.current->state = State::Done;
  yield_to_scheduler();
  __builtin_trap();  // never resumed
}

void block_barrier(Site site) {
  Thread* t = self();
  t->state = State::AtBarrier;
  t->site = site;
  yield_to_scheduler();
}

/// Parks the running fiber `t` at wave operation `op` until the scheduler
/// has executed it for the whole wave.
inline void wait_at_wave_op(Thread* t, WaveOp op, int width, Site site) {
  t->state = State::AtWaveOp;
  t->op = op;
  t->width = width;
  t->site = site;
  yield_to_scheduler();
}

uint64_t wave_exchange(WaveOp op, uint64_t value, int arg, int width, Site site) {
  if (width <= 0 || width > kWave || (width & (width - 1)) != 0) {
    fail("wave operation with a width that is not a power of two up to the wave size");
  }
  Thread* t = self();
  t->value = value;
  t->arg = arg;
  wait_at_wave_op(t, op, width, site);
  return t->result;
}

void wave_collective(Collective fn, const char* name, const void* operands, void* out, Site site) {
  Thread* t = self();
  t->collective = fn;
  t->name = name;
  t->operands = operands;
  t->out = out;
  wait_at_wave_op(t, WaveOp::Collective, kWave, site);
}

/// First code of a fresh fiber (entered by `ret` from `hipcpu_switch` with
/// the stack aligned as after a call): runs the kernel body, then hands back
/// for good.
[[noreturn]] inline void fiber_entry() {
  Worker& w = t_worker;
  w.body(w.body_ctx);
  w.current->state = State::Done;
  yield_to_scheduler();
  __builtin_trap();
}

/// A fresh stack pointer for a fiber on `stack` that starts in fiber_entry:
/// the frame `hipcpu_switch` restores (MXCSR/x87 word, six registers), the
/// return address, and a zero word where fiber_entry's return address goes.
inline void* fresh_stack(char* stack) {
  auto* top = reinterpret_cast<uint64_t*>(stack + kStackRegion);
  top[-1] = 0;
  top[-2] = reinterpret_cast<uint64_t>(&fiber_entry);
  for (int r = 3; r <= 8; ++r) top[-r] = 0;
  top[-9] = 0x1f80ull | (0x037full << 32);  // default MXCSR, x87 control word
  return top - 9;
}

inline bool same_site(Site a, Site b) {
  return a.line == b.line && std::strcmp(a.file, b.file) == 0;
}

inline const char* op_name(const Thread& t) {
  switch (t.op) {
    case WaveOp::Shfl: return "__shfl";
    case WaveOp::ShflUp: return "__shfl_up";
    case WaveOp::ShflDown: return "__shfl_down";
    case WaveOp::ShflXor: return "__shfl_xor";
    case WaveOp::Ballot: return "__ballot";
    case WaveOp::Any: return "__any";
    case WaveOp::All: return "__all";
    case WaveOp::Collective: return t.name;
  }
  return "?";
}

/// The source lane of a shuffle for `lane`, or `lane` itself where HIP keeps
/// the lane's own value; `-1` for none.
inline int shuffle_source(WaveOp op, int lane, int arg, int width) {
  const int segment = lane & ~(width - 1);
  switch (op) {
    case WaveOp::Shfl:
      // ds_bpermute with byte address 4 * index: the index wraps at the wave.
      return ((arg & (width - 1)) + segment) & (kWave - 1);
    case WaveOp::ShflUp: {
      const int src = lane - arg;
      return src < segment ? lane : src;
    }
    case WaveOp::ShflDown:
      return (lane & (width - 1)) + arg >= width ? lane : lane + arg;
    case WaveOp::ShflXor: {
      const int src = lane ^ arg;
      return src >= segment + width ? lane : src;
    }
    default:
      return -1;
  }
}

/// Runs the collective instruction the lanes `active` (all at the same one)
/// wait at.
inline bool execute_collective(Worker& w, unsigned wave_first, const std::vector<unsigned>& active) {
  const void* in[kWave] = {};
  void* out[kWave] = {};
  uint64_t active_mask = 0;
  for (unsigned i : active) {
    const Thread& t = w.threads[i];
    const unsigned lane = t.linear - wave_first;
    in[lane] = t.operands;
    out[lane] = t.out;
    active_mask |= 1ull << lane;
  }
  const Thread& first = w.threads[active[0]];
  if (const char* what = first.collective(in, out, active_mask)) {
    char msg[512];
    std::snprintf(msg, sizeof msg, "%s (%s:%d): %s", first.name, first.site.file, first.site.line,
                  what);
    w.error = msg;
    return false;
  }
  for (unsigned i : active) w.threads[i].state = State::Ready;
  return true;
}

/// Executes the wave operation the lanes `active` (indices into the block's
/// threads, one wave, all waiting at a wave operation) wait at, and makes
/// them ready; fails on lanes at different operations.
inline bool execute_wave_op(Worker& w, unsigned wave_first, const std::vector<unsigned>& active) {
  Thread& first = w.threads[active[0]];
  for (unsigned i : active) {
    Thread& t = w.threads[i];
    if (t.op != first.op || !same_site(t.site, first.site) || t.width != first.width ||
        (t.op == WaveOp::Collective && t.collective != first.collective)) {
      char msg[512];
      std::snprintf(msg, sizeof msg,
                    "divergent wave operation: lane %u waits at %s (%s:%d), lane %u at %s (%s:%d)",
                    first.linear % kWave, op_name(first), first.site.file, first.site.line,
                    t.linear % kWave, op_name(t), t.site.file, t.site.line);
      w.error = msg;
      return false;
    }
  }
  if (first.op == WaveOp::Collective) return execute_collective(w, wave_first, active);
  uint64_t lane_value[kWave] = {};
  uint64_t active_mask = 0;
  for (unsigned i : active) {
    const unsigned lane = w.threads[i].linear - wave_first;
    lane_value[lane] = w.threads[i].value;
    active_mask |= 1ull << lane;
  }
  uint64_t ballot = 0;
  for (unsigned i : active) {
    const unsigned lane = w.threads[i].linear - wave_first;
    if (lane_value[lane] != 0) ballot |= 1ull << lane;
  }
  for (unsigned i : active) {
    Thread& t = w.threads[i];
    const int lane = (int)(t.linear - wave_first);
    switch (t.op) {
      case WaveOp::Ballot: t.result = ballot; break;
      case WaveOp::Any: t.result = ballot != 0; break;
      case WaveOp::All: t.result = ballot == active_mask; break;
      default: {
        const int src = shuffle_source(t.op, lane, t.arg, t.width);
        // An inactive (or absent) source lane reads 0, as ds_bpermute does.
        t.result = (active_mask >> src) & 1u ? lane_value[src] : 0;
      }
    }
    t.state = State::Ready;
  }
  return true;
}

/// Describes the threads of a stuck block for the error message.
inline std::string describe_stuck(const Worker& w) {
  std::string out = "no thread can proceed:";
  int shown = 0;
  for (unsigned i = 0; i < w.nthreads && shown < 6; ++i) {
    const Thread& t = w.threads[i];
    if (t.state == State::Done) continue;
    if (i > 0 && t.state == w.threads[i - 1].state &&
        same_site(t.site, w.threads[i - 1].site) && t.op == w.threads[i - 1].op)
      continue;
    char line[256];
    std::snprintf(line, sizeof line, " thread %u at %s (%s:%d);", i,
                  t.state == State::AtBarrier ? "__syncthreads" : op_name(t), t.site.file,
                  t.site.line);
    out += line;
    ++shown;
  }
  return out;
}

/// Runs one block to completion; false (with `w.error` set) on failure.
inline bool run_block(Worker& w) {
  for (unsigned i = 0; i < w.nthreads; ++i) {
    Thread& t = w.threads[i];
    t.linear = i;
    t.idx = Dim3{i % w.block_dim.x, (i / w.block_dim.x) % w.block_dim.y,
                 i / (w.block_dim.x * w.block_dim.y)};
    t.state = State::Ready;
    t.sp = fresh_stack(w.stacks[i]);
    reinterpret_cast<StackHeader*>(w.stacks[i])->thread = &t;
  }
  const unsigned waves = (w.nthreads + kWave - 1) / kWave;
  std::vector<unsigned> at_op;
  for (;;) {
    unsigned done = 0;
    for (unsigned i = 0; i < w.nthreads; ++i) {
      Thread& t = w.threads[i];
      if (t.state == State::Ready) {
        w.current = &t;
        hipcpu_switch(&w.scheduler_sp, t.sp);
        w.current = nullptr;
        if (!w.error.empty()) return false;
      }
      done += t.state == State::Done;
    }
    if (done == w.nthreads) return true;

    // 1. and 3.: waves whose live lanes wait at a wave operation, all of
    // them (pass 0) or together with lanes at a barrier (pass 1).
    bool progressed = false;
    for (int pass = 0; pass < 2 && !progressed; ++pass) {
      for (unsigned wave = 0; wave < waves; ++wave) {
        const unsigned begin = wave * kWave;
        const unsigned end = begin + kWave < w.nthreads ? begin + kWave : w.nthreads;
        at_op.clear();
        unsigned at_barrier = 0, live = 0;
        for (unsigned i = begin; i < end; ++i) {
          const State s = w.threads[i].state;
          live += s != State::Done;
          at_barrier += s == State::AtBarrier;
          if (s == State::AtWaveOp) at_op.push_back(i);
        }
        const bool runs = !at_op.empty() &&
                          (pass == 0 ? at_op.size() == live : at_op.size() + at_barrier == live);
        if (runs) {
          if (!execute_wave_op(w, begin, at_op)) return false;
          progressed = true;
        }
      }
    }
    if (progressed) continue;

    // 2.: a barrier every live thread waits at.
    const Thread* first = nullptr;
    bool opens = true;
    for (unsigned i = 0; i < w.nthreads && opens; ++i) {
      const Thread& t = w.threads[i];
      if (t.state == State::Done) continue;
      if (t.state != State::AtBarrier) opens = false;
      else if (first == nullptr) first = &t;
      else if (!same_site(first->site, t.site)) opens = false;
    }
    if (opens && first != nullptr) {
      for (unsigned i = 0; i < w.nthreads; ++i)
        if (w.threads[i].state == State::AtBarrier) w.threads[i].state = State::Ready;
      continue;
    }
    w.error = describe_stuck(w);
    return false;
  }
}

/// The fault handler that was installed before this module's.
inline struct sigaction previous_fault_handler;

/// SIGSEGV/SIGBUS while this CPU thread runs a kernel of this module: says
/// which kernel, block and thread, then hands the re-executed fault to the
/// previous handler (in the end the default action: the process stops).
inline void on_fault(int sig, siginfo_t* info, void*) {
  const Worker& w = t_worker;
  if (w.current != nullptr) {
    char msg[512];
    const int n = std::snprintf(
        msg, sizeof msg,
        "hip-on-cpu: kernel `%s` (block %u,%u,%u, thread %u) faulted at %p: an access past a "
        "buffer's guard zone, outside every buffer, or a fiber stack overflow\n",
        w.kernel, w.block_idx.x, w.block_idx.y, w.block_idx.z, w.current->linear, info->si_addr);
    if (n > 0) (void)!write(2, msg, (size_t)n);
  }
  sigaction(sig, &previous_fault_handler, nullptr);
}

/// Installs [`on_fault`] once per module (on the signal stack Rust threads
/// have, so a fiber stack overflow can be reported).
inline void install_fault_handler() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_fault_handler);
    sigaction(SIGBUS, &action, nullptr);
    return true;
  }();
  (void)installed;
}

/// Makes sure this CPU thread has fibers for `n` threads, on the launch's
/// stack regions (their headers pointing at this module's block state).
inline bool reserve_fibers(Worker& w, unsigned n, const Launch& launch) {
  if (launch.stacks == nullptr || launch.stack_count < n) return false;
  if (w.threads.size() < n) {
    w.threads.resize(n);  // may move the threads: headers are set per block
  }
  w.stacks = launch.stacks;
  for (unsigned i = 0; i < n; ++i) {
    auto* h = reinterpret_cast<StackHeader*>(w.stacks[i]);
    h->block_idx = &w.block_idx;
    h->block_dim = &w.block_dim;
    h->grid_dim = &w.grid_dim;
    h->dynamic_shared = &w.dyn_shared_ptr;
  }
  return true;
}

/// Runs the blocks of `launch` assigned to this CPU thread, each thread
/// calling `body(ctx)`; returns 0, or 1 with the message in `launch.error`.
inline int run_blocks(const Launch& launch, void (*body)(void*), void* ctx) {
  install_fault_handler();
  Worker& w = t_worker;
  w.block_dim = launch.block;
  w.grid_dim = launch.grid;
  w.nthreads = launch.block.x * launch.block.y * launch.block.z;
  w.body = body;
  w.body_ctx = ctx;
  w.kernel = launch.kernel;
  w.error.clear();
  auto report = [&](const std::string& what, uint64_t block) {
    if (launch.error_len == 0) return 1;
    std::snprintf(launch.error, launch.error_len, "kernel `%s`, block %llu: %s", launch.kernel,
                  (unsigned long long)block, what.c_str());
    return 1;
  };
  if (w.nthreads == 0 || w.nthreads > kMaxThreads) return report("bad block size", 0);
  if (!reserve_fibers(w, w.nthreads, launch)) return report("no fiber stacks for the block", 0);
  w.dyn_shared.assign((launch.shared_bytes + 7) / 8, 0);
  w.dyn_shared_ptr = w.dyn_shared.data();
  const uint64_t blocks = (uint64_t)launch.grid.x * launch.grid.y * launch.grid.z;
  for (uint64_t b = launch.first_block; b < blocks; b += launch.block_step) {
    w.block_idx = Dim3{(unsigned)(b % launch.grid.x), (unsigned)((b / launch.grid.x) % launch.grid.y),
                       (unsigned)(b / ((uint64_t)launch.grid.x * launch.grid.y))};
    if (!run_block(w)) return report(w.error, b);
  }
  return 0;
}

/// The launch entry of one kernel: copies the arguments out of the HIP
/// argument array or the packed buffer and runs the blocks.
template <typename... Args, size_t... I>
inline int launch_kernel(void (*kernel)(Args...), const Launch& launch, std::index_sequence<I...>) {
  constexpr size_t n = sizeof...(Args);
  void* at[n > 0 ? n : 1] = {};
  if (launch.args != nullptr) {
    for (size_t i = 0; i < n; ++i) at[i] = launch.args[i];
  } else {
    constexpr size_t sizes[n > 0 ? n : 1] = {sizeof(typename std::decay<Args>::type)...};
    constexpr size_t aligns[n > 0 ? n : 1] = {alignof(typename std::decay<Args>::type)...};
    uint64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      offset = (offset + aligns[i] - 1) / aligns[i] * aligns[i];
      if (offset + sizes[i] > launch.packed_size) {
        if (launch.error_len > 0)
          std::snprintf(launch.error, launch.error_len,
                        "kernel `%s`: the argument buffer holds %llu bytes, argument %zu needs %llu",
                        launch.kernel, (unsigned long long)launch.packed_size, i,
                        (unsigned long long)(offset + sizes[i]));
        return 1;
      }
      at[i] = const_cast<char*>(launch.packed + offset);
      offset += sizes[i];
    }
  }
  struct Call {
    void (*kernel)(Args...);
    std::tuple<typename std::decay<Args>::type...> values;
  } call{kernel, {*static_cast<typename std::decay<Args>::type*>(at[I])...}};
  auto body = [](void* ctx) {
    Call* c = static_cast<Call*>(ctx);
    std::apply(c->kernel, c->values);
  };
  return run_blocks(launch, body, &call);
}

template <typename... Args>
inline int launch_kernel(void (*kernel)(Args...), const Launch& launch) {
  return launch_kernel(kernel, launch, std::index_sequence_for<Args...>{});
}

/// Strictest argument alignment `pack_arguments` supports (the runtime's
/// buffers for packed arguments are aligned to it).
constexpr uint64_t kMaxArgAlign = 64;

/// The pack entry of one kernel (stream capture): copies the arguments that
/// `args[i]` point at into `out` (room for `cap` bytes, aligned to
/// `kMaxArgAlign`), each at its natural alignment, exactly as
/// `launch_kernel` reads a packed buffer. Returns the bytes needed, writing
/// nothing when `cap` is smaller, or UINT64_MAX for an argument aligned
/// more strictly than `kMaxArgAlign`.
template <typename... Args>
inline uint64_t pack_arguments(void (*)(Args...), void* const* args, char* out, uint64_t cap) {
  constexpr size_t n = sizeof...(Args);
  constexpr size_t sizes[n > 0 ? n : 1] = {sizeof(typename std::decay<Args>::type)...};
  constexpr size_t aligns[n > 0 ? n : 1] = {alignof(typename std::decay<Args>::type)...};
  uint64_t offsets[n > 0 ? n : 1] = {};
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (aligns[i] > kMaxArgAlign) return UINT64_MAX;
    total = (total + aligns[i] - 1) / aligns[i] * aligns[i];
    offsets[i] = total;
    total += sizes[i];
  }
  if (total > cap) return total;
  for (size_t i = 0; i < n; ++i) std::memcpy(out + offsets[i], args[i], sizes[i]);
  return total;
}

}  // namespace hipcpu
