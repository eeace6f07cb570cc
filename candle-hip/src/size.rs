//! Checked size arithmetic.
//!
//! Layouts, shapes and op arguments are public and may carry any numbers,
//! so every element count, span, offset and size product that reaches an
//! allocation or a kernel goes through these functions: an overflow is an
//! error naming the operation and the values, never a wrapped size.

use crate::error::{HipBackendError, Result};

fn overflow(op: &'static str, what: impl FnOnce() -> String) -> candle_core::Error {
    HipBackendError::SizeOverflow { op, what: what() }.into()
}

/// The product of `factors` (`what` names them in the error).
pub(crate) fn product(op: &'static str, what: &str, factors: &[usize]) -> Result<usize> {
    factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| overflow(op, || format!("{what} {factors:?}")))
}

/// `a * b` (`what` names the product in the error).
pub(crate) fn mul(op: &'static str, what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| overflow(op, || format!("{what} ({a} x {b})")))
}

/// `a + b` (`what` names the sum in the error).
pub(crate) fn add(op: &'static str, what: &str, a: usize, b: usize) -> Result<usize> {
    a.checked_add(b)
        .ok_or_else(|| overflow(op, || format!("{what} ({a} + {b})")))
}

/// The number of elements of a shape. A shape with a zero dimension has
/// none, but its other dimensions must still multiply without overflow:
/// kernels and launch plans take products of any subset of them.
pub(crate) fn numel(op: &'static str, dims: &[usize]) -> Result<usize> {
    let nonzero = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d.max(1)))
        .ok_or_else(|| overflow(op, || format!("the shape {dims:?}")))?;
    Ok(if dims.contains(&0) { 0 } else { nonzero })
}

/// The number of elements a strided view reaches from its first element:
/// 0 when it is empty, else one past the largest offset.
pub(crate) fn span(op: &'static str, dims: &[usize], strides: &[usize]) -> Result<usize> {
    if dims.len() != strides.len() {
        return Err(crate::error::invalid(
            op,
            format!("shape {dims:?} with strides {strides:?}"),
        ));
    }
    if numel(op, dims)? == 0 {
        return Ok(0);
    }
    dims.iter()
        .zip(strides)
        .try_fold(1usize, |acc, (&d, &s)| {
            (d - 1).checked_mul(s)?.checked_add(acc)
        })
        .ok_or_else(|| {
            overflow(op, || {
                format!("the layout of shape {dims:?} and strides {strides:?}")
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_of_valid_layouts() {
        assert_eq!(span("t", &[], &[]).unwrap(), 1);
        assert_eq!(span("t", &[2, 3], &[3, 1]).unwrap(), 6);
        assert_eq!(span("t", &[2, 3], &[1, 2]).unwrap(), 6);
        assert_eq!(span("t", &[4, 3], &[10, 1]).unwrap(), 33);
        assert_eq!(span("t", &[5, 7], &[0, 0]).unwrap(), 1);
        assert_eq!(span("t", &[2, 0, 3], &[1, 1, 1]).unwrap(), 0);
    }

    #[test]
    fn overflowing_layouts_are_errors_naming_op_and_layout() {
        // The review's example: strides that wrap the span to 1.
        let err = span("const_set", &[2, 1001], &[usize::MAX - 999, 1])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("const_set") && err.contains("[2, 1001]"),
            "{err}"
        );
        assert!(span("t", &[3, 2], &[usize::MAX / 2 + 1, 1]).is_err());
        // Broadcast dims whose product wraps to 0 or to a small number.
        assert!(numel("t", &[1 << 32, 1 << 32]).is_err());
        assert!(numel("t", &[1 << 40, 1 << 40, 0]).is_err());
        assert!(span("t", &[1 << 32, 1 << 32], &[0, 0]).is_err());
        assert_eq!(numel("t", &[1 << 20, 0, 1 << 20]).unwrap(), 0);
        assert!(span("t", &[2], &[1, 1]).is_err());
    }

    #[test]
    fn products_and_sums() {
        assert_eq!(product("t", "x", &[2, 3, 4]).unwrap(), 24);
        assert_eq!(product("t", "x", &[]).unwrap(), 1);
        let err = product("matmul", "the output", &[usize::MAX, 2])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("matmul") && err.contains("the output"),
            "{err}"
        );
        assert!(mul("t", "x", usize::MAX, 2).is_err());
        assert_eq!(mul("t", "x", 6, 7).unwrap(), 42);
        assert!(add("t", "x", usize::MAX, 1).is_err());
        assert_eq!(add("t", "x", 6, 7).unwrap(), 13);
    }
}
