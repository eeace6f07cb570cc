// Element-wise binary kernels with broadcasting and arbitrary strides:
// Candle's BinaryOpT ops (badd_f32, bmaximum_u8, ...) and comparisons that
// produce u8 (cmp_f32, cmp_i64, ...), for u8, u32, i64, f16, bf16, f32 and
// f64. The host computes i16 and i32 as i64 and f8e4m3 as f32, which hold
// every value exactly (catalogue.rs `Family::computed_as`): converted back,
// results wrap and round once as kernels of their own would, and those
// kernels do not add to the compile time.
//
// Signature: (const ElemInfo info, const T* lhs, const T* rhs, Out* out), with
// operand 0 = lhs and operand 1 = rhs in info.strides (a broadcast dimension
// has stride 0); comparisons take a last `double accept` (an integer, as
// element-wise parameters are doubles; see CmpFn).
//
// Floating types compute in f32/f64 and round once, which is exactly what
// Candle's CPU backend does for f16/bf16 and f8e4m3 arithmetic. Integer
// add/sub/mul wrap; integer division by zero gives 0 (Candle's CPU backend
// panics).

#include "common.h"

// Every op: `flt` on f32/f64 and `integer` on integer dtypes.
struct AddOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A a, A b) { return a + b; }
  template <typename T>
  __device__ __forceinline__ static T integer(T a, T b) { return wrap_add(a, b); }
};

struct SubOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A a, A b) { return a - b; }
  template <typename T>
  __device__ __forceinline__ static T integer(T a, T b) { return wrap_sub(a, b); }
};

struct MulOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A a, A b) { return a * b; }
  template <typename T>
  __device__ __forceinline__ static T integer(T a, T b) { return wrap_mul(a, b); }
};

struct DivOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A a, A b) { return a / b; }
  template <typename T>
  __device__ __forceinline__ static T integer(T a, T b) {
    if (b == (T)0) return (T)0;
    // The one signed overflow, MIN / -1, wraps to MIN.
    if (Num<T>::min_value != 0 && b == (T)-1) return wrap_neg(a);
    return (T)(a / b);
  }
};

// Candle's `if a < b { b } else { a }`: a NaN lhs is kept, a NaN rhs is not.
struct MaximumOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A a, A b) { return a < b ? b : a; }
  template <typename T>
  __device__ __forceinline__ static T integer(T a, T b) { return a < b ? b : a; }
};

// Candle's `if a > b { b } else { a }`.
struct MinimumOp {
  template <typename A>
  __device__ __forceinline__ static A flt(A a, A b) { return a > b ? b : a; }
  template <typename T>
  __device__ __forceinline__ static T integer(T a, T b) { return a > b ? b : a; }
};

template <typename Op, typename T, bool F = Num<T>::is_float>
struct BinaryFn;

template <typename Op, typename T>
struct BinaryFn<Op, T, true> {
  __device__ __forceinline__ T operator()(T a, T b) const {
    return Num<T>::from_acc(Op::flt(Num<T>::to_acc(a), Num<T>::to_acc(b)));
  }
};

template <typename Op, typename T>
struct BinaryFn<Op, T, false> {
  __device__ __forceinline__ T operator()(T a, T b) const { return Op::integer(a, b); }
};

// f8e4m3 maximum / minimum select an operand, bits and all (a NaN lhs is
// returned as it is, not as the NaN an f32 round trip makes of it).
template <>
struct BinaryFn<MaximumOp, ch_f8e4m3, true> {
  __device__ __forceinline__ ch_f8e4m3 operator()(ch_f8e4m3 a, ch_f8e4m3 b) const {
    return Num<ch_f8e4m3>::to_f32(a) < Num<ch_f8e4m3>::to_f32(b) ? b : a;
  }
};

template <>
struct BinaryFn<MinimumOp, ch_f8e4m3, true> {
  __device__ __forceinline__ ch_f8e4m3 operator()(ch_f8e4m3 a, ch_f8e4m3 b) const {
    return Num<ch_f8e4m3>::to_f32(a) > Num<ch_f8e4m3>::to_f32(b) ? b : a;
  }
};

#define CH_BINARY_KERNEL(NAME, OP, TY)                                                               \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                        \
      NAME##_##TY(const ElemInfo info, const ch_##TY* lhs, const ch_##TY* rhs, ch_##TY* out) {       \
    map_elems(info, out, BinaryFn<OP, ch_##TY>(), In<ch_##TY, 0>{lhs}, In<ch_##TY, 1>{rhs});         \
  }

CH_ALL(CH_BINARY_KERNEL, badd, AddOp)
CH_ALL(CH_BINARY_KERNEL, bsub, SubOp)
CH_ALL(CH_BINARY_KERNEL, bmul, MulOp)
CH_ALL(CH_BINARY_KERNEL, bdiv, DivOp)
CH_ALL(CH_BINARY_KERNEL, bmaximum, MaximumOp)
CH_ALL(CH_BINARY_KERNEL, bminimum, MinimumOp)

// ---------------------------------------------------------------------------
// Comparisons: one kernel per dtype for the six of candle. The outcome of
// comparing a with b is one of less (bit 0), equal (bit 1), greater (bit 2)
// and unordered (bit 3: a NaN on either side); the result is 1 when the
// outcome's bit of `accept` is set: eq 0b0010, ne 0b1101, lt 0b0001, le
// 0b0011, gt 0b0100, ge 0b0110. Compared in the computation type: exact for
// f16/bf16 promoted to f32.
template <typename T>
struct CmpFn {
  ch_u32 accept;
  __device__ __forceinline__ ch_u8 operator()(T x, T y) const {
    const typename KeyOf<T>::K a = KeyOf<T>::key(x), b = KeyOf<T>::key(y);
    const ch_u32 bit = a < b ? 0 : a == b ? 1 : a > b ? 2 : 3;
    return (ch_u8)((accept >> bit) & 1);
  }
};

#define CH_CMP_KERNEL(NAME, OP, TY)                                                                  \
  extern "C" __global__ void __launch_bounds__(CH_ELEM_BLOCK)                                        \
      NAME##_##TY(const ElemInfo info, const ch_##TY* lhs, const ch_##TY* rhs, ch_u8* out,           \
                  const double accept) {                                                             \
    map_elems(info, out, CmpFn<ch_##TY>{(ch_u32)accept}, In<ch_##TY, 0>{lhs}, In<ch_##TY, 1>{rhs}); \
  }

CH_ALL(CH_CMP_KERNEL, cmp, _)
