//! The benchmark cases: what each one runs and how much work it does.
//!
//! A case is keyed by `(op, shape, dtype)`; `benches/torch_bench.py` has
//! the same keys (`bench --list` and `torch_bench.py --list` print them).
//! Inputs are created by `prepare` (random, on the device) and live as long
//! as the returned closure, which runs the operation once per call.

use candle_core::DType;
use candle_hip::HipDevice;

use crate::{attention, compute, data, elementwise, fused, quantized};

/// Errors of the benchmark: candle's, hip-safe's and our own messages.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// One run of a case's operation (outputs are dropped, in stream order).
pub type Op = Box<dyn FnMut() -> BenchResult<()>>;

/// Creates a case's inputs and returns the operation over them.
type Prepare = Box<dyn Fn(&HipDevice) -> BenchResult<Op>>;

/// What a case measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Device time of a memory-bound op moving this many bytes (read + written).
    Bytes(u64),
    /// Device time of a compute-bound op doing this many floating-point operations.
    Flops(u64),
    /// Host time per op, ops queued back to back (per-op host overhead).
    HostAsync,
    /// Host time per op, each op waited for (latency of one small op).
    HostSync,
}

impl Measure {
    /// GB/s or TFLOP/s achieved in `us` microseconds; `None` for host cases.
    pub fn rate(self, us: f64) -> Option<f64> {
        match self {
            _ if us <= 0.0 => None,
            Measure::Bytes(b) => Some(b as f64 / (us * 1e3)),
            Measure::Flops(f) => Some(f as f64 / (us * 1e6)),
            Measure::HostAsync | Measure::HostSync => None,
        }
    }

    /// `bytes <n>`, `flops <n>`, `host_async` or `host_sync` (for `--list`).
    pub fn describe(self) -> String {
        match self {
            Measure::Bytes(b) => format!("bytes {b}"),
            Measure::Flops(f) => format!("flops {f}"),
            Measure::HostAsync => "host_async".to_string(),
            Measure::HostSync => "host_sync".to_string(),
        }
    }

    /// The unit of the rate column.
    pub fn metric(self) -> &'static str {
        match self {
            Measure::Bytes(_) => "GB/s",
            Measure::Flops(_) => "TFLOP/s",
            Measure::HostAsync | Measure::HostSync => "us/op",
        }
    }
}

/// One benchmark case.
pub struct Case {
    /// The op family (unary, binary, reduce, matmul, ...).
    pub family: &'static str,
    /// The operation.
    pub op: &'static str,
    /// Shapes and parameters, as printed.
    pub shape: String,
    /// The dtype (`from->to` for casts).
    pub dtype: String,
    /// What is measured.
    pub measure: Measure,
    /// Creates the inputs and the operation.
    pub prepare: Prepare,
}

impl Case {
    /// A case; `prepare` creates its inputs on a device.
    pub fn new(
        family: &'static str,
        op: &'static str,
        shape: impl Into<String>,
        dtype: impl Into<String>,
        measure: Measure,
        prepare: impl Fn(&HipDevice) -> BenchResult<Op> + 'static,
    ) -> Case {
        Case {
            family,
            op,
            shape: shape.into(),
            dtype: dtype.into(),
            measure,
            prepare: Box::new(prepare),
        }
    }

    /// `op,shape,dtype`: the key the report joins on.
    pub fn key(&self) -> String {
        format!("{},{},{}", self.op, self.shape, self.dtype)
    }
}

/// Boxes an operation.
pub fn op(f: impl FnMut() -> BenchResult<()> + 'static) -> BenchResult<Op> {
    Ok(Box::new(f))
}

/// `a x b x c` as `axbxc`.
pub fn dims(d: &[usize]) -> String {
    d.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}

/// Bytes of `n` elements of `dtype`.
pub fn bytes(n: usize, dtype: DType) -> u64 {
    (n * dtype.size_in_bytes()) as u64
}

/// The device-to-device copy that every other case's bandwidth is compared with.
pub fn reference() -> Case {
    data::memcpy()
}

/// Every case except [`reference`], in report order.
pub fn all() -> Vec<Case> {
    let mut cases = Vec::new();
    cases.extend(elementwise::cases());
    cases.extend(data::cases());
    cases.extend(fused::cases());
    cases.extend(compute::cases());
    cases.extend(quantized::cases());
    cases.extend(attention::cases());
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique() {
        let mut keys: Vec<String> = all().iter().map(Case::key).collect();
        keys.push(reference().key());
        let count = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), count);
    }

    #[test]
    fn rates() {
        assert_eq!(Measure::Bytes(2_000_000).rate(1000.0), Some(2.0));
        assert_eq!(Measure::Flops(3_000_000_000).rate(1000.0), Some(3.0));
        assert_eq!(Measure::HostAsync.rate(5.0), None);
        assert_eq!(Measure::Bytes(1).rate(0.0), None);
    }
}
