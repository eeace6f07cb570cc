//! Bounded waits for other ranks: a rank thread that died, or a program
//! whose ranks never issue the matching call, must not hang the others
//! forever. Every rendezvous waits at most `HIP_ON_CPU_RCCL_TIMEOUT_S`
//! seconds (default 60) and then fails with `ncclRemoteError`.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Environment variable bounding every wait for other ranks, in seconds.
pub const TIMEOUT_VAR: &str = "HIP_ON_CPU_RCCL_TIMEOUT_S";

/// The bound when [`TIMEOUT_VAR`] is unset.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The bound on one wait for other ranks, read once. An invalid value (not
/// a positive number of seconds) is reported on stderr and the default used.
pub(crate) fn timeout() -> Duration {
    static TIMEOUT: OnceLock<Duration> = OnceLock::new();
    *TIMEOUT.get_or_init(|| {
        let Ok(v) = std::env::var(TIMEOUT_VAR) else {
            return DEFAULT_TIMEOUT;
        };
        match v.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s <= 1e6 => Duration::from_secs_f64(s),
            _ => {
                eprintln!(
                    "hip-on-cpu: {TIMEOUT_VAR}={v} is not a positive number of seconds; using {}",
                    DEFAULT_TIMEOUT.as_secs()
                );
                DEFAULT_TIMEOUT
            }
        }
    })
}

/// The deadline of a wait starting now.
pub(crate) fn deadline() -> Instant {
    Instant::now() + timeout()
}

/// Locks `mutex`; a poisoned lock only means a rank thread panicked between
/// two consistent states (every update is made under one lock hold).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `changed` (with `guard` held) until `ready` returns `Some` or
/// `deadline` passes; returns the guard and `ready`'s answer, `None` on
/// time-out (the caller then decides, under the lock, how to give up).
pub(crate) fn wait_until<'a, T, R>(
    mut guard: MutexGuard<'a, T>,
    changed: &Condvar,
    deadline: Instant,
    mut ready: impl FnMut(&mut T) -> Option<R>,
) -> (MutexGuard<'a, T>, Option<R>) {
    loop {
        if let Some(answer) = ready(&mut guard) {
            return (guard, Some(answer));
        }
        let now = Instant::now();
        if now >= deadline {
            return (guard, None);
        }
        guard = changed
            .wait_timeout(guard, deadline - now)
            .map_or_else(|e| e.into_inner().0, |(g, _)| g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_end_at_the_deadline_or_when_ready() {
        let state = Mutex::new(0);
        let changed = Condvar::new();
        let soon = Instant::now() + Duration::from_millis(20);
        let (guard, got) = wait_until(lock(&state), &changed, soon, |_| None::<()>);
        drop(guard);
        assert_eq!(got, None);
        assert!(Instant::now() >= soon);
        let (guard, got) = wait_until(lock(&state), &changed, soon, |n| Some(*n + 1));
        drop(guard);
        assert_eq!(got, Some(1));
    }
}
