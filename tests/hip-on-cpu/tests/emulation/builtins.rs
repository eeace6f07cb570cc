//! AMD builtins on the CPU platform: lane exchanges and dot products against
//! host computations, and every matrix instruction (MFMA on CDNA, WMMA on
//! RDNA 3 and 4) against a host matrix product, with operands placed by
//! AMD's register layouts.
//!
//! The layouts here are written from the other direction than the
//! emulation's (`device/hipcpu/amdgcn.h`): matrix element → (lane, vector
//! element), as the "matrix element to register mapping" tables of AMD's
//! ISA guides and its Matrix Instruction Calculator give them.

use hip_safe::{Device, Module, Program};

use super::one_block;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `lo..=hi`.
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

/// Compiles `source` for `arch` (which may differ from the device's, with
/// the same wave size) and loads it.
fn load(dev: &Device, source: &str, arch: &str) -> Module {
    let code = Program::new(source, "builtins.hip")
        .compile_for_arch(arch)
        .unwrap_or_else(|e| panic!("builtins for {arch} compile: {e}"));
    Module::from_code_object(dev, &code).expect("load the builtins module")
}

const LANE_KERNELS: &str = r#"
// Per thread: readfirstlane with lanes 0-2 gone, readlane of lane 5,
// ds_bpermute from the lane (l + 3) mod wave, mbcnt of an alternating mask.
extern "C" __global__ void lanes(int* out) {
    const int l = (int)__lane_id();
    int* o = out + threadIdx.x * 4;
    o[1] = __builtin_amdgcn_readlane((int)threadIdx.x * 10, 5);
    o[2] = __builtin_amdgcn_ds_bpermute(((l + 3) % warpSize) * 4, (int)threadIdx.x + 100);
    o[3] = (int)__builtin_amdgcn_mbcnt_hi(0x55555555u, __builtin_amdgcn_mbcnt_lo(0xaaaaaaaau, 1u));
    if (l < 3) return;
    o[0] = __builtin_amdgcn_readfirstlane((int)threadIdx.x + 1);
}

typedef _Float16 v2h __attribute__((__vector_size__(4)));
typedef short v2s __attribute__((__vector_size__(4)));

// Per thread: fdot2, udot4 everywhere, sdot4/sdot2 where the target has
// them (CDNA, RDNA 2), sudot4 on RDNA 3 and 4; 0 where it has not.
extern "C" __global__ void dots(const unsigned* a, const unsigned* b, const int* c,
                                int* out, float* fout) {
    const unsigned t = threadIdx.x;
    v2h ha, hb;
    __builtin_memcpy(&ha, &a[t], 4);
    __builtin_memcpy(&hb, &b[t], 4);
    fout[t] = __builtin_amdgcn_fdot2(ha, hb, (float)c[t], false);
    int* o = out + t * 5;
    o[0] = (int)__builtin_amdgcn_udot4(a[t], b[t], (unsigned)c[t] & 0xffffu, false);
#if defined(__gfx942__) || defined(__gfx90a__) || defined(__gfx908__) || defined(__gfx1030__)
    v2s sa, sb;
    __builtin_memcpy(&sa, &a[t], 4);
    __builtin_memcpy(&sb, &b[t], 4);
    o[1] = __builtin_amdgcn_sdot4((int)a[t], (int)b[t], c[t], false);
    o[2] = __builtin_amdgcn_sdot4((int)a[t], (int)b[t], 0x7fffff00, true);
    o[3] = __builtin_amdgcn_sdot2(sa, sb, c[t], false);
#endif
#if defined(__gfx1100__) || defined(__gfx1201__)
    o[4] = __builtin_amdgcn_sudot4(true, (int)a[t], false, (int)b[t], c[t], false);
#endif
}
"#;

