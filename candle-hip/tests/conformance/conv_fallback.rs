//! A convolution MIOpen fails on runs through im2col + GEMM under
//! `ConvPath::Auto`. On the NVIDIA test platform the shim's
//! `HIP_ON_CUDA_MIOPEN_REFUSE` makes every MIOpen Find fail as real MIOpen
//! does for configurations it has no solver for.

use candle_core::backend::BackendDevice;
use candle_core::{CpuStorage, Layout};
use candle_hip::HipStorage;
use candle_hip::conv::{ConvParams, ConvPath, conv_transpose2d, conv2d};

use crate::common::{device, hip_values};

const REFUSE: &str = "HIP_ON_CUDA_MIOPEN_REFUSE";

type Conv = fn(
    &HipStorage,
    &Layout,
    &HipStorage,
    &Layout,
    &ConvParams<2>,
    ConvPath,
) -> candle_core::Result<HipStorage>;

#[test]
#[ignore = "needs a HIP device"]
fn miopen_failures_fall_back_to_gemm() {
    // SAFETY: the GPU suite runs one test at a time (--test-threads=1), so
    // no other thread reads the environment while it changes.
    unsafe { std::env::set_var(REFUSE, "1") };
    let dev = device();
    let upload = |n: usize| {
        let v = (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
        dev.storage_from_cpu_storage(&CpuStorage::F32(v)).unwrap()
    };
    let x = upload(2 * 4 * 9 * 10);
    let xl = Layout::contiguous((2, 4, 9, 10));
    let w = upload(4 * 4 * 3 * 3);
    let wl = Layout::contiguous((4, 4, 3, 3));
    let params = ConvParams {
        dilation: [2, 1],
        ..ConvParams::uniform(1, 1, 1)
    };
    let convs: [(&str, Conv); 2] = [("conv2d", conv2d), ("conv_transpose2d", conv_transpose2d)];
    let mut refused = 0;
    for (name, conv) in convs {
        let run = |path| conv(&x, &xl, &w, &wl, &params, path);
        match run(ConvPath::Miopen) {
            Err(e) => {
                assert!(
                    e.to_string().to_lowercase().contains("miopen"),
                    "{name}: {e}"
                );
                refused += 1;
            }
            // Real MIOpen ignores the shim's variable.
            Ok(_) => println!("{name}: MIOpen ran (not the test platform's shim)"),
        }
        let gemm = hip_values(&run(ConvPath::Gemm).unwrap());
        for attempt in ["first", "repeat"] {
            let auto = hip_values(&run(ConvPath::Auto).unwrap());
            assert_eq!(
                auto, gemm,
                "{name} {attempt}: Auto differs from the GEMM path"
            );
        }
    }
    dev.synchronize().unwrap();
    // SAFETY: as above.
    unsafe { std::env::remove_var(REFUSE) };
    println!("conformance conv fallback: 2 cases, 0 failures ({refused} refused by MIOpen)");
}
