//! GGUF-quantized linear layers of LLM decoding: `x (m, k) @ W^T` with `W`
//! `(n, k)` in GGML blocks (`candle_hip::quantized`), for m = 1 and 4 and the
//! projections of an 8B Llama (as `compute::decode_linears` in bf16). The
//! work is counted in bytes: the weight's blocks, the f32 input and output.

use candle_core::quantized::GgmlDType;
use candle_core::{DType, Layout, Shape};
use candle_hip::quantized::QuantizedStorage;

use crate::cases::{Case, Measure, dims, op};
use crate::inputs;

/// Every quantized case.
pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (name, dtype) in [
        ("q4_0", GgmlDType::Q4_0),
        ("q8_0", GgmlDType::Q8_0),
        ("q4k", GgmlDType::Q4K),
        ("q6k", GgmlDType::Q6K),
    ] {
        for (k, n) in [(4096, 14336), (14336, 4096), (4096, 128_256)] {
            for m in [1, 4] {
                let weight = n * k / dtype.block_size() * dtype.type_size();
                let work = Measure::Bytes((weight + 4 * (m * k + m * n)) as u64);
                cases.push(Case::new(
                    "quantized",
                    "qlinear",
                    dims(&[m, n, k]),
                    name,
                    work,
                    move |dev| {
                        let w =
                            QuantizedStorage::from_blocks(dev, dtype, &inputs::host_bytes(weight))?;
                        let x = inputs::signed(dev, &[1, m, k], DType::F32)?;
                        let l = Layout::contiguous((1, m, k));
                        let w_shape = Shape::from((n, k));
                        op(move || {
                            w.matmul_t(&w_shape, &x, &l)?;
                            Ok(())
                        })
                    },
                ));
            }
        }
    }
    cases
}
