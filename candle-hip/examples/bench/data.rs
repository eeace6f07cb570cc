//! Data-movement cases: the device copy reference, reductions, indexing,
//! strided copies and transposes, copy2d (KV-cache concatenation), fill and
//! random numbers.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::ReduceOp;
use candle_core::scalar::Scalar;
use candle_core::{DType, Layout};
use candle_hip::HipDevice;

use crate::cases::{Case, Measure, bytes, dims, op};
use crate::inputs;

/// Elements of the copy reference: 1 GiB of f32.
const COPY_ELEMS: usize = 1 << 28;
/// Elements of the fill and random cases (64 Mi).
const N: usize = 1 << 26;
/// Rows and vocabulary of the softmax-sized reductions.
const ROWS: usize = 8192;
const VOCAB: usize = 32000;
/// Side of the square transposes and reductions.
const SIDE: usize = 8192;

/// Every data-movement case except the copy reference.
pub fn cases() -> Vec<Case> {
    let mut cases = vec![
        reduce("sum_last", ReduceOp::Sum, DType::F32, &[ROWS, VOCAB], &[1]),
        reduce("max_last", ReduceOp::Max, DType::BF16, &[ROWS, VOCAB], &[1]),
        reduce(
            "argmax_last",
            ReduceOp::ArgMax,
            DType::F32,
            &[ROWS, VOCAB],
            &[1],
        ),
        reduce("sum_dim0", ReduceOp::Sum, DType::F32, &[SIDE, SIDE], &[0]),
        reduce("sum_all", ReduceOp::Sum, DType::F32, &[SIDE, SIDE], &[0, 1]),
        index_select(),
        gather(),
        scatter_add(),
        index_add(),
        transpose(DType::F32),
        transpose(DType::BF16),
        permute_heads(),
        narrow_copy(),
        kv_cat(),
        fill(),
    ];
    cases.extend(random());
    cases
}

/// hipMemcpy device to device of 1 GiB: the bandwidth reference.
pub fn memcpy() -> Case {
    let work = Measure::Bytes(2 * bytes(COPY_ELEMS, DType::F32));
    Case::new(
        "copy",
        "memcpy_dtod",
        dims(&[COPY_ELEMS]),
        "f32",
        work,
        |dev| {
            let src = inputs::signed(dev, &[COPY_ELEMS], DType::F32)?;
            let stream = dev.stream().clone();
            let mut dst = stream.alloc_zeros::<u8>(src.buffer().len())?;
            op(move || Ok(stream.memcpy_dtod(src.buffer(), &mut dst)?))
        },
    )
}

/// A reduction of `shape` over `over`; the output has the kept dims.
fn reduce(
    name: &'static str,
    reduce: ReduceOp,
    dtype: DType,
    shape: &[usize],
    over: &[usize],
) -> Case {
    let n: usize = shape.iter().product();
    let out: usize = shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !over.contains(i))
        .map(|(_, d)| d)
        .product();
    let out_dtype = match reduce {
        ReduceOp::ArgMin | ReduceOp::ArgMax => DType::U32,
        _ => dtype,
    };
    let work = Measure::Bytes(bytes(n, dtype) + bytes(out, out_dtype));
    let (shape, over) = (shape.to_vec(), over.to_vec());
    Case::new(
        "reduce",
        name,
        dims(&shape),
        dtype.as_str(),
        work,
        move |dev| {
            let x = inputs::signed(dev, &shape, dtype)?;
            let l = Layout::contiguous(shape.as_slice());
            let over = over.clone();
            op(move || {
                x.reduce_op(reduce, &l, &over)?;
                Ok(())
            })
        },
    )
}

/// Embedding lookup: 8192 rows of a 32000 x 4096 bf16 table.
fn index_select() -> Case {
    let (vocab, hidden, count) = (VOCAB, 4096, 8192);
    let dtype = DType::BF16;
    let work = Measure::Bytes(2 * bytes(count * hidden, dtype) + bytes(count, DType::U32));
    let shape = format!("{} ids {count}", dims(&[vocab, hidden]));
    Case::new(
        "index",
        "index_select",
        shape,
        dtype.as_str(),
        work,
        move |dev| {
            let table = inputs::signed(dev, &[vocab, hidden], dtype)?;
            let ids = inputs::ids(dev, count, vocab)?;
            let (tl, il) = (
                Layout::contiguous((vocab, hidden)),
                Layout::contiguous(count),
            );
            op(move || {
                table.index_select(&ids, &tl, &il, 0)?;
                Ok(())
            })
        },
    )
}