/// Lane-exchange builtins and dot products against the ISA's definitions.
pub fn lane_builtins_follow_the_isa() {
    let dev = Device::new(0).unwrap();
    let wave = dev.wave_size() as usize;
    let arch = dev.arch().to_string();
    let m = load(&dev, LANE_KERNELS, &arch);
    let stream = dev.new_stream().unwrap();

    let threads = 2 * wave;
    let out = stream.alloc_zeros::<i32>(threads * 4).unwrap();
    let f = m.function("lanes").unwrap();
    let mut launch = stream.launch_builder(&f);
    launch.arg(&out);
    // SAFETY: 4 values per thread of the one block.
    unsafe { launch.launch(one_block(threads as u32)) }.unwrap();
    let got = stream.clone_dtoh(&out).unwrap();
    for t in 0..threads {
        let (lane, base) = (t % wave, t - t % wave);
        let first = if lane < 3 { 0 } else { (base + 3 + 1) as i32 };
        let below = |mask: u64| (mask & ((1u64 << lane) - 1)).count_ones() as i32;
        let mask = if wave == 64 {
            0x5555_5555_aaaa_aaaa
        } else {
            0xaaaa_aaaa
        };
        let want = [
            first,
            ((base + 5) * 10) as i32,
            (base + (lane + 3) % wave + 100) as i32,
            1 + below(mask),
        ];
        assert_eq!(got[t * 4..t * 4 + 4], want, "{arch} thread {t}");
    }

    let n = 256usize;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let halves = |rng: &mut Rng| -> u32 {
        let h =
            |rng: &mut Rng| u32::from(half::f16::from_f32(rng.int(-64, 64) as f32 / 8.0).to_bits());
        h(rng) | (h(rng) << 16)
    };
    // Even threads get two f16 values (fdot2 is checked there), odd ones
    // any bits.
    let operand = |rng: &mut Rng| -> Vec<u32> {
        (0..n)
            .map(|i| {
                if i % 2 == 0 {
                    halves(rng)
                } else {
                    rng.next() as u32
                }
            })
            .collect()
    };
    let a = operand(&mut rng);
    let b = operand(&mut rng);
    let c: Vec<i32> = (0..n).map(|_| rng.int(-100_000, 100_000) as i32).collect();
    let (da, db, dc) = (
        stream.clone_htod(&a).unwrap(),
        stream.clone_htod(&b).unwrap(),
        stream.clone_htod(&c).unwrap(),
    );
    let out = stream.alloc_zeros::<i32>(n * 5).unwrap();
    let fout = stream.alloc_zeros::<f32>(n).unwrap();
    let f = m.function("dots").unwrap();
    let mut launch = stream.launch_builder(&f);
    launch.arg(&da).arg(&db).arg(&dc).arg(&out).arg(&fout);
    // SAFETY: one input of each buffer per thread; 5 + 1 outputs per thread.
    unsafe { launch.launch(one_block(n as u32)) }.unwrap();
    let (got, fgot) = (
        stream.clone_dtoh(&out).unwrap(),
        stream.clone_dtoh(&fout).unwrap(),
    );

    let bytes = |w: u32| w.to_le_bytes();
    let signed_cdna = ["gfx942", "gfx90a", "gfx908", "gfx1030"].contains(&arch.as_str());
    let mixed = ["gfx1100", "gfx1201"].contains(&arch.as_str());
    for t in 0..n {
        let (x, y) = (bytes(a[t]), bytes(b[t]));
        let f16 = |w: u32, i: u32| half::f16::from_bits((w >> (16 * i)) as u16).to_f32();
        let fdot = c[t] as f32 + f16(a[t], 0) * f16(b[t], 0) + f16(a[t], 1) * f16(b[t], 1);
        if t % 2 == 0 {
            assert_eq!(fgot[t], fdot, "{arch} fdot2 thread {t}");
        }
        let udot: u64 = (0..4)
            .map(|i| u64::from(x[i]) * u64::from(y[i]))
            .sum::<u64>()
            + (c[t] as u32 & 0xffff) as u64;
        let sdot: i64 = (0..4)
            .map(|i| i64::from(x[i] as i8) * i64::from(y[i] as i8))
            .sum();
        let sdot2: i64 = (0..2)
            .map(|i| i64::from((a[t] >> (16 * i)) as i16) * i64::from((b[t] >> (16 * i)) as i16))
            .sum();
        let sudot: i64 = (0..4)
            .map(|i| i64::from(x[i] as i8) * i64::from(y[i]))
            .sum();
        let want = [
            udot as u32 as i32,
            if signed_cdna {
                (sdot + i64::from(c[t])) as i32
            } else {
                0
            },
            if signed_cdna {
                (sdot + 0x7fff_ff00).min(i64::from(i32::MAX)) as i32
            } else {
                0
            },
            if signed_cdna {
                (sdot2 + i64::from(c[t])) as i32
            } else {
                0
            },
            if mixed {
                (sudot + i64::from(c[t])) as i32
            } else {
                0
            },
        ];
        assert_eq!(
            got[t * 5..t * 5 + 5],
            want,
            "{arch} dot products thread {t}"
        );
    }
}

