// Element-wise unary kernels: Candle's UnaryOpT ops, affine, powf, elu.
//
// Kernel names follow Candle's UnaryOpT::KERNEL constants plus the dtype
// (uexp_f32, ugelu_erf_bf16, ...). Signature of every kernel here:
//   (const ElemInfo info, const T* in, T* out[, scalar parameters])
// `in` points at the first element of a contiguous input (info.rank == 0:
// the host copies a strided view to a contiguous one first, see
// map_contiguous), `out` at a contiguous output of info.numel elements.
//
// Floating types compute in f32 (f16, bf16, f32) or f64 and round once;
// f8e4m3 computes in f32 and rounds after every operation of the
// expression candle's CPU backend evaluates with the float8 crate's
// operators (one for most ops, several for gelu, silu, affine and elu).
// Integer dtypes have the ops whose result Candle defines for them (copy, abs,
// relu, sign, ceil, floor, round); the host computes those of i16 and i32
// as i64 (catalogue.rs `Family::computed_as`).

#include "common.h"

// Every op: `flt` on f32 and f64; ops defined on integers also `integer`;
// `costly` (see IsCostly in common.h) on the transcendental ones.
#define CH_LIBM_OP(NAME, FN, COSTLY)                                          \
  struct NAME {                                                               \
    static const bool costly = COSTLY;                                        \
    __device__ __forceinline__ static float flt(float x) { return FN##f(x); } \
    __device__ __forceinline__ static double flt(double x) { return FN(x); }  \
  };

CH_LIBM_OP(ExpOp, exp, true)
CH_LIBM_OP(LogOp, log, true)
CH_LIBM_OP(SinOp, sin, true)
CH_LIBM_OP(CosOp, cos, true)
CH_LIBM_OP(TanhOp, tanh, true)
CH_LIBM_OP(SqrtOp, sqrt, false)
CH_LIBM_OP(ErfOp, erf, true)

struct NegOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A x) { return -x; }
};

struct RecipOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A x) { return (A)1 / x; }
};

struct SqrOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A x) { return x * x; }
};

// Tanh approximation, as Candle's `gelu`.
struct GeluOp {
  static const bool costly = true;
  template <typename A>
  __device__ __forceinline__ static A flt(A x) {
    const A sqrt_two_over_pi = (A)0.79788456080286535587989211986876373;
    return (A)0.5 * x * ((A)1 + TanhOp::flt(sqrt_two_over_pi * x * ((A)1 + (A)0.044715 * x * x)));
  }
};

struct GeluErfOp {
  static const bool costly = true;
  template <typename A>
  __device__ __forceinline__ static A flt(A x) {
    const A frac_1_sqrt_2 = (A)0.70710678118654752440084436210484903;
    return (ErfOp::flt(x * frac_1_sqrt_2) + (A)1) * (A)0.5 * x;
  }
};

struct SiluOp {
  static const bool costly = true;
  template <typename A>
  __device__ __forceinline__ static A flt(A x) { return x / ((A)1 + ExpOp::flt(-x)); }
};

struct AbsOp {
  __device__ __forceinline__ static float flt(float x) { return fabsf(x); }
  __device__ __forceinline__ static double flt(double x) { return fabs(x); }
  template <typename T>
  __device__ __forceinline__ static T integer(T x) { return x < (T)0 ? wrap_neg(x) : x; }
};

// max(x, 0): NaN gives 0, like Rust's f32::max.
struct ReluOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A x) { return x > (A)0 ? x : (A)0; }
  template <typename T>
  __device__ __forceinline__ static T integer(T x) { return x > (T)0 ? x : (T)0; }
};

// -1, 0 or 1; NaN gives 0.
struct SignOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A x) { return (A)(x > (A)0) - (A)(x < (A)0); }
  template <typename T>
  __device__ __forceinline__ static T integer(T x) { return (T)((x > (T)0) - (x < (T)0)); }
};

