//! Random number generation on the device: the distributions of
//! rand_uniform and rand_normal, and the seed.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, DType, Shape};

use crate::common::{FLOATS, Tol, Values, compare, device, values};

/// Mean, variance, minimum and maximum of the values of a float storage.
pub fn moments(s: &CpuStorage) -> (f64, f64, f64, f64) {
    let Values::Float(v) = values(s) else {
        panic!("not floats")
    };
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, var, min, max)
}

#[test]
#[ignore = "needs a HIP device"]
fn random_numbers_follow_their_distribution() {
    let dev = device();
    let shape = Shape::from((1000, 1001));
    for dtype in FLOATS {
        dev.set_seed(7).unwrap();
        assert_eq!(dev.get_current_seed().unwrap(), 7);
        let u = dev
            .rand_uniform(&shape, dtype, -2.0, 6.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        let (mean, var, min, max) = moments(&u);
        println!("{dtype:?} uniform[-2, 6): mean {mean:.4} var {var:.4} min {min} max {max}");
        assert!((mean - 2.0).abs() < 0.02, "{dtype:?} mean {mean}");
        assert!((var - 64.0 / 12.0).abs() < 0.05, "{dtype:?} var {var}");
        assert!(min >= -2.0 && max < 6.0, "{dtype:?} range {min}..{max}");
        let n = dev
            .rand_normal(&shape, dtype, 1.5, 3.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        let (mean, var, _, _) = moments(&n);
        println!("{dtype:?} normal(1.5, 3): mean {mean:.4} var {var:.4}");
        assert!((mean - 1.5).abs() < 0.02, "{dtype:?} mean {mean}");
        assert!((var - 9.0).abs() < 0.1, "{dtype:?} var {var}");

        // The same seed gives the same numbers; successive calls differ.
        dev.set_seed(7).unwrap();
        let again = dev
            .rand_uniform(&shape, dtype, -2.0, 6.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        assert!(
            compare(&again, &u, Tol::EXACT).is_ok(),
            "{dtype:?} not reproducible"
        );
        let next = dev
            .rand_uniform(&shape, dtype, -2.0, 6.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        assert!(
            compare(&next, &u, Tol::EXACT).is_err(),
            "{dtype:?} repeated"
        );
    }
    for dtype in [DType::U8, DType::U32, DType::I64] {
        assert!(dev.rand_uniform(&shape, dtype, 0.0, 1.0).is_err());
        assert!(dev.rand_normal(&shape, dtype, 0.0, 1.0).is_err());
    }
}
