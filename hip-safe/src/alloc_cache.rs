//! A stream's cache of small freed allocations, so that the many small
//! buffers of an eager workload (activations of a few KiB, scalars,
//! indices) skip `hipMallocAsync` / `hipFreeAsync` after their first use.
//! See [`crate::Stream::set_allocation_cache_limit`].
//!
//! Requests of at most [`MAX_CACHED_BYTES`] fall into power-of-two size
//! classes; while the cache is on, they are allocated at their class size,
//! and a dropped buffer of a class goes back to its class's free list
//! (within the byte limit) instead of to HIP. Reuse follows stream order as
//! `hipFreeAsync` does: memory freed on a stream is handed to later work of
//! the same stream, which runs after every earlier use.

use std::sync::{Mutex, MutexGuard};

use hip_sys::hipDeviceptr_t;

/// Bytes of the smallest size class.
const MIN_CLASS_BYTES: usize = 256;
/// Number of size classes: 256 B, 512 B, ..., 1 MiB.
const CLASSES: usize = 13;
/// The largest request the cache serves.
pub(crate) const MAX_CACHED_BYTES: usize = MIN_CLASS_BYTES << (CLASSES - 1);

/// The size class of a request of `bytes` (> 0) bytes, if the cache serves it.
pub(crate) fn class_of(bytes: usize) -> Option<u8> {
    if bytes == 0 || bytes > MAX_CACHED_BYTES {
        return None;
    }
    let rounded = bytes.max(MIN_CLASS_BYTES).next_power_of_two();
    Some((rounded / MIN_CLASS_BYTES).trailing_zeros() as u8)
}

/// Bytes of every allocation of `class`.
pub(crate) fn class_bytes(class: u8) -> usize {
    MIN_CLASS_BYTES << class
}

/// A cached device address.
struct Cached(hipDeviceptr_t);

// SAFETY: a device address is plain data, not tied to a host thread; the
// cache owns the allocation behind it exclusively.
unsafe impl Send for Cached {}

/// The free lists and their byte limit.
#[derive(Default)]
struct Lists {
    /// Bytes the cache may hold; 0 turns it off.
    limit: usize,
    /// Bytes held now (the sum of the class sizes of every cached address).
    held: usize,
    /// Free addresses of each class.
    free: [Vec<Cached>; CLASSES],
}

/// One stream's cache (see the module documentation).
#[derive(Default)]
pub(crate) struct AllocationCache {
    lists: Mutex<Lists>,
}

impl AllocationCache {
    /// The lists; a poisoned lock only means a thread panicked between two
    /// consistent states (every update below is a single push or pop with
    /// its byte count).
    fn lists(&self) -> MutexGuard<'_, Lists> {
        self.lists
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Where a request of `bytes` comes from: `None` when the cache is off
    /// or does not serve that size; otherwise the request's class and, if
    /// one is cached, an address of that class (now the caller's).
    pub(crate) fn take(&self, bytes: usize) -> Option<(u8, Option<hipDeviceptr_t>)> {
        let class = class_of(bytes)?;
        let mut lists = self.lists();
        if lists.limit == 0 {
            return None;
        }
        let ptr = lists.free[usize::from(class)].pop();
        if ptr.is_some() {
            lists.held -= class_bytes(class);
        }
        Some((class, ptr.map(|p| p.0)))
    }

    /// Keeps `ptr`, an allocation of `class`, for reuse; gives it back when
    /// that would exceed the limit (the caller then frees it).
    pub(crate) fn put(&self, class: u8, ptr: hipDeviceptr_t) -> Result<(), hipDeviceptr_t> {
        let mut lists = self.lists();
        let bytes = class_bytes(class);
        if lists.held + bytes > lists.limit {
            return Err(ptr);
        }
        lists.held += bytes;
        lists.free[usize::from(class)].push(Cached(ptr));
        Ok(())
    }