/// Gather along the last dim: 8192 x 4096 positions out of 8192 x 32000.
fn gather() -> Case {
    let (rows, cols, picks) = (ROWS, VOCAB, 4096);
    let dtype = DType::F32;
    let n = rows * picks;
    let work = Measure::Bytes(2 * bytes(n, dtype) + bytes(n, DType::U32));
    let shape = format!("{} ids {}", dims(&[rows, cols]), dims(&[rows, picks]));
    Case::new("index", "gather", shape, dtype.as_str(), work, move |dev| {
        let src = inputs::signed(dev, &[rows, cols], dtype)?;
        let ids = inputs::ids(dev, n, cols)?;
        let (sl, il) = (
            Layout::contiguous((rows, cols)),
            Layout::contiguous((rows, picks)),
        );
        op(move || {
            src.gather(&sl, &ids, &il, 1)?;
            Ok(())
        })
    })
}

/// Sizes of the accumulate-into cases: 8192 x 4096 sources into 1024 x 4096.
const ACC_SRC: usize = 8192;
const ACC_DST: usize = 1024;
const ACC_COLS: usize = 4096;

/// scatter_add along dim 0 (in place).
fn scatter_add() -> Case {
    let dtype = DType::F32;
    let (src_n, dst_n) = (ACC_SRC * ACC_COLS, ACC_DST * ACC_COLS);
    let work =
        Measure::Bytes(bytes(src_n, dtype) + bytes(src_n, DType::U32) + 2 * bytes(dst_n, dtype));
    let shape = format!(
        "{} src {}",
        dims(&[ACC_DST, ACC_COLS]),
        dims(&[ACC_SRC, ACC_COLS])
    );
    Case::new(
        "index",
        "scatter_add",
        shape,
        dtype.as_str(),
        work,
        move |dev| {
            let mut dst = inputs::signed(dev, &[ACC_DST, ACC_COLS], dtype)?;
            let src = inputs::signed(dev, &[ACC_SRC, ACC_COLS], dtype)?;
            let ids = inputs::ids(dev, src_n, ACC_DST)?;
            let dl = Layout::contiguous((ACC_DST, ACC_COLS));
            let sl = Layout::contiguous((ACC_SRC, ACC_COLS));
            op(move || Ok(dst.scatter_add_set(&dl, &ids, &sl, &src, &sl, 0)?))
        },
    )
}

/// index_add along dim 0 (into a new copy of the destination).
fn index_add() -> Case {
    let dtype = DType::F32;
    let (src_n, dst_n) = (ACC_SRC * ACC_COLS, ACC_DST * ACC_COLS);
    let work =
        Measure::Bytes(bytes(src_n, dtype) + bytes(ACC_SRC, DType::U32) + 2 * bytes(dst_n, dtype));
    let shape = format!(
        "{} src {}",
        dims(&[ACC_DST, ACC_COLS]),
        dims(&[ACC_SRC, ACC_COLS])
    );
    Case::new(
        "index",
        "index_add",
        shape,
        dtype.as_str(),
        work,
        move |dev| {
            let dst = inputs::signed(dev, &[ACC_DST, ACC_COLS], dtype)?;
            let src = inputs::signed(dev, &[ACC_SRC, ACC_COLS], dtype)?;
            let ids = inputs::ids(dev, ACC_SRC, ACC_DST)?;
            let dl = Layout::contiguous((ACC_DST, ACC_COLS));
            let sl = Layout::contiguous((ACC_SRC, ACC_COLS));
            let il = Layout::contiguous(ACC_SRC);
            op(move || {
                dst.index_add(&dl, &ids, &il, &src, &sl, 0)?;
                Ok(())
            })
        },
    )
}

/// Copies every element of a random storage of `src_dims`, read through
/// `src_l`, into a preallocated contiguous destination (`copy_strided_src`).
fn strided_copy(
    name: &'static str,
    shape: String,
    dtype: DType,
    src_dims: Vec<usize>,
    src_l: impl Fn() -> candle_core::Result<Layout> + 'static,
) -> Case {
    let work = Measure::Bytes(2 * bytes(src_dims.iter().product(), dtype));
    Case::new("copy", name, shape, dtype.as_str(), work, move |dev| {
        let src = inputs::signed(dev, &src_dims, dtype)?;
        let layout = src_l()?;
        let mut dst = dev.zeros_impl(layout.shape(), dtype)?;
        op(move || Ok(src.copy_strided_src(&mut dst, 0, &layout)?))
    })
}

