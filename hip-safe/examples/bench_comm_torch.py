"""All-reduce bandwidth of PyTorch's torch.distributed (NCCL) on two GPUs, the
alternative to bench-comm's RCCL table: same sizes, same dtypes, in-place sum,
one process per GPU, CUDA events around N calls after one warm-up.

usage: python3 bench_comm_torch.py [--iters N]
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]


def rank_main(rank, world, iters, queue):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for size in SIZES:
            buf = torch.zeros(size // torch.tensor([], dtype=dtype).element_size(),
                              dtype=dtype, device="cuda")
            dist.all_reduce(buf)
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            end.record()
            end.synchronize()
            rows.append((str(dtype).split(".")[-1], size, start.elapsed_time(end) / 1e3))
    if rank == 0:
        queue.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def main():
    iters = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 20
    world = 2
    if torch.cuda.device_count() < world:
        print(f"bench_comm_torch: needs {world} GPUs, found {torch.cuda.device_count()}")
        sys.exit(2)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=rank_main, args=(r, world, iters, queue)) for r in range(world)]
    for p in procs:
        p.start()
    rows = queue.get()
    for p in procs:
        p.join()
    print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    bus = 2 * (world - 1) / world
    for dtype in ("float32", "bfloat16"):
        print(f"\ntorch.distributed all-reduce, sum in place, {world} ranks, {dtype}")
        print("| size | time (us) | algbw (GB/s) | busbw (GB/s) |")
        print("|---:|---:|---:|---:|")
        for name, size, seconds in rows:
            if name == dtype:
                alg = size * iters / seconds / 1e9
                print(f"| {size >> 20} MiB | {seconds / iters * 1e6:.1f} | {alg:.1f} | {alg * bus:.1f} |")


if __name__ == "__main__":
    main()
