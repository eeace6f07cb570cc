//! rocBLAS on the host: handles that remember their stream, the status
//! strings and version shared with the NVIDIA platform (`common`), the
//! GEMMs as reference loops ([`gemm`]), and the host arithmetic and
//! threading those loops share with MIOpen's ([`host`]).
//!
//! A `rocblas_handle` is a boxed [`Handle`]. Work runs to completion at the
//! call, whatever the stream; scalars are read from host memory in either
//! pointer mode, since device memory is host memory here.

#[path = "../../../shim-common/rocblas_common.rs"]
mod common;
mod gemm;

pub(crate) use common::{
    BlasResult, rocblas_get_version_string, rocblas_get_version_string_size,
    rocblas_status_to_string,
};
pub(crate) use gemm::{rocblas_gemm_ex, rocblas_gemm_strided_batched_ex};

use hip_sys::hipStream_t;
use rocblas_sys::{rocblas_handle, rocblas_pointer_mode, rocblas_status};

use crate::ffi::{non_null, write_out};

/// The version this shim reports: rocBLAS 4.4 (ROCm 6.4) as reference loops
/// on the host.
const VERSION: &[u8] = b"4.4.0-hip-on-cpu";

/// One rocBLAS handle.
struct Handle {
    /// The stream set by `rocblas_set_stream` (only reported back).
    stream: hipStream_t,
}

/// The handle behind a `rocblas_handle`.
///
/// # Safety
/// `handle` must be null or a live handle from [`rocblas_create_handle`],
/// not used concurrently from another thread (rocBLAS requires that too).
unsafe fn handle<'a>(handle: rocblas_handle) -> BlasResult<&'a mut Handle> {
    non_null(handle, rocblas_status::rocblas_status_invalid_handle)?;
    // SAFETY: per the contract.
    Ok(unsafe { &mut *handle.cast::<Handle>() })
}

/// `rocblas_create_handle`: a handle on the null stream.
pub(crate) unsafe fn rocblas_create_handle(out: *mut rocblas_handle) -> BlasResult {
    non_null(out, rocblas_status::rocblas_status_invalid_pointer)?;
    let boxed = Box::new(Handle {
        stream: std::ptr::null_mut(),
    });
    // SAFETY: checked non-null; the caller guarantees validity.
    unsafe {
        write_out(
            out,
            Box::into_raw(boxed).cast(),
            rocblas_status::rocblas_status_invalid_pointer,
        )
    }
}

/// `rocblas_destroy_handle`.
pub(crate) unsafe fn rocblas_destroy_handle(h: rocblas_handle) -> BlasResult {
    non_null(h, rocblas_status::rocblas_status_invalid_handle)?;
    // SAFETY: a live handle from `rocblas_create_handle`, destroyed once.
    drop(unsafe { Box::from_raw(h.cast::<Handle>()) });
    Ok(())
}

/// `rocblas_set_stream`: remembered for `rocblas_get_stream` (work runs at
/// the call, which is a valid schedule of any stream).
pub(crate) unsafe fn rocblas_set_stream(h: rocblas_handle, stream: hipStream_t) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    unsafe { handle(h) }?.stream = stream;
    Ok(())
}

/// `rocblas_get_stream`.
pub(crate) unsafe fn rocblas_get_stream(h: rocblas_handle, stream: *mut hipStream_t) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    let h = unsafe { handle(h) }?;
    // SAFETY: the caller passes a valid or null out-pointer.
    unsafe {
        write_out(
            stream,
            h.stream,
            rocblas_status::rocblas_status_invalid_pointer,
        )
    }
}