/// The element type of a matrix instruction's A and B.
#[derive(Clone, Copy, Debug)]
enum Elem {
    F16,
    BF16,
    F32,
    /// 8-bit integers, signed or not (A, B).
    I8(bool, bool),
}

impl Elem {
    fn bytes(self) -> usize {
        match self {
            Elem::F16 | Elem::BF16 => 2,
            Elem::F32 => 4,
            Elem::I8(..) => 1,
        }
    }
    fn is_int(self) -> bool {
        matches!(self, Elem::I8(..))
    }
    /// A random value of A (`b` false) or B and its little-endian bytes.
    fn draw(self, rng: &mut Rng, b: bool) -> (i64, Vec<u8>) {
        match self {
            Elem::F16 => {
                let v = rng.int(-8, 8);
                (
                    v,
                    half::f16::from_f32(v as f32)
                        .to_bits()
                        .to_le_bytes()
                        .to_vec(),
                )
            }
            Elem::BF16 => {
                let v = rng.int(-8, 8);
                (
                    v,
                    (((v as f32).to_bits() >> 16) as u16).to_le_bytes().to_vec(),
                )
            }
            Elem::F32 => {
                let v = rng.int(-100, 100);
                (v, (v as f32).to_le_bytes().to_vec())
            }
            Elem::I8(sa, sb) => {
                let signed = if b { sb } else { sa };
                let v = if signed {
                    rng.int(-128, 127)
                } else {
                    rng.int(0, 255)
                };
                (v, vec![v as u8])
            }
        }
    }
}

/// Where an instruction keeps its operands, from matrix element to
/// (lane, vector element).
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// CDNA MFMA with an `m`×`m` tile and `per` A elements per lane.
    Mfma { m: usize, per: usize },
    /// RDNA 3 WMMA, wave 32 (A and B replicated in both half-waves).
    Gfx11,
    /// RDNA 4 WMMA, wave 32.
    Gfx12,
}

impl Layout {
    /// Slots of A[i][k] (and of B[k][j] with `j` for `i`).
    fn ab(self, elem: Elem, i: usize, k: usize) -> Vec<(usize, usize)> {
        match self {
            Layout::Mfma { m, per } => vec![(m * (k / per) + i, k % per)],
            Layout::Gfx11 => vec![(i, k), (i + 16, k)],
            Layout::Gfx12 if elem.bytes() == 1 => vec![(16 * (k / 8) + i, k % 8)],
            Layout::Gfx12 => vec![(16 * ((k / 4) % 2) + i, 4 * (k / 8) + k % 4)],
        }
    }
    /// The slot of C[i][j] and D[i][j].
    fn cd(self, i: usize, j: usize) -> (usize, usize) {
        match self {
            Layout::Mfma { m: 16, .. } => (16 * (i / 4) + j, i % 4),
            Layout::Mfma { .. } => ((32 * (i / 4)) % 64 + j, 4 * (i / 8) + i % 4),
            Layout::Gfx11 => ((16 * i) % 32 + j, i / 2),
            Layout::Gfx12 => (16 * (i / 8) + j, i % 8),
        }
    }
}

/// One matrix instruction and how the test kernel calls it.
struct MatrixCase {
    arch: &'static str,
    /// The call, with `a`, `b`, `c` for this lane's fragments.
    call: &'static str,
    /// Types of one lane's A (and B) fragment and of its C (and D).
    a_type: &'static str,
    c_type: &'static str,
    elem: Elem,
    layout: Layout,
    m: usize,
    k: usize,
    /// C values near the top of i32 and `clamp` set: sums saturate.
    saturate: bool,
}

const MATRIX_TYPES: &str = r#"
typedef _Float16 v4h __attribute__((__vector_size__(8)));
typedef _Float16 v8h __attribute__((__vector_size__(16)));
typedef _Float16 v16h __attribute__((__vector_size__(32)));
typedef short v4s __attribute__((__vector_size__(8)));
typedef short v8s __attribute__((__vector_size__(16)));
typedef short v16s __attribute__((__vector_size__(32)));
typedef int v2i __attribute__((__vector_size__(8)));
typedef int v4i __attribute__((__vector_size__(16)));
typedef int v8i __attribute__((__vector_size__(32)));
typedef float v4f __attribute__((__vector_size__(16)));
typedef float v8f __attribute__((__vector_size__(32)));
typedef float v16f __attribute__((__vector_size__(64)));
"#;

