//! The CPU threads the platform's work is spread over: kernel launches
//! (`hip::module`) and the rocBLAS and MIOpen reference loops.

use crate::hip::module::THREADS_VAR;

/// How many threads work may use: `HIP_ON_CPU_THREADS`, else one per core
/// (1 to 256).
pub(crate) fn threads() -> usize {
    std::env::var(THREADS_VAR)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, 256)
}

/// Work (multiply-adds, say) below which a thread is not worth starting.
const WORK_PER_THREAD: usize = 1 << 16;

/// Calls `f(i, chunk)` for every `chunk`-sized piece `i` of `out` (the last
/// one may be shorter), pieces dealt round-robin to at most [`threads`]
/// scoped threads, one per [`WORK_PER_THREAD`] of the `work` a piece costs;
/// `f` sees each piece once and nothing else of `out`.
pub(crate) fn for_each_chunk<T: Send>(
    out: &mut [T],
    chunk: usize,
    work: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let chunk = chunk.max(1);
    let pieces = out.len().div_ceil(chunk);
    let workers = threads()
        .min(pieces)
        .min(pieces.saturating_mul(work) / WORK_PER_THREAD)
        .max(1);
    let mut shares: Vec<Vec<(usize, &mut [T])>> = (0..workers).map(|_| Vec::new()).collect();
    for (i, piece) in out.chunks_mut(chunk).enumerate() {
        shares[i % workers].push((i, piece));
    }
    let f = &f;
    std::thread::scope(|scope| {
        let mut shares = shares.into_iter();
        let here = shares.next();
        for share in shares {
            scope.spawn(move || share.into_iter().for_each(|(i, piece)| f(i, piece)));
        }
        here.into_iter()
            .flatten()
            .for_each(|(i, piece)| f(i, piece));
    });
}

#[cfg(test)]
mod tests {
    use super::{WORK_PER_THREAD, for_each_chunk};

    #[test]
    fn every_piece_is_seen_once_with_its_index() {
        let mut v = vec![0usize; 103];
        for_each_chunk(&mut v, 10, WORK_PER_THREAD, |i, piece| {
            for (j, x) in piece.iter_mut().enumerate() {
                *x += i * 10 + j + 1;
            }
        });
        assert_eq!(v, (1..=103).collect::<Vec<_>>());
    }
}