/// `rocblas_set_pointer_mode`: host (0) or device (1) scalars; both are
/// host memory here, so both are read the same way.
pub(crate) unsafe fn rocblas_set_pointer_mode(
    h: rocblas_handle,
    pointer_mode: rocblas_pointer_mode,
) -> BlasResult {
    // SAFETY: the caller passes a live handle.
    unsafe { handle(h) }?;
    match pointer_mode {
        rocblas_pointer_mode::rocblas_pointer_mode_host
        | rocblas_pointer_mode::rocblas_pointer_mode_device => Ok(()),
        _ => Err(rocblas_status::rocblas_status_invalid_value),
    }
}

/// Host arithmetic and threading shared by the rocBLAS and MIOpen loops.
pub(crate) mod host {
    use std::ffi::c_void;
    use std::ops::{Add, Mul, Range};
    use std::sync::OnceLock;

    use half::{bf16, f16};

    /// An accumulation type: `f32`, or `f64` for `f64` data.
    pub(crate) trait Accumulator:
        Copy + Send + Sync + PartialEq + Add<Output = Self> + Mul<Output = Self>
    {
        /// 0.
        const ZERO: Self;
        /// 1.
        const ONE: Self;
    }

    impl Accumulator for f32 {
        const ZERO: Self = 0.0;
        const ONE: Self = 1.0;
    }

    impl Accumulator for f64 {
        const ZERO: Self = 0.0;
        const ONE: Self = 1.0;
    }

    /// A stored element type that widens exactly into the accumulator `A`
    /// and is rounded from it to nearest, ties to even.
    pub(crate) trait Element<A: Accumulator>: Copy + Send + Sync {
        /// The value in the accumulator type (exact).
        fn widen(self) -> A;

        /// The nearest value of this type (ties to even).
        fn narrow(value: A) -> Self;

        /// Reads element `i` of the array at `base`, widened.
        ///
        /// # Safety
        /// `base.offset(i)` must be a readable element of this type (any
        /// alignment).
        unsafe fn load(base: *const c_void, i: isize) -> A {
            // SAFETY: per the contract.
            unsafe { base.cast::<Self>().offset(i).read_unaligned() }.widen()
        }

        /// Writes `value`, rounded, to element `i` of the array at `base`.
        ///
        /// # Safety
        /// `base.offset(i)` must be a writable element of this type (any
        /// alignment).
        unsafe fn store(base: *mut c_void, i: isize, value: A) {
            // SAFETY: per the contract.
            unsafe {
                base.cast::<Self>()
                    .offset(i)
                    .write_unaligned(Self::narrow(value))
            }
        }
    }

    impl Element<f32> for f32 {
        fn widen(self) -> f32 {
            self
        }
        fn narrow(value: f32) -> f32 {
            value
        }
    }

    impl Element<f32> for f16 {
        fn widen(self) -> f32 {
            self.to_f32()
        }
        fn narrow(value: f32) -> f16 {
            f16::from_f32(value)
        }
    }

    impl Element<f32> for bf16 {
        fn widen(self) -> f32 {
            self.to_f32()
        }
        fn narrow(value: f32) -> bf16 {
            bf16::from_f32(value)
        }
    }

    impl Element<f64> for f64 {
        fn widen(self) -> f64 {
            self
        }
        fn narrow(value: f64) -> f64 {
            value
        }
    }

    /// Least multiply-adds worth a thread of their own.
    const MIN_WORK_PER_THREAD: usize = 1 << 16;

    /// Threads the loops may use: `HIP_ON_CPU_THREADS`, as for kernel
    /// launches, else every core.
    fn threads() -> usize {
        static THREADS: OnceLock<usize> = OnceLock::new();
        *THREADS.get_or_init(|| {
            std::env::var(crate::hip::module::THREADS_VAR)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                .clamp(1, 256)
        })
    }