/// Every matrix instruction tested: target, call, fragment types of A (and
/// B) and of C (and D), element type, layout, M (= N) and K.
#[rustfmt::skip]
fn matrix_cases() -> Vec<MatrixCase> {
    use Elem::*;
    use Layout::{Gfx11, Gfx12};
    let mfma = |m, per| Layout::Mfma { m, per };
    let case = |arch, call, a_type, c_type, elem, layout, m, k| MatrixCase {
        arch, call, a_type, c_type, elem, layout, m, k, saturate: false,
    };
    vec![
        case("gfx942", "__builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0)", "v4h", "v4f", F16, mfma(16, 4), 16, 16),
        case("gfx942", "__builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0)", "v4h", "v16f", F16, mfma(32, 4), 32, 8),
        case("gfx942", "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0)", "v4s", "v4f", BF16, mfma(16, 4), 16, 16),
        case("gfx942", "__builtin_amdgcn_mfma_f32_16x16x4f32(a, b, c, 0, 0, 0)", "float", "v4f", F32, mfma(16, 1), 16, 4),
        case("gfx942", "__builtin_amdgcn_mfma_i32_16x16x32_i8(a, b, c, 0, 0, 0)", "long", "v4i", I8(true, true), mfma(16, 8), 16, 32),
        case("gfx90a", "__builtin_amdgcn_mfma_i32_16x16x16i8(a, b, c, 0, 0, 0)", "int", "v4i", I8(true, true), mfma(16, 4), 16, 16),
        case("gfx90a", "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0)", "v4s", "v4f", BF16, mfma(16, 4), 16, 16),
        case("gfx1100", "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c)", "v16h", "v8f", F16, Gfx11, 16, 16),
        case("gfx1100", "__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c)", "v16s", "v8f", BF16, Gfx11, 16, 16),
        case("gfx1100", "__builtin_amdgcn_wmma_i32_16x16x16_iu8_w32(true, a, false, b, c, false)", "v4i", "v8i", I8(true, false), Gfx11, 16, 16),
        MatrixCase {
            saturate: true,
            ..case("gfx1100", "__builtin_amdgcn_wmma_i32_16x16x16_iu8_w32(false, a, false, b, c, true)", "v4i", "v8i", I8(false, false), Gfx11, 16, 16)
        },
        case("gfx1201", "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a, b, c)", "v8h", "v8f", F16, Gfx12, 16, 16),
        case("gfx1201", "__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(a, b, c)", "v8s", "v8f", BF16, Gfx12, 16, 16),
        case("gfx1201", "__builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(false, a, true, b, c, false)", "v2i", "v8i", I8(false, true), Gfx12, 16, 16),
    ]
}

impl MatrixCase {
    fn source(&self) -> String {
        format!(
            "{MATRIX_TYPES}\nextern \"C\" __global__ void mma(const {a} *as, const {a} *bs, const {c} *cs, {c} *ds) {{\n\
             const unsigned l = threadIdx.x;\n\
             const {a} a = as[l], b = bs[l];\n\
             const {c} c = cs[l];\n\
             ds[l] = {call};\n}}\n",
            a = self.a_type,
            c = self.c_type,
            call = self.call,
        )
    }

