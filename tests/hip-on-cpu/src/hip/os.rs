//! The memory-mapping calls of the C library this platform makes (device
//! buffers between guard pages, fiber stacks), declared here once.

use std::ffi::{c_int, c_void};

unsafe extern "C" {
    pub(crate) fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    pub(crate) fn munmap(addr: *mut c_void, len: usize) -> c_int;
    pub(crate) fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
}

/// `PROT_NONE`.
pub(crate) const PROT_NONE: c_int = 0;
/// `PROT_READ | PROT_WRITE`.
pub(crate) const PROT_RW: c_int = 0x1 | 0x2;
/// `MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE` (Linux).
pub(crate) const MAP_PRIVATE_ANON_NORESERVE: c_int = 0x02 | 0x20 | 0x4000;
