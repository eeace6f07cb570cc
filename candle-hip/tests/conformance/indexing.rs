//! Indexing: index_select, gather, scatter, scatter_add and index_add with
//! every index dtype, including the "no index" marker, indices past the
//! dimension and many updates of one element. Scatter and index_add apply
//! the updates of each element in index order, rounding after each: their
//! results equal the CPU backend's bit for bit (`Tol::EXACT`).

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, DType, Layout, Result, Shape};
use candle_hip::{HipDevice, HipStorage};

use crate::common::{Ctx, DENSE_FORMS, Domain, FORMS, Form, Rng, Tol, cpu, describe, strict};

/// Index values for a dimension of `size`: valid positions, and now and then
/// the dtype's maximum, candle's "no index" marker.
fn random_ids(rng: &mut Rng, dtype: DType, n: usize, size: usize) -> CpuStorage {
    let ids: Vec<u64> = (0..n)
        .map(|_| {
            if size == 0 || rng.chance(0.1) {
                u64::MAX
            } else {
                rng.below(size) as u64
            }
        })
        .collect();
    match dtype {
        DType::U8 => CpuStorage::U8(
            ids.iter()
                .map(|&v| if v == u64::MAX { u8::MAX } else { v as u8 })
                .collect(),
        ),
        DType::U32 => CpuStorage::U32(
            ids.iter()
                .map(|&v| if v == u64::MAX { u32::MAX } else { v as u32 })
                .collect(),
        ),
        DType::I64 => CpuStorage::I64(
            ids.iter()
                .map(|&v| if v == u64::MAX { i64::MAX } else { v as i64 })
                .collect(),
        ),
        DType::I16 => CpuStorage::I16(
            ids.iter()
                .map(|&v| if v == u64::MAX { i16::MAX } else { v as i16 })
                .collect(),
        ),
        DType::I32 => CpuStorage::I32(
            ids.iter()
                .map(|&v| if v == u64::MAX { i32::MAX } else { v as i32 })
                .collect(),
        ),
        other => panic!("no index data for {other:?}"),
    }
}

/// index_select with every index dtype of `ids` and value dtype of `values`
/// (as for every case function of this module).
pub fn index_select(ctx: &mut Ctx, ids: &[DType], values: &[DType]) {
    for &ids_dtype in ids {
        let name = format!("index_select (ids {})", ids_dtype.as_str());
        for &dtype in values {
            for shape in ctx.shapes.clone() {
                if shape.is_empty() {
                    continue;
                }
                for form in [Form::Contiguous, Form::Offset, Form::Permuted] {
                    let dim = ctx.rng.below(shape.len());
                    let (src, ls) = ctx.input(dtype, &shape, form, Domain::Special);
                    let n_ids = ctx.rng.below(8);
                    // Indices contiguous, or every other element of a longer buffer.
                    let strided = ctx.rng.chance(0.5);
                    let len = if strided { 2 * n_ids + 1 } else { n_ids };
                    let ids = random_ids(&mut ctx.rng, ids_dtype, len, shape[dim]);
                    let lids = if strided {
                        Layout::new(Shape::from(n_ids), vec![2], 1)
                    } else {
                        Layout::contiguous(n_ids)
                    };
                    let ids = ctx.upload(ids);
                    let want = cpu(|| src.cpu.index_select(&ids.cpu, &ls, &lids, dim));
                    let got = src.hip.index_select(&ids.hip, &ls, &lids, dim);
                    let desc = || {
                        format!(
                            "{} dim {dim} ids {:?}",
                            describe(&shape, &[&ls, &lids]),
                            ids.cpu
                        )
                    };
                    ctx.tally
                        .check(&name, dtype, desc, want, got, strict(dtype));
                }
            }
        }
    }
}

/// A few scatter / index_add updates (fewer than `bound`).
pub fn few_updates(rng: &mut Rng, bound: usize) -> usize {
    rng.below(bound)
}