    /// `task` over `0..items`, split into contiguous ranges that run on
    /// several threads when `work` (multiply-adds in all) is large enough;
    /// the ranges' results are concatenated in order. A range whose thread
    /// cannot be started runs on the calling thread.
    pub(crate) fn parallel_collect<T: Send>(
        items: usize,
        work: usize,
        task: impl Fn(Range<usize>) -> Vec<T> + Sync,
    ) -> Vec<T> {
        let threads = threads().min(items).min(work / MIN_WORK_PER_THREAD).max(1);
        if threads == 1 {
            return task(0..items);
        }
        let per = items.div_ceil(threads);
        let task = &task;
        std::thread::scope(|scope| {
            let ranges = (0..items)
                .step_by(per)
                .map(|start| start..(start + per).min(items));
            let running: Vec<_> = ranges
                .map(|range| {
                    std::thread::Builder::new()
                        .name("hip-on-cpu-blas".into())
                        .spawn_scoped(scope, {
                            let range = range.clone();
                            move || task(range)
                        })
                        .map_err(|_| range)
                })
                .collect();
            let mut out = Vec::new();
            for part in running {
                out.extend(match part {
                    Ok(thread) => thread
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    Err(range) => task(range),
                });
            }
            out
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn narrowing_rounds_to_nearest_even() {
            // 1 + 2^-11 lies halfway between 1 and the next f16 (1 + 2^-10).
            assert_eq!(
                <f16 as Element<f32>>::narrow(1.0 + 2f32.powi(-11)),
                f16::ONE
            );
            let up = <f16 as Element<f32>>::narrow(1.0 + 3.0 * 2f32.powi(-11));
            assert_eq!(up.to_f32(), 1.0 + 2f32.powi(-9));
            assert_eq!(
                <bf16 as Element<f32>>::narrow(1.0 + 2f32.powi(-8)),
                bf16::ONE
            );
        }

        #[test]
        fn parallel_results_keep_their_order() {
            let all = parallel_collect(1000, usize::MAX, |r| r.collect());
            assert_eq!(all, (0..1000).collect::<Vec<usize>>());
            assert!(parallel_collect(0, usize::MAX, |r| r.collect::<Vec<_>>()).is_empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_remember_their_stream() {
        let mut h: rocblas_handle = std::ptr::null_mut();
        let mut stream: hipStream_t = std::ptr::null_mut();
        let fake_stream = 0x1000 as hipStream_t;
        // SAFETY: valid out-pointers; the handle is live until destroyed.
        unsafe {
            assert_eq!(rocblas_create_handle(&mut h), Ok(()));
            assert_eq!(rocblas_set_stream(h, fake_stream), Ok(()));
            assert_eq!(rocblas_get_stream(h, &mut stream), Ok(()));
            assert_eq!(stream, fake_stream);
            assert_eq!(
                rocblas_get_stream(h, std::ptr::null_mut()),
                Err(rocblas_status::rocblas_status_invalid_pointer)
            );
            for mode in [0, 1] {
                assert_eq!(
                    rocblas_set_pointer_mode(h, rocblas_pointer_mode(mode)),
                    Ok(())
                );
            }
            assert_eq!(
                rocblas_set_pointer_mode(h, rocblas_pointer_mode(2)),
                Err(rocblas_status::rocblas_status_invalid_value)
            );
            assert_eq!(rocblas_destroy_handle(h), Ok(()));
        }
    }

    #[test]
    fn null_handles_and_out_pointers_are_refused() {
        let invalid_handle = Err(rocblas_status::rocblas_status_invalid_handle);
        // SAFETY: null pointers are rejected before any use.
        unsafe {
            assert_eq!(
                rocblas_create_handle(std::ptr::null_mut()),
                Err(rocblas_status::rocblas_status_invalid_pointer)
            );
            assert_eq!(rocblas_destroy_handle(std::ptr::null_mut()), invalid_handle);
            assert_eq!(
                rocblas_set_stream(std::ptr::null_mut(), std::ptr::null_mut()),
                invalid_handle
            );
            assert_eq!(
                rocblas_set_pointer_mode(
                    std::ptr::null_mut(),
                    rocblas_pointer_mode::rocblas_pointer_mode_host
                ),
                invalid_handle
            );
        }
    }
}