    /// Runs the instruction on random operands laid out for `wave` lanes;
    /// `corrupt` changes one replicated A value first. Returns the error of
    /// the launch, or checks D against the host product.
    fn run(&self, dev: &Device, seed: u64, corrupt: bool) -> Option<hip_safe::Error> {
        let wave = dev.wave_size() as usize;
        let (m, n, k) = (self.m, self.m, self.k);
        let size = self.elem.bytes();
        let per_lane_ab = k * m * size / wave
            * if matches!(self.layout, Layout::Gfx11) {
                2
            } else {
                1
            };
        let per_lane_c = m * n / wave;
        let mut rng = Rng(seed);
        let mut frag_a = vec![0u8; wave * per_lane_ab];
        let mut frag_b = vec![0u8; wave * per_lane_ab];
        let mut a = vec![0i64; m * k];
        let mut b = vec![0i64; k * n];
        for (values, frags, is_b) in [(&mut a, &mut frag_a, false), (&mut b, &mut frag_b, true)] {
            for i in 0..m {
                for kk in 0..k {
                    let (v, raw) = self.elem.draw(&mut rng, is_b);
                    let at = if is_b { kk * n + i } else { i * k + kk };
                    values[at] = v;
                    for (lane, e) in self.layout.ab(self.elem, i, kk) {
                        let off = lane * per_lane_ab + e * size;
                        frags[off..off + size].copy_from_slice(&raw);
                    }
                }
            }
        }
        if corrupt {
            // Lane 20's copy of A[4][0] (RDNA 3 keeps it in lanes 4 and 20).
            frag_a[20 * per_lane_ab] ^= 0x40;
        }
        let mut c = vec![0i64; m * n];
        let mut frag_c = vec![0u32; wave * per_lane_c];
        for i in 0..m {
            for j in 0..n {
                let v = if self.saturate {
                    i64::from(i32::MAX) - rng.int(0, 200_000)
                } else {
                    rng.int(-1000, 1000)
                };
                c[i * n + j] = v;
                let (lane, e) = self.layout.cd(i, j);
                frag_c[lane * per_lane_c + e] = if self.elem.is_int() {
                    v as i32 as u32
                } else {
                    (v as f32).to_bits()
                };
            }
        }

        let module = load(dev, &self.source(), self.arch);
        let f = module.function("mma").unwrap();
        let stream = dev.new_stream().unwrap();
        let (da, db, dc) = (
            stream.clone_htod(&frag_a).unwrap(),
            stream.clone_htod(&frag_b).unwrap(),
            stream.clone_htod(&frag_c).unwrap(),
        );
        let dd = stream.alloc_zeros::<u32>(wave * per_lane_c).unwrap();
        let mut launch = stream.launch_builder(&f);
        launch.arg(&da).arg(&db).arg(&dc).arg(&dd);
        // SAFETY: one fragment of each operand per lane of the one wave.
        if let Err(e) = unsafe { launch.launch(one_block(wave as u32)) } {
            return Some(e);
        }
        let d = stream.clone_dtoh(&dd).unwrap();
        for i in 0..m {
            for j in 0..n {
                let sum: i64 =
                    c[i * n + j] + (0..k).map(|kk| a[i * k + kk] * b[kk * n + j]).sum::<i64>();
                let (lane, e) = self.layout.cd(i, j);
                let bits = d[lane * per_lane_c + e];
                if self.elem.is_int() {
                    let want = if self.saturate {
                        sum.min(i64::from(i32::MAX)) as i32
                    } else {
                        sum as i32
                    };
                    assert_eq!(bits as i32, want, "{}: D[{i}][{j}]", self.call);
                } else {
                    assert_eq!(
                        f32::from_bits(bits),
                        sum as f32,
                        "{}: D[{i}][{j}]",
                        self.call
                    );
                }
            }
        }
        None
    }
}

/// Every matrix instruction of the targets with this device's wave size
/// computes C + A·B with its operands where AMD's layout puts them.
pub fn matrix_builtins_follow_amd_layouts() {
    let dev = Device::new(0).unwrap();
    let wave = dev.wave_size();
    let cases: Vec<MatrixCase> = matrix_cases()
        .into_iter()
        .filter(|c| wave == if c.arch.starts_with("gfx9") { 64 } else { 32 })
        .collect();
    assert!(cases.len() >= 5, "matrix cases at wave {wave}");
    for (n, case) in cases.iter().enumerate() {
        if let Some(e) = case.run(&dev, 0x5eed + n as u64, false) {
            panic!("{} for {}: {e}", case.call, case.arch);
        }
    }
}

/// A matrix instruction with lanes missing, or with RDNA 3's replicated
/// halves disagreeing, fails the launch (the platform names the builtin
/// and the rule on stderr).
pub fn matrix_builtin_misuse_is_reported() {
    let dev = Device::new(0).unwrap();
    let wave = dev.wave_size();
    let cases = matrix_cases();
    let pick = |arch: &str| cases.iter().find(|c| c.arch == arch).unwrap();
    let case = pick(if wave == 64 { "gfx942" } else { "gfx1100" });
    if wave == 32 {
        let err = case
            .run(&dev, 7, true)
            .expect("disagreeing replicas are reported");
        assert!(err.to_string().contains("`mma`"), "{err}");
    }
    // Half a wave: the other lanes are absent.
    let module = load(&dev, &case.source(), case.arch);
    let f = module.function("mma").unwrap();
    let stream = dev.new_stream().unwrap();
    let buf = stream.alloc_zeros::<u8>(64 * 64).unwrap();
    let mut launch = stream.launch_builder(&f);
    launch.arg(&buf).arg(&buf).arg(&buf).arg(&buf);
    // SAFETY: 16 lanes read and write at most 64 bytes each of the 4 KiB buffer.
    let err = unsafe { launch.launch(one_block(16)) }.unwrap_err();
    assert!(err.to_string().contains("`mma`"), "{err}");
    // The device stays usable.
    assert!(case.run(&dev, 8, false).is_none());
}