/// A square matrix transposed into a contiguous one.
fn transpose(dtype: DType) -> Case {
    strided_copy(
        "transpose",
        dims(&[SIDE, SIDE]),
        dtype,
        vec![SIDE, SIDE],
        || Layout::contiguous((SIDE, SIDE)).transpose(0, 1),
    )
}

/// (seq 4096, heads 32, dim 128) to (heads, seq, dim), as attention does.
fn permute_heads() -> Case {
    let d = [4096, 32, 128];
    strided_copy(
        "permute_0213",
        format!("{} t01", dims(&d)),
        DType::BF16,
        d.to_vec(),
        move || Layout::contiguous(&d[..]).transpose(0, 1),
    )
}

/// The left half of the columns of a square f32 matrix, made contiguous
/// (rows of a strided 2-D region: the copy2d path).
fn narrow_copy() -> Case {
    let half = SIDE / 2;
    let shape = format!("{} cols 0..{half}", dims(&[SIDE, SIDE]));
    Case::new(
        "copy",
        "narrow_copy",
        shape,
        "f32",
        Measure::Bytes(2 * bytes(SIDE * half, DType::F32)),
        move |dev| {
            let src = inputs::signed(dev, &[SIDE, SIDE], DType::F32)?;
            let layout = Layout::contiguous((SIDE, SIDE)).narrow(1, 0, half)?;
            let mut dst = dev.zeros_impl(layout.shape(), DType::F32)?;
            op(move || Ok(src.copy_strided_src(&mut dst, 0, &layout)?))
        },
    )
}

/// KV-cache concatenation along the sequence: two (32 heads, 2048, 128)
/// bf16 tensors into one (32, 4096, 128), one `copy2d` each, as candle's
/// `Tensor::cat` does for a non-leading dimension.
fn kv_cat() -> Case {
    let (heads, seq, dim) = (32, 2048, 128);
    let dtype = DType::BF16;
    let part = heads * seq * dim;
    let shape = format!("2 x {}", dims(&[heads, seq, dim]));
    Case::new(
        "copy",
        "kv_cat",
        shape,
        dtype.as_str(),
        Measure::Bytes(4 * bytes(part, dtype)),
        move |dev| {
            let a = inputs::signed(dev, &[heads, seq, dim], dtype)?;
            let b = inputs::signed(dev, &[heads, seq, dim], dtype)?;
            let mut dst = dev.zeros_impl(&(heads, 2 * seq, dim).into(), dtype)?;
            let (row, out_row) = (seq * dim, 2 * seq * dim);
            op(move || {
                a.copy2d(&mut dst, heads, row, row, out_row, 0, 0)?;
                b.copy2d(&mut dst, heads, row, row, out_row, 0, row)?;
                Ok(())
            })
        },
    )
}

/// const_set of every element.
fn fill() -> Case {
    Case::new(
        "copy",
        "fill",
        dims(&[N]),
        "f32",
        Measure::Bytes(bytes(N, DType::F32)),
        |dev| {
            let mut dst = inputs::signed(dev, &[N], DType::F32)?;
            let l = Layout::contiguous(N);
            op(move || Ok(dst.const_set(Scalar::F32(1.5), &l)?))
        },
    )
}

/// The device's random generators.
fn random() -> Vec<Case> {
    let make = |name: &'static str, dtype: DType, normal: bool| {
        Case::new(
            "random",
            name,
            dims(&[N]),
            dtype.as_str(),
            Measure::Bytes(bytes(N, dtype)),
            move |dev| {
                let dev: HipDevice = dev.clone();
                let shape = N.into();
                op(move || {
                    if normal {
                        dev.rand_normal(&shape, dtype, 0.0, 1.0)?;
                    } else {
                        dev.rand_uniform(&shape, dtype, 0.0, 1.0)?;
                    }
                    Ok(())
                })
            },
        )
    };
    vec![
        make("rand_uniform", DType::F32, false),
        make("rand_normal", DType::BF16, true),
    ]
}

/// Opens no device: the tests only check the case table.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_data_case_moves_bytes() {
        for case in cases().iter().chain([memcpy()].iter()) {
            assert!(
                matches!(case.measure, Measure::Bytes(b) if b > 0),
                "{}",
                case.key()
            );
        }
    }
}