/// Updates that make several batches of the kernels' column walks (with
/// many repeated positions).
pub fn many_updates(rng: &mut Rng, _bound: usize) -> usize {
    20 + rng.below(40)
}

/// `shape` with dimension `dim` replaced by `size`.
fn with_dim(shape: &[usize], dim: usize, size: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[dim] = size;
    s
}

pub fn gather(ctx: &mut Ctx, ids: &[DType], values: &[DType]) {
    for &ids_dtype in ids {
        let name = format!("gather (ids {})", ids_dtype.as_str());
        for &dtype in values {
            for shape in ctx.shapes.clone() {
                if shape.is_empty() {
                    continue;
                }
                for form in DENSE_FORMS {
                    let dim = ctx.rng.below(shape.len());
                    let (src, ls) = ctx.input(dtype, &shape, form, Domain::Special);
                    let ids_shape = with_dim(&shape, dim, ctx.rng.below(5));
                    let n: usize = ids_shape.iter().product();
                    let ids = random_ids(&mut ctx.rng, ids_dtype, n, shape[dim]);
                    let ids = ctx.upload(ids);
                    let lids = Layout::contiguous(ids_shape.as_slice());
                    let want = cpu(|| src.cpu.gather(&ls, &ids.cpu, &lids, dim));
                    let got = src.hip.gather(&ls, &ids.hip, &lids, dim);
                    let desc =
                        || format!("{} dim {dim} ids {ids_shape:?}", describe(&shape, &[&ls]));
                    ctx.tally
                        .check(&name, dtype, desc, want, got, strict(dtype));
                }
            }
        }
    }
}

/// Operand values of scatter, scatter_add and index_add: for integers,
/// small enough that many updates of one element stay in range.
fn update_domain(dtype: DType) -> Domain {
    if dtype.is_float() {
        Domain::Signed
    } else {
        Domain::Ints(0, 3)
    }
}

/// A copy of `dst` with `src` scattered into it along `dim` at `ids`:
/// added to what is there when `add`, else in its place. The CPU reference
/// and the device make the same calls.
fn scattered<S: BackendStorage>(
    add: bool,
    (dst, ld): (&S, &Layout),
    (ids, lids): (&S, &Layout),
    (src, ls): (&S, &Layout),
    dim: usize,
) -> Result<S> {
    let mut d = dst.try_clone(ld)?;
    if add {
        d.scatter_add_set(ld, ids, lids, src, ls, dim)?;
    } else {
        d.scatter_set(ld, ids, lids, src, ls, dim)?;
    }
    Ok(d)
}

pub fn scatter(ctx: &mut Ctx, ids: &[DType], values: &[DType]) {
    for add in [false, true] {
        for &ids_dtype in ids {
            let name = format!(
                "{} (ids {})",
                if add { "scatter_add" } else { "scatter" },
                ids_dtype.as_str()
            );
            for &dtype in values {
                let domain = update_domain(dtype);
                for shape in ctx.shapes.clone() {
                    if shape.is_empty() {
                        continue;
                    }
                    for form in DENSE_FORMS {
                        let dim = ctx.rng.below(shape.len());
                        let (dst, ld) = ctx.input(dtype, &shape, form, domain);
                        let src_shape = with_dim(&shape, dim, (ctx.updates)(&mut ctx.rng, 5));
                        let (src, ls) = ctx.input(dtype, &src_shape, Form::Contiguous, domain);
                        let n: usize = src_shape.iter().product();
                        let ids = random_ids(&mut ctx.rng, ids_dtype, n, shape[dim]);
                        let ids = ctx.upload(ids);
                        let lids = Layout::contiguous(src_shape.as_slice());
                        let want = cpu(|| {
                            scattered(
                                add,
                                (&dst.cpu, &ld),
                                (&ids.cpu, &lids),
                                (&src.cpu, &ls),
                                dim,
                            )
                        });
                        let got = scattered(
                            add,
                            (&dst.hip, &ld),
                            (&ids.hip, &lids),
                            (&src.hip, &ls),
                            dim,
                        );
                        let desc =
                            || format!("{} dim {dim} src {src_shape:?}", describe(&shape, &[&ld]));
                        ctx.tally.check(&name, dtype, desc, want, got, Tol::EXACT);
                    }
                }
            }
        }
    }
}

