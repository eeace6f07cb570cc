//! Runtime detection: [`is_available`] for a quick yes/no and [`probe`] for a
//! report a program can print or log.

use std::fmt;
use std::sync::OnceLock;

use hip_sys::RuntimeVersion;

use crate::device::{Device, device_count};
use crate::error::Error;

/// Whether a HIP runtime loads and reports at least one device.
///
/// The answer is computed once per process (loading the library and calling
/// `hipGetDeviceCount`, a few milliseconds) and cached. Never panics; call
/// [`probe`] for the reason when it is `false`.
///
/// ```
/// if !hip_safe::is_available() {
///     eprintln!("falling back to CPU: {}", hip_safe::probe());
/// }
/// ```
pub fn is_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        hip_sys::hip()
            .ok()
            .and_then(|api| device_count(api).ok())
            .is_some_and(|n| n > 0)
    })
}

/// What [`probe`] found about one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceReport {
    /// The device ordinal.
    pub ordinal: usize,
    /// The marketing name.
    pub name: String,
    /// The full `gcnArchName`, feature suffixes included.
    pub arch: String,
    /// Threads per wavefront.
    pub wave_size: u32,
    /// Compute units.
    pub compute_units: u32,
    /// Total global memory in bytes.
    pub total_memory: usize,
    /// Whether stream-ordered allocation is supported.
    pub memory_pools: bool,
}

/// The state of the HIP stack in this process, as found by [`probe`].
///
/// `Display` prints a short report, or exactly one line with the reason when
/// nothing is usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The runtime library file that was loaded, if any.
    pub library: Option<String>,
    /// The runtime version, if the library loaded and reported it.
    pub runtime_version: Option<RuntimeVersion>,
    /// One entry per device the runtime reports: its properties, or the
    /// error that prevented reading them.
    pub devices: Vec<Result<DeviceReport, Error>>,
    /// Why nothing is usable (`None` when at least one device is).
    pub unavailable: Option<String>,
}

impl Probe {
    /// Whether at least one device was found.
    pub fn is_available(&self) -> bool {
        self.unavailable.is_none()
    }
}

/// Loads the runtime and reports the library, its version and every device,
/// or the one-line reason nothing is available. Never panics.
pub fn probe() -> Probe {
    let api = match hip_sys::hip() {
        Ok(api) => api,
        Err(e) => {
            return Probe {
                library: None,
                runtime_version: None,
                devices: Vec::new(),
                unavailable: Some(e.summary()),
            };
        }
    };
    let library = api.library().origin().to_string();
    let version = hip_sys::runtime_version();
    let runtime_version = version.as_ref().ok().copied();
    let version_text = match &version {
        Ok(v) => format!("HIP runtime {v}"),
        Err(e) => format!("HIP runtime of unknown version ({e})"),
    };
    let unavailable_with = |reason: String| Probe {
        library: Some(library.clone()),
        runtime_version,
        devices: Vec::new(),
        unavailable: Some(format!("{reason} ({version_text} from {library})")),
    };
    let count = match device_count(api) {
        Ok(0) => {
            return unavailable_with("no HIP device found (hipGetDeviceCount reports none)".into());
        }
        Ok(n) => n,
        Err(e) => return unavailable_with(format!("cannot count HIP devices: {e}")),
    };
    let devices = (0..count).map(report_device).collect();
    Probe {
        library: Some(library),
        runtime_version,
        devices,
        unavailable: None,
    }
}

fn report_device(ordinal: usize) -> Result<DeviceReport, Error> {
    let dev = Device::new(ordinal)?;
    Ok(DeviceReport {
        ordinal,
        name: dev.name().to_string(),
        arch: dev.full_arch().to_string(),
        wave_size: dev.wave_size(),
        compute_units: dev.compute_units(),
        total_memory: dev.total_memory(),
        memory_pools: dev.supports_memory_pools(),
    })
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(reason) = &self.unavailable {
            return write!(f, "HIP unavailable: {reason}");
        }
        let version = self
            .runtime_version
            .map_or_else(|| "unknown version".to_string(), |v| v.to_string());
        writeln!(
            f,
            "HIP runtime {version} from {}",
            self.library.as_deref().unwrap_or("?")
        )?;
        write!(f, "{} device(s):", self.devices.len())?;
        for (i, dev) in self.devices.iter().enumerate() {
            match dev {
                Ok(d) => write!(
                    f,
                    "\n  [{}] {} | arch {} | wave {} | {} CUs | {:.1} GiB | memory pools: {}",
                    d.ordinal,
                    d.name,
                    d.arch,
                    d.wave_size,
                    d.compute_units,
                    d.total_memory as f64 / (1u64 << 30) as f64,
                    if d.memory_pools { "yes" } else { "no" }
                )?,
                Err(e) => write!(f, "\n  [{i}] unusable: {e}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_report_is_one_line() {
        let p = Probe {
            library: None,
            runtime_version: None,
            devices: Vec::new(),
            unavailable: Some("libamdhip64 not found (12 locations searched)".into()),
        };
        let text = p.to_string();
        assert_eq!(text.lines().count(), 1);
        assert!(text.starts_with("HIP unavailable: libamdhip64 not found"));
        assert!(!p.is_available());
    }

    #[test]
    fn available_report_lists_devices() {
        let p = Probe {
            library: Some("/opt/rocm/lib/libamdhip64.so.6".into()),
            runtime_version: Some(RuntimeVersion::from_raw(60443484)),
            devices: vec![Ok(DeviceReport {
                ordinal: 0,
                name: "AMD Instinct MI210".into(),
                arch: "gfx90a:sramecc+:xnack-".into(),
                wave_size: 64,
                compute_units: 104,
                total_memory: 64 << 30,
                memory_pools: true,
            })],
            unavailable: None,
        };
        let text = p.to_string();
        assert!(text.contains("HIP runtime 6.4.43484 from /opt/rocm/lib/libamdhip64.so.6"));
        assert!(text.contains(
            "[0] AMD Instinct MI210 | arch gfx90a:sramecc+:xnack- | wave 64 | 104 CUs | 64.0 GiB"
        ));
    }

    #[test]
    fn probe_and_is_available_agree_and_never_panic() {
        let p = probe();
        assert_eq!(p.is_available(), is_available());
        if !p.is_available() {
            assert_eq!(p.to_string().lines().count(), 1);
        }
    }
}
