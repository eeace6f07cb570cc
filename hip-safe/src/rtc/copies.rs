//! The hipRTC copies compiles run on. AMD's hipRTC runs one compile at a
//! time per process (its compiler library holds a process-wide lock), so
//! a compile that starts while another runs takes a further copy of it,
//! loaded in a namespace of its own ([`hip_sys::hiprtc_copy`]), up to one
//! copy per further core and at most [`MAX_COPIES`]. Copies stay loaded
//! for the process (each maps AMD's compiler again) and are reused. Where
//! no copy loads (another hipRTC, another system), compiles share the one
//! hipRTC as before.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use hip_sys::HiprtcApi;

/// Copies made at most, besides the hipRTC `hip_sys::hiprtc` loaded.
pub(crate) const MAX_COPIES: usize = 3;

/// Whether a compile runs on the first hipRTC.
static FIRST_BUSY: AtomicBool = AtomicBool::new(false);
/// Copies no compile is using.
static IDLE: Mutex<Vec<&'static HiprtcApi>> = Mutex::new(Vec::new());
/// Copies made or tried.
static TRIED: AtomicUsize = AtomicUsize::new(0);

/// The hipRTC one compile runs on, given back when dropped.
pub(crate) struct Lease {
    api: &'static HiprtcApi,
    kind: Kind,
}

enum Kind {
    /// The first hipRTC, to this compile alone.
    First,
    /// A copy, to this compile alone.
    Copy,
    /// The first hipRTC while another compile runs on it: hipRTC makes
    /// this one wait.
    Shared,
}

/// Copies worth making: one per core beyond the first, at most MAX_COPIES.
fn copies_wanted() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    cores.saturating_sub(1).min(MAX_COPIES)
}

fn idle() -> std::sync::MutexGuard<'static, Vec<&'static HiprtcApi>> {
    // A list of idle copies stays valid whatever a panicking holder did.
    IDLE.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Lease {
    /// The first hipRTC (`first`) when it is free, else an idle copy, else
    /// a new copy while fewer than wanted were tried, else `first` shared.
    pub(crate) fn take(first: &'static HiprtcApi) -> Lease {
        if !FIRST_BUSY.swap(true, Ordering::AcqRel) {
            return Lease {
                api: first,
                kind: Kind::First,
            };
        }
        if let Some(api) = idle().pop() {
            return Lease {
                api,
                kind: Kind::Copy,
            };
        }
        if TRIED.fetch_add(1, Ordering::AcqRel) < copies_wanted()
            && let Some(copy) = hip_sys::hiprtc_copy()
        {
            return Lease {
                api: Box::leak(Box::new(copy)),
                kind: Kind::Copy,
            };
        }
        Lease {
            api: first,
            kind: Kind::Shared,
        }
    }

    /// The hipRTC to compile on.
    pub(crate) fn api(&self) -> &'static HiprtcApi {
        self.api
    }

    /// Whether the hipRTC is a copy.
    pub(crate) fn is_copy(&self) -> bool {
        matches!(self.kind, Kind::Copy)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        match self.kind {
            Kind::First => FIRST_BUSY.store(false, Ordering::Release),
            Kind::Copy => idle().push(self.api),
            Kind::Shared => {}
        }
    }
}