pub fn index_add(ctx: &mut Ctx, ids: &[DType], values: &[DType]) {
    for &ids_dtype in ids {
        let name = format!("index_add (ids {})", ids_dtype.as_str());
        for &dtype in values {
            let domain = update_domain(dtype);
            for shape in ctx.shapes.clone() {
                if shape.is_empty() {
                    continue;
                }
                for form in FORMS {
                    let dim = ctx.rng.below(shape.len());
                    let (dst, ld) = ctx.input(dtype, &shape, form, domain);
                    let n_ids = (ctx.updates)(&mut ctx.rng, 6);
                    let src_shape = with_dim(&shape, dim, n_ids);
                    let (src, ls) = ctx.input(dtype, &src_shape, Form::Contiguous, domain);
                    let ids = random_ids(&mut ctx.rng, ids_dtype, n_ids, shape[dim]);
                    let ids = ctx.upload(ids);
                    let lids = Layout::contiguous(n_ids);
                    let want = cpu(|| dst.cpu.index_add(&ld, &ids.cpu, &lids, &src.cpu, &ls, dim));
                    let got = dst.hip.index_add(&ld, &ids.hip, &lids, &src.hip, &ls, dim);
                    let desc =
                        || format!("{} dim {dim} ids {:?}", describe(&shape, &[&ld]), ids.cpu);
                    ctx.tally.check(&name, dtype, desc, want, got, Tol::EXACT);
                }
            }
        }
    }
}

/// Indices of `dtype` into a dimension of `size` for the device and the CPU:
/// mostly among the first `distinct` positions (many updates of the same
/// element), some the "no index" marker, some past the dimension (the CPU
/// backend rejects those; the device skips them, so the CPU gets the marker
/// in their place), for i64 some negative; and whether any index is past
/// the dimension (the device must then report it).
fn ids_with_edges(
    rng: &mut Rng,
    dtype: DType,
    n: usize,
    size: usize,
    distinct: usize,
) -> (CpuStorage, CpuStorage, bool) {
    let max = match dtype {
        DType::U8 => u64::from(u8::MAX),
        DType::U32 => u64::from(u32::MAX),
        DType::I16 => i16::MAX as u64,
        DType::I32 => i32::MAX as u64,
        _ => i64::MAX as u64,
    };
    let signed = matches!(dtype, DType::I16 | DType::I32 | DType::I64);
    let (mut dev, mut host) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let id = match rng.below(10) {
            0 => max,
            1 if (size as u64) < max => (size as u64 + rng.below(1000) as u64).min(max - 1),
            2 if signed => (-1 - rng.below(5) as i64) as u64,
            // Past u32: a conversion to u32 indices must not wrap it into range.
            3 if dtype == DType::I64 => (1u64 << 32) + rng.below(5) as u64,
            _ => rng.below(distinct.min(size).min(max as usize).max(1)) as u64,
        };
        dev.push(id);
        host.push(if id < size as u64 { id } else { max });
    }
    let storage = |ids: Vec<u64>| match dtype {
        DType::U8 => CpuStorage::U8(ids.iter().map(|&v| v as u8).collect()),
        DType::U32 => CpuStorage::U32(ids.iter().map(|&v| v as u32).collect()),
        DType::I16 => CpuStorage::I16(ids.iter().map(|&v| v as i16).collect()),
        DType::I32 => CpuStorage::I32(ids.iter().map(|&v| v as i32).collect()),
        _ => CpuStorage::I64(ids.iter().map(|&v| v as i64).collect()),
    };
    let past = dev.iter().zip(&host).any(|(d, h)| d != h);
    (storage(dev), storage(host), past)
}

