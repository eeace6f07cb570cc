//! The HIP runtime version number.

use std::fmt;

/// A HIP runtime version as returned by `hipRuntimeGetVersion`
/// (`major * 10_000_000 + minor * 100_000 + patch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RuntimeVersion {
    /// Major version (5, 6, 7, ...).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch / build number.
    pub patch: u32,
}

impl RuntimeVersion {
    /// Decodes the packed integer; negative values decode as 0.0.0.
    pub fn from_raw(raw: i32) -> Self {
        let raw = u32::try_from(raw).unwrap_or(0);
        Self {
            major: raw / 10_000_000,
            minor: (raw / 100_000) % 100,
            patch: raw % 100_000,
        }
    }

    /// Whether `hipGetDevicePropertiesR0600` and its 1472-byte property
    /// layout exist (ROCm 6.0 and newer); older runtimes use the legacy layout.
    pub fn has_r0600_properties(self) -> bool {
        self.major >= 6
    }
}

impl fmt::Display for RuntimeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_real_release_numbers() {
        assert_eq!(RuntimeVersion::from_raw(60443484).to_string(), "6.4.43484");
        assert_eq!(RuntimeVersion::from_raw(50221153).to_string(), "5.2.21153");
        assert!(!RuntimeVersion::from_raw(50221153).has_r0600_properties());
        assert!(RuntimeVersion::from_raw(70200000).has_r0600_properties());
        assert_eq!(RuntimeVersion::from_raw(-1), RuntimeVersion::from_raw(0));
    }
}