    /// Sets the byte limit and returns the addresses beyond it (largest
    /// classes first), which the caller frees.
    pub(crate) fn set_limit(&self, limit: usize) -> Vec<hipDeviceptr_t> {
        let mut lists = self.lists();
        lists.limit = limit;
        let mut released = Vec::new();
        for class in (0..CLASSES).rev() {
            while lists.held > limit {
                let Some(ptr) = lists.free[class].pop() else {
                    break;
                };
                lists.held -= class_bytes(class as u8);
                released.push(ptr.0);
            }
        }
        released
    }

    /// Empties the cache (the limit stays) and returns every address, which
    /// the caller frees.
    pub(crate) fn drain(&self) -> Vec<hipDeviceptr_t> {
        let mut lists = self.lists();
        lists.held = 0;
        lists
            .free
            .iter_mut()
            .flat_map(std::mem::take)
            .map(|ptr| ptr.0)
            .collect()
    }

    /// Bytes held now.
    pub(crate) fn held(&self) -> usize {
        self.lists().held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(n: usize) -> hipDeviceptr_t {
        n as hipDeviceptr_t
    }

    #[test]
    fn requests_fall_into_power_of_two_classes() {
        assert_eq!(class_of(0), None);
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(256), Some(0));
        assert_eq!(class_of(257), Some(1));
        assert_eq!(class_of(4096), Some(4));
        assert_eq!(class_of(MAX_CACHED_BYTES), Some(12));
        assert_eq!(class_of(MAX_CACHED_BYTES + 1), None);
        for bytes in [1, 255, 256, 300, 4095, 4097, 1 << 19, MAX_CACHED_BYTES] {
            let class = class_of(bytes).unwrap();
            assert!(class_bytes(class) >= bytes);
            assert!(class == 0 || class_bytes(class - 1) < bytes);
        }
    }

    #[test]
    fn the_cache_is_off_until_given_a_limit() {
        let cache = AllocationCache::default();
        assert_eq!(cache.take(1024), None);
        assert_eq!(cache.put(2, addr(0x1000)), Err(addr(0x1000)));
        assert!(cache.set_limit(4096).is_empty());
        assert_eq!(cache.take(1024), Some((2, None)));
        assert_eq!(cache.take(MAX_CACHED_BYTES + 1), None);
    }

    #[test]
    fn freed_addresses_come_back_within_the_limit() {
        let cache = AllocationCache::default();
        cache.set_limit(2048);
        assert_eq!(cache.put(2, addr(0x1000)), Ok(()));
        assert_eq!(cache.put(2, addr(0x2000)), Ok(()));
        assert_eq!(cache.held(), 2048);
        // Over the limit: handed back to be freed.
        assert_eq!(cache.put(0, addr(0x3000)), Err(addr(0x3000)));
        assert_eq!(cache.take(512), Some((1, None)));
        // 1000 bytes round up to class 2 (1024 bytes).
        assert_eq!(cache.take(1000), Some((2, Some(addr(0x2000)))));
        assert_eq!(cache.held(), 1024);
        assert_eq!(cache.drain(), vec![addr(0x1000)]);
        assert_eq!(cache.held(), 0);
        assert_eq!(cache.take(1024), Some((2, None)));
    }

    #[test]
    fn lowering_the_limit_releases_the_largest_classes_first() {
        let cache = AllocationCache::default();
        cache.set_limit(1 << 20);
        cache.put(0, addr(0x100)).unwrap();
        cache.put(4, addr(0x200)).unwrap();
        cache.put(4, addr(0x300)).unwrap();
        assert_eq!(cache.held(), 256 + 2 * 4096);
        assert_eq!(cache.set_limit(4096 + 256), vec![addr(0x300)]);
        assert_eq!(cache.set_limit(0), vec![addr(0x200), addr(0x100)]);
        assert_eq!(cache.held(), 0);
        assert_eq!(cache.take(16), None);
    }
}
