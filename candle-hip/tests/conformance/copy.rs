//! Copies: copy_strided_src into a larger destination, const_set over a
//! layout, copy2d, and the round trip through device memory (upload,
//! download, zeros).

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Layout, Shape};

use crate::common::{
    Ctx, Domain, FORMS, NUMERIC, cpu, describe, random_storage, raw_bytes, strict,
};

pub fn copies(ctx: &mut Ctx, dtypes: &[DType]) {
    for &dtype in dtypes {
        for shape in ctx.shapes.clone() {
            for form in FORMS {
                // copy_strided_src into the middle of a larger destination.
                let (src, ls) = ctx.input(dtype, &shape, form, Domain::Special);
                let numel: usize = shape.iter().product();
                let offset = ctx.rng.below(4);
                let len = numel + offset + ctx.rng.below(4);
                let dst = random_storage(&mut ctx.rng, dtype, len, Domain::Signed);
                let dst = ctx.upload(dst);
                let whole = Layout::contiguous(len);
                let want = cpu(|| {
                    dst.cpu.try_clone(&whole).and_then(|mut d| {
                        src.cpu.copy_strided_src(&mut d, offset, &ls)?;
                        Ok(d)
                    })
                });
                let got = dst.hip.try_clone(&whole).and_then(|mut d| {
                    src.hip.copy_strided_src(&mut d, offset, &ls)?;
                    Ok(d)
                });
                let desc = || format!("{} dst offset {offset}", describe(&shape, &[&ls]));
                ctx.tally
                    .check("copy_strided_src", dtype, desc, want, got, strict(dtype));

                // const_set over the layout.
                let (dst, ld) = ctx.input(dtype, &shape, form, Domain::Signed);
                // The dummy dtypes have no scalars: a u8 one, which both
                // backends refuse.
                let value = match random_storage(&mut ctx.rng, dtype, 1, Domain::Special) {
                    _ if ctx.rng.chance(0.3) && NUMERIC.contains(&dtype) => Scalar::zero(dtype),
                    CpuStorage::U8(v) => Scalar::U8(v[0]),
                    CpuStorage::U32(v) => Scalar::U32(v[0]),
                    CpuStorage::I64(v) => Scalar::I64(v[0]),
                    CpuStorage::F16(v) => Scalar::F16(v[0]),
                    CpuStorage::BF16(v) => Scalar::BF16(v[0]),
                    CpuStorage::F32(v) => Scalar::F32(v[0]),
                    CpuStorage::F64(v) => Scalar::F64(v[0]),
                    CpuStorage::I16(v) => Scalar::I16(v[0]),
                    CpuStorage::I32(v) => Scalar::I32(v[0]),
                    CpuStorage::F8E4M3(v) => Scalar::F8E4M3(v[0]),
                    raw => Scalar::U8(raw_bytes(&raw)[0]),
                };
                let want = cpu(|| {
                    dst.cpu.try_clone(&ld).and_then(|mut d| {
                        d.const_set(value, &ld)?;
                        Ok(d)
                    })
                });
                let got = dst.hip.try_clone(&ld).and_then(|mut d| {
                    d.const_set(value, &ld)?;
                    Ok(d)
                });
                let desc = || format!("{} value {value:?}", describe(&shape, &[&ld]));
                ctx.tally
                    .check("const_set", dtype, desc, want, got, strict(dtype));
            }
        }
        for _ in 0..40 {
            let rows = ctx.rng.below(40);
            let cols = ctx.rng.pick(&[0, 1, 3, 8, 16, 33, 64, 200]);
            let src_stride = cols + ctx.rng.pick(&[0, 0, 1, 8, 13]);
            let dst_stride = cols + ctx.rng.pick(&[0, 0, 2, 16, 5]);
            let (src_off, dst_off) = (ctx.rng.below(20), ctx.rng.below(20));
            let reach = |stride: usize| {
                if rows == 0 {
                    0
                } else {
                    (rows - 1) * stride + cols
                }
            };
            let src = random_storage(
                &mut ctx.rng,
                dtype,
                src_off + reach(src_stride) + 3,
                Domain::Special,
            );
            let dst_len = dst_off + reach(dst_stride) + 3;
            let dst = random_storage(&mut ctx.rng, dtype, dst_len, Domain::Signed);
            let whole = Layout::contiguous(dst_len);
            let (src, dst) = (ctx.upload(src), ctx.upload(dst));
            let want = cpu(|| {
                dst.cpu.try_clone(&whole).and_then(|mut d| {
                    src.cpu
                        .copy2d(&mut d, rows, cols, src_stride, dst_stride, src_off, dst_off)?;
                    Ok(d)
                })
            });
            let got = dst.hip.try_clone(&whole).and_then(|mut d| {
                src.hip
                    .copy2d(&mut d, rows, cols, src_stride, dst_stride, src_off, dst_off)?;
                Ok(d)
            });
            let desc = || {
                format!(
                    "{rows}x{cols} strides {src_stride}/{dst_stride} offsets {src_off}/{dst_off}"
                )
            };
            ctx.tally
                .check("copy2d", dtype, desc, want, got, strict(dtype));
        }
    }
}

pub fn round_trips(ctx: &mut Ctx, dtypes: &[DType]) {
    for &dtype in dtypes {
        for n in [0, 1, 7, 1000, 65_537] {
            let cpu = random_storage(&mut ctx.rng, dtype, n, Domain::Special);
            let got = ctx.dev.storage_from_cpu_storage(&cpu);
            ctx.tally.check(
                "upload + to_cpu_storage",
                dtype,
                || format!("{n} elements"),
                Ok(cpu),
                got,
                strict(dtype),
            );
            let zeros = CpuStorage::U8(vec![0; n]).to_dtype(&Layout::contiguous(n), dtype);
            let got = ctx.dev.zeros_impl(&Shape::from(n), dtype);
            ctx.tally.check(
                "zeros",
                dtype,
                || format!("{n} elements"),
                zeros,
                got,
                strict(dtype),
            );
        }
    }
}
