//! A 128-bit FNV-1a hash for cache file names and entry checksums.
//!
//! Not cryptographic: cache entries also store their full key, which is
//! compared on load, so a collision can only cause a recompilation.

const OFFSET_BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

/// FNV-1a (128-bit) of `parts`, hashed one after another.
pub(crate) fn fnv1a_128(parts: &[&[u8]]) -> u128 {
    parts
        .iter()
        .flat_map(|p| p.iter())
        .fold(OFFSET_BASIS, |h, &b| {
            (h ^ u128::from(b)).wrapping_mul(PRIME)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_reference_values() {
        // Reference values of FNV-1a 128 for "" and "a".
        assert_eq!(fnv1a_128(&[]), OFFSET_BASIS);
        assert_eq!(
            fnv1a_128(&[b"a"]),
            0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964
        );
    }

    #[test]
    fn parts_concatenate() {
        assert_eq!(fnv1a_128(&[b"ab", b"c"]), fnv1a_128(&[b"abc"]));
        assert_ne!(fnv1a_128(&[b"abc"]), fnv1a_128(&[b"abd"]));
    }
}
