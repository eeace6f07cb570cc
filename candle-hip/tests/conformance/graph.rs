//! HIP graphs of storage ops (`HipDevice::capture`): a static-shape step
//! that selects a row by a position held on the device, multiplies it by a
//! matrix, applies exp and an affine map and writes the result into a
//! storage from before the capture. Every replay must equal the same ops
//! run eagerly for the position written before it, bit for bit (the same
//! kernels with the same arguments); captured work must not run at
//! capture time; a read to the host inside a capture is an error that
//! leaves the device usable.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::Exp;
use candle_core::{CpuStorage, DType, Layout, Result};
use candle_hip::{HipDevice, HipStorage};

use crate::common::{Rng, device, hip_values, upload};

const ROWS: usize = 16;
const WIDTH: usize = 64;

/// The step's operands: a table, a matrix, the position and the output.
struct Step {
    table: HipStorage,
    matrix: HipStorage,
    pos: HipStorage,
    out: HipStorage,
}

impl Step {
    fn new(dev: &HipDevice, rng: &mut Rng) -> Step {
        let table = rng.values(ROWS * WIDTH, -1.0, 1.0);
        let matrix = rng.values(WIDTH * WIDTH, -0.125, 0.125);
        Step {
            table: upload(dev, &table, &Layout::contiguous((ROWS, WIDTH)), DType::F32),
            matrix: upload(
                dev,
                &matrix,
                &Layout::contiguous((WIDTH, WIDTH)),
                DType::F32,
            ),
            pos: dev
                .storage_from_cpu_storage(&CpuStorage::U32(vec![0]))
                .unwrap(),
            out: dev.zeros_impl(&(1, WIDTH).into(), DType::F32).unwrap(),
        }
    }

    /// Writes `pos` into the position storage in place (outside captures).
    fn set_pos(&mut self, dev: &HipDevice, pos: u32) {
        let src = dev
            .storage_from_cpu_storage(&CpuStorage::U32(vec![pos]))
            .unwrap();
        src.copy_strided_src(&mut self.pos, 0, &Layout::contiguous(1))
            .unwrap();
    }

    /// out = exp(table[pos] · matrix) * 0.5 + 0.25, with static shapes.
    fn run(&mut self) -> Result<()> {
        let row = self.table.index_select(
            &self.pos,
            &Layout::contiguous((ROWS, WIDTH)),
            &Layout::contiguous(1),
            0,
        )?;
        let product = row.matmul(
            &self.matrix,
            (1, 1, WIDTH, WIDTH),
            &Layout::contiguous((1, WIDTH)),
            &Layout::contiguous((WIDTH, WIDTH)),
        )?;
        let row_layout = Layout::contiguous((1, WIDTH));
        let e = product.unary_impl::<Exp>(&row_layout)?;
        let y = e.affine(&row_layout, 0.5, 0.25)?;
        y.copy_strided_src(&mut self.out, 0, &row_layout)
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn captured_steps_replay_like_eager_ones() {
    let dev = device();
    let mut rng = Rng(0x6a09);
    let mut step = Step::new(&dev, &mut rng);
    let positions = [3u32, 0, 15, 7, 7, 11];
    let mut eager = Vec::new();
    for &pos in &positions {
        step.set_pos(&dev, pos);
        step.run().unwrap();
        eager.push(hip_values(&step.out));
    }
    step.set_pos(&dev, 9);
    step.run().unwrap();
    let before = hip_values(&step.out);
    step.set_pos(&dev, 1);
    let shared = &mut step;
    // SAFETY: `step`'s storages outlive the graph (dropped at the end).
    let ((), graph) = unsafe { dev.capture(|| shared.run()) }.unwrap();
    assert_eq!(hip_values(&step.out), before, "capture ran the work");
    println!("graph of {} nodes", graph.node_count());
    for (&pos, want) in positions.iter().zip(&eager) {
        step.set_pos(&dev, pos);
        graph.launch().unwrap();
        assert_eq!(&hip_values(&step.out), want, "replay at position {pos}");
    }
    drop(graph);
    // A read to the host inside a capture is refused; the device works on.
    // SAFETY: the capture fails; nothing is launched.
    let refused = unsafe { dev.capture(|| step.out.to_cpu_storage()) };
    assert!(refused.is_err());
    step.set_pos(&dev, positions[0]);
    step.run().unwrap();
    assert_eq!(hip_values(&step.out), eager[0]);
    dev.synchronize().unwrap();
}