// Rounding ops are the identity on integers.
#define CH_ROUNDING_OP(NAME, FN)                                              \
  struct NAME {                                                               \
    __device__ __forceinline__ static float flt(float x) { return FN##f(x); } \
    __device__ __forceinline__ static double flt(double x) { return FN(x); }  \
    template <typename T>                                                     \
    __device__ __forceinline__ static T integer(T x) { return x; }            \
  };

CH_ROUNDING_OP(CeilOp, ceil)
CH_ROUNDING_OP(FloorOp, floor)
// Halfway cases away from zero, like Rust's round.
CH_ROUNDING_OP(RoundOp, round)

// How f16 and bf16 compute an op: in f32 like f32, except the ops
// specialised below, which use the f32 hardware approximations __expf,
// __fdividef and rsqrtf. Their error (a few f32 ulps, growing to ~1e-5 relative for
// |exp argument| near 88) is far below half a step of a 16-bit float (2^-9
// relative for bf16, 2^-12 for f16), so a rounded result can differ from
// the exactly computed one only by one step, in rare near-ties. With exact
// f32 libm calls and division these ops cost about 26 instructions per
// element, and 16-bit outputs give the GPU twice the elements per byte of
// f32, so exact calls would make these ops compute-bound.
template <typename Op>
struct HalfFn {
  __device__ __forceinline__ static float apply(float x) { return Op::flt(x); }
};

template <>
struct HalfFn<ExpOp> {
  __device__ __forceinline__ static float apply(float x) { return __expf(x); }
};

// x / (1 + e^-x).
template <>
struct HalfFn<SiluOp> {
  __device__ __forceinline__ static float apply(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
};

// 0.5 x (1 + tanh(u)) = x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
template <>
struct HalfFn<GeluOp> {
  __device__ __forceinline__ static float apply(float x) {
    const float two_sqrt_two_over_pi = 1.5957691216057307f;
    const float u2 = two_sqrt_two_over_pi * x * (1.0f + 0.044715f * x * x);
    return __fdividef(x, 1.0f + __expf(-u2));
  }
};

// x * rsqrt(x) with the hardware reciprocal square root (a few f32 ulps),
// instead of sqrtf's IEEE sequence, which branches to a special-case path
// per element. Negative x and NaN give NaN through rsqrt; zeros and +inf,
// whose product would be NaN, are their own roots.
template <>
struct HalfFn<SqrtOp> {
  __device__ __forceinline__ static float apply(float x) {
    return x == 0.0f || x == __builtin_huge_valf() ? x : x * rsqrtf(x);
  }
};

// The f32/f64 function of op Op for floating storage type T.
template <typename Op, typename T>
struct FloatFn {
  __device__ __forceinline__ static typename Num<T>::acc apply(typename Num<T>::acc x) { return Op::flt(x); }
};

template <typename Op>
struct FloatFn<Op, ch_f16> : HalfFn<Op> {};

template <typename Op>
struct FloatFn<Op, ch_bf16> : HalfFn<Op> {};

// The per-element function of a unary kernel for storage type T.
template <typename Op, typename T, bool F = Num<T>::is_float>
struct UnaryFn;

template <typename Op, typename T>
struct UnaryFn<Op, T, true> {
  static const bool costly = IsCostly<Op>::value;
  __device__ __forceinline__ T operator()(T x) const {
    return Num<T>::from_acc(FloatFn<Op, T>::apply(Num<T>::to_acc(x)));
  }
};

template <typename Op, typename T>
struct UnaryFn<Op, T, false> {
  __device__ __forceinline__ T operator()(T x) const { return Op::integer(x); }
};

// f8e4m3: the expressions of candle's `UnaryOpT::f8e4m3`, each float8
// operator rounding its f32 result (ch_f8e4m3_round_f32).

// 0.5 v (1 + tanh(sqrt(2/pi) v (1 + 0.044715 v v))), left to right.
template <>
struct UnaryFn<GeluOp, ch_f8e4m3, true> {
  __device__ __forceinline__ ch_f8e4m3 operator()(ch_f8e4m3 x) const {
    const float v = Num<ch_f8e4m3>::to_f32(x);
    const float half = ch_f8e4m3_round_f32(0.5f);
    const float s2pi = ch_f8e4m3_round_f32(0.79788456080286535587989211986876373f);
    const float c = ch_f8e4m3_round_f32(0.044715f);
    const float a = ch_f8e4m3_round_f32(half * v);
    const float cv2 = ch_f8e4m3_round_f32(ch_f8e4m3_round_f32(c * v) * v);
    const float inner = ch_f8e4m3_round_f32(ch_f8e4m3_round_f32(s2pi * v) * ch_f8e4m3_round_f32(1.0f + cv2));
    const float t = ch_f8e4m3_round_f32(1.0f + ch_f8e4m3_round_f32(tanhf(inner)));
    return Num<ch_f8e4m3>::from_f32(a * t);
  }
};

// v / (1 + exp(-v)).
template <>
struct UnaryFn<SiluOp, ch_f8e4m3, true> {
  __device__ __forceinline__ ch_f8e4m3 operator()(ch_f8e4m3 x) const {
    const float v = Num<ch_f8e4m3>::to_f32(x);
    const float e = ch_f8e4m3_round_f32(expf(ch_f8e4m3_round_f32(-v)));
    return Num<ch_f8e4m3>::from_f32(v / ch_f8e4m3_round_f32(1.0f + e));
  }
};

// erf in f64, rounded from f64 (candle: from_f64(erf_f64(v.to_f64()))).
template <>
struct UnaryFn<ErfOp, ch_f8e4m3, true> {
  __device__ __forceinline__ ch_f8e4m3 operator()(ch_f8e4m3 x) const {
    return Num<ch_f8e4m3>::from_f64(ErfOp::flt(Num<ch_f8e4m3>::to_f64(x)));
  }
};

// float8's max(v, 0): v unless 0 > v, so NaN (either one) and -0 stay.
template <>
struct UnaryFn<ReluOp, ch_f8e4m3, true> {
  __device__ __forceinline__ ch_f8e4m3 operator()(ch_f8e4m3 x) const {
    if (Num<ch_f8e4m3>::to_f32(x) < 0.0f) x.bits = 0;
    return x;
  }
};

#define CH_UNARY_KERNEL(NAME, OP, TY)                                      \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)              \
      NAME##_##TY(const ElemInfo info, const ch_##TY* in, ch_##TY* out) {  \
    map_contiguous(info, out, UnaryFn<OP, ch_##TY>(), In<ch_##TY, 0>{in}); \
  }

CH_ANY_FLOAT(CH_UNARY_KERNEL, uexp, ExpOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, ulog, LogOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, usilu, SiluOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, usin, SinOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, ucos, CosOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, utanh, TanhOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, ugelu, GeluOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, ugelu_erf, GeluErfOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, uerf, ErfOp)

CH_ANY_FLOAT(CH_UNARY_KERNEL, uneg, NegOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, urecip, RecipOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, usqr, SqrOp)
CH_ANY_FLOAT(CH_UNARY_KERNEL, usqrt, SqrtOp)
CH_CORE_AND_F8(CH_UNARY_KERNEL, urelu, ReluOp)
CH_CORE_AND_F8(CH_UNARY_KERNEL, uabs, AbsOp)
CH_CORE_AND_F8(CH_UNARY_KERNEL, uceil, CeilOp)
CH_CORE_AND_F8(CH_UNARY_KERNEL, ufloor, FloorOp)
CH_CORE_AND_F8(CH_UNARY_KERNEL, uround, RoundOp)
CH_CORE_AND_F8(CH_UNARY_KERNEL, usign, SignOp)

// ---------------------------------------------------------------------------
// Ops with scalar parameters. As in Candle's CPU backend, each parameter is
// first converted to the tensor's dtype (with Rust `as` semantics).

// x * mul + add.
template <typename T, bool F = Num<T>::is_float>
struct AffineFn;

template <typename T>
struct AffineFn<T, true> {
  typename Num<T>::acc mul, add;
  __device__ __forceinline__ AffineFn(double m, double a)
      : mul(Num<T>::to_acc(cast_to<T>(m))), add(Num<T>::to_acc(cast_to<T>(a))) {}
  __device__ __forceinline__ T operator()(T x) const { return Num<T>::from_acc(Num<T>::to_acc(x) * mul + add); }
};

// f8e4m3: v * mul + add with both operators rounding (mul and add are
// rounded to f8e4m3 first, as for every dtype).
template <>
struct AffineFn<ch_f8e4m3, true> {
  float mul, add;
  __device__ __forceinline__ AffineFn(double m, double a)
      : mul(Num<ch_f8e4m3>::to_f32(cast_to<ch_f8e4m3>(m))), add(Num<ch_f8e4m3>::to_f32(cast_to<ch_f8e4m3>(a))) {}
  __device__ __forceinline__ ch_f8e4m3 operator()(ch_f8e4m3 x) const {
    return Num<ch_f8e4m3>::from_f32(ch_f8e4m3_round_f32(Num<ch_f8e4m3>::to_f32(x) * mul) + add);
  }
};

template <typename T>
struct AffineFn<T, false> {
  T mul, add;
  __device__ __forceinline__ AffineFn(double m, double a) : mul(cast_to<T>(m)), add(cast_to<T>(a)) {}
  __device__ __forceinline__ T operator()(T x) const { return wrap_add(wrap_mul(x, mul), add); }
};

#define CH_AFFINE_KERNEL(NAME, OP, TY)                                                            \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                     \
      NAME##_##TY(const ElemInfo info, const ch_##TY* in, ch_##TY* out, double mul, double add) { \
    map_contiguous(info, out, OP<ch_##TY>(mul, add), In<ch_##TY, 0>{in});                         \
  }

CH_NUMERIC(CH_AFFINE_KERNEL, affine, AffineFn)

__device__ __forceinline__ float ch_pow(float x, float e) { return powf(x, e); }
__device__ __forceinline__ double ch_pow(double x, double e) { return pow(x, e); }

// x ^ e (floating dtypes only).
template <typename T>
struct PowfFn {
  static const bool costly = true;
  typename Num<T>::acc e;
  __device__ __forceinline__ explicit PowfFn(double exponent) : e(Num<T>::to_acc(cast_to<T>(exponent))) {}
  __device__ __forceinline__ T operator()(T x) const { return Num<T>::from_acc(ch_pow(Num<T>::to_acc(x), e)); }
};

// x when its sign bit is clear (NaN kept), alpha * (exp(x) - 1) otherwise
// (floating dtypes only). -0 gives 0, equal to Candle's -0.
template <typename T>
struct EluFn {
  static const bool costly = true;
  typename Num<T>::acc alpha;
  __device__ __forceinline__ explicit EluFn(double a) : alpha(Num<T>::to_acc(cast_to<T>(a))) {}
  __device__ __forceinline__ T operator()(T x) const {
    const typename Num<T>::acc v = Num<T>::to_acc(x);
    if (v >= 0 || v != v) return x;
    return Num<T>::from_acc((ExpOp::flt(v) - 1) * alpha);
  }
};

// f8e4m3 (candle's generic elu): v when its sign bit is clear (a NaN
// too), else (exp(v) - 1) * alpha with each operator rounding.
template <>
struct EluFn<ch_f8e4m3> {
  float alpha;
  __device__ __forceinline__ explicit EluFn(double a) : alpha(Num<ch_f8e4m3>::to_f32(cast_to<ch_f8e4m3>(a))) {}
  __device__ __forceinline__ ch_f8e4m3 operator()(ch_f8e4m3 x) const {
    if ((x.bits & 0x80u) == 0) return x;
    const float e = ch_f8e4m3_round_f32(expf(Num<ch_f8e4m3>::to_f32(x)));
    return Num<ch_f8e4m3>::from_f32(ch_f8e4m3_round_f32(e - 1.0f) * alpha);
  }
};

#define CH_PARAM_KERNEL(NAME, OP, TY)                                                   \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                           \
      NAME##_##TY(const ElemInfo info, const ch_##TY* in, ch_##TY* out, double param) { \
    map_contiguous(info, out, OP<ch_##TY>(param), In<ch_##TY, 0>{in});                  \
  }

CH_ANY_FLOAT(CH_PARAM_KERNEL, powf, PowfFn)
CH_ANY_FLOAT(CH_PARAM_KERNEL, elu, EluFn)