/// `got`, when the device's next synchronisation reports an index past the
/// dimension for `op` exactly when `past`; otherwise an error saying what
/// was reported instead (a failed case).
fn with_fault_report(
    dev: &HipDevice,
    got: Result<HipStorage>,
    past: bool,
    op: &str,
) -> Result<HipStorage> {
    let report = dev.synchronize();
    match (&report, past) {
        (Ok(()), false) => got,
        (Err(e), true) if e.to_string().contains(op) => got,
        _ => Err(candle_core::Error::Msg(format!(
            "indices past the dimension: {past}, but the device reported {:?}",
            report.err().map(|e| e.to_string())
        ))),
    }
}

/// Cases of the shared-memory tile form of scatter, scatter_add and
/// index_add (and of the forms next to it): destinations of several row
/// ranges (not whole ones), column counts that are not whole tiles, left >
/// 1, many updates of the same element, the marker and indices past the
/// dimension; every value and index dtype; exact equality.
pub fn update_tiles(ctx: &mut Ctx, ids: &[DType], values: &[DType]) {
    // (destination shape, dim, updates, distinct positions)
    let cases: [(&[usize], usize, usize, usize); 5] = [
        (&[2, 2500, 20], 1, 3000, 2500),
        (&[300, 70], 0, 500, 6),
        (&[100, 40], 0, 300, 100),
        (&[3, 40, 9], 1, 600, 3),
        (&[2, 200, 1024], 1, 400, 200),
    ];
    for (shape, dim, n, distinct) in cases {
        for &ids_dtype in ids {
            for &dtype in values {
                let domain = update_domain(dtype);
                let (dst, ld) = ctx.input(dtype, shape, Form::Contiguous, domain);
                let src_shape = with_dim(shape, dim, n);
                let (src, ls) = ctx.input(dtype, &src_shape, Form::Contiguous, domain);
                let desc = || format!("dst {shape:?} dim {dim} src {src_shape:?}");
                for add in [false, true] {
                    let count: usize = src_shape.iter().product();
                    let (dev_ids, cpu_ids, past) =
                        ids_with_edges(&mut ctx.rng, ids_dtype, count, shape[dim], distinct);
                    let hip_ids = ctx.dev.storage_from_cpu_storage(&dev_ids).expect("upload");
                    let lids = Layout::contiguous(src_shape.as_slice());
                    let want = cpu(|| {
                        scattered(
                            add,
                            (&dst.cpu, &ld),
                            (&cpu_ids, &lids),
                            (&src.cpu, &ls),
                            dim,
                        )
                    });
                    let got = scattered(
                        add,
                        (&dst.hip, &ld),
                        (&hip_ids, &lids),
                        (&src.hip, &ls),
                        dim,
                    );
                    let (op, reported) = if add {
                        ("scatter_add", "scatter-add")
                    } else {
                        ("scatter", "scatter")
                    };
                    let got = with_fault_report(&ctx.dev, got, past, reported);
                    let name = format!("{op} tiles (ids {})", ids_dtype.as_str());
                    ctx.tally.check(&name, dtype, desc, want, got, Tol::EXACT);
                }
                let (dev_ids, cpu_ids, past) =
                    ids_with_edges(&mut ctx.rng, ids_dtype, n, shape[dim], distinct);
                let hip_ids = ctx.dev.storage_from_cpu_storage(&dev_ids).expect("upload");
                let lids = Layout::contiguous(n);
                let want = cpu(|| dst.cpu.index_add(&ld, &cpu_ids, &lids, &src.cpu, &ls, dim));
                let got = dst.hip.index_add(&ld, &hip_ids, &lids, &src.hip, &ls, dim);
                let got = with_fault_report(&ctx.dev, got, past, "index-add");
                let name = format!("index_add tiles (ids {})", ids_dtype.as_str());
                ctx.tally.check(&name, dtype, desc, want, got, Tol::EXACT);
            }
        }
    }
}
