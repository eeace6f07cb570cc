//! The fiber stacks a launch's kernel threads run on: one set per CPU
//! thread, shared by every module (`hipcpu::Launch::stacks`). Shared
//! because each stack takes three mappings: stacks per module and CPU
//! thread ran a suite that loads a few hundred modules out of the process's
//! mappings (`vm.max_map_count`, 65530 by default).
//!
//! A stack region is `STACK_REGION` bytes aligned to its size (device code
//! finds its thread's header by masking the stack pointer): the header page
//! (`hipcpu::StackHeader`, written by the module per launch), a guard page,
//! then the stack growing down from the region's end. Mirrors
//! `kStackRegion` and `kPage` of `device/hipcpu`.

use std::cell::RefCell;
use std::ffi::{c_char, c_void};

use super::os::{MAP_PRIVATE_ANON_NORESERVE, PROT_NONE, PROT_RW, mmap, mprotect, munmap};

/// Bytes of one stack region (`hipcpu::kStackRegion`).
const STACK_REGION: usize = 1 << 19;
/// The page size; the guard page follows the header page.
const PAGE: usize = 4096;
/// The most threads a block has (`hipcpu::kMaxThreads`); the module refuses
/// larger blocks.
const MAX_BLOCK_THREADS: usize = 1024;

/// The stack regions of this CPU thread, unmapped when it ends.
struct Stacks(Vec<*mut c_char>);

impl Drop for Stacks {
    fn drop(&mut self) {
        for &region in &self.0 {
            // SAFETY: a region made by `new_region`, used by no fiber once
            // its thread ends.
            unsafe { munmap(region.cast(), STACK_REGION) };
        }
    }
}

thread_local! {
    static STACKS: RefCell<Stacks> = const { RefCell::new(Stacks(Vec::new())) };
}

/// A fresh stack region, or `None` when the system refuses the mapping.
fn new_region() -> Option<*mut c_char> {
    // Twice the region, trimmed to the aligned region inside it.
    let span = 2 * STACK_REGION;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choice.
    let p = unsafe {
        mmap(
            std::ptr::null_mut(),
            span,
            PROT_RW,
            MAP_PRIVATE_ANON_NORESERVE,
            -1,
            0,
        )
    };
    if p as isize == -1 {
        return None;
    }
    let base = p as usize;
    let region = base.next_multiple_of(STACK_REGION);
    // SAFETY: both trimmed ranges (possibly empty) and the guard page lie
    // inside the mapping just made.
    unsafe {
        if region > base {
            munmap(p, region - base);
        }
        let end = region + STACK_REGION;
        if end < base + span {
            munmap(end as *mut c_void, base + span - end);
        }
        mprotect((region + PAGE) as *mut c_void, PAGE, PROT_NONE);
    }
    Some(region as *mut c_char)
}

/// Runs `f` with a stack region of this CPU thread for each of a block's
/// `threads` (at most `MAX_BLOCK_THREADS`): their addresses, then how many
/// there are. `Err` when they cannot be mapped.
pub(crate) fn with_stacks<R>(
    threads: usize,
    f: impl FnOnce(*const *mut c_char, u64) -> R,
) -> Result<R, String> {
    let n = threads.min(MAX_BLOCK_THREADS);
    STACKS.with(|stacks| {
        let mut stacks = stacks.borrow_mut();
        while stacks.0.len() < n {
            let region = new_region().ok_or("out of memory for fiber stacks")?;
            stacks.0.push(region);
        }
        Ok(f(stacks.0.as_ptr(), stacks.0.len() as u64))
    })
}
