//! Copies between host and device, device-to-device copies, memset and fill.
//!
//! Copies that take a borrowed host slice synchronise the stream before
//! returning, so the slice may be reused at once. The `*_owned` variants take
//! the host data by value and return immediately: the data is kept alive by
//! a host callback queued after the copy and dropped when the copy is done.
//!
//! Failures after work was queued never leave that work running against
//! memory that is about to be released: a failed synchronize of a host copy
//! falls back to waiting for the device (host memory this crate owns is
//! leaked when even that fails, see [`Stream::finish_host_copy`]), and a
//! stream that cannot be joined back after a copy or memset is waited for
//! on the host instead (see [`Stream::join_back`]).

use std::ffi::c_void;

use hip_sys::hipMemcpyKind;

use crate::buffer::{DeviceBuffer, DevicePtr, DevicePtrMut};
use crate::error::{Error, Result};
use crate::repr::{DeviceRepr, ValidAsZeroBits};
use crate::result::CheckStatus;
use crate::stream::Stream;

impl Stream {
    /// Copies `src` into a new buffer; returns once the copy has finished.
    pub fn clone_htod<T: DeviceRepr>(&self, src: &[T]) -> Result<DeviceBuffer<T>> {
        // SAFETY: every element is written by the copy before the buffer is
        // handed out (the copy is synchronous).
        let mut dst = unsafe { self.alloc::<T>(src.len()) }?;
        self.memcpy_htod(src, &mut dst)?;
        Ok(dst)
    }

    /// Copies `src` into the first `src.len()` elements of `dst`; returns
    /// once the copy has finished.
    pub fn memcpy_htod<T: DeviceRepr>(
        &self,
        src: &[T],
        dst: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        check_fits("memcpy_htod", src.len(), dst.len())?;
        self.join(dst.stream())?;
        let bytes = std::mem::size_of_val(src);
        self.copy_raw(
            dst.device_ptr_mut(),
            src.as_ptr().cast(),
            bytes,
            hipMemcpyKind::hipMemcpyHostToDevice,
        )?;
        // The borrow of `src` ends on return: wait for the copy even when
        // synchronizing fails (finish_host_copy's fallbacks).
        self.finish_host_copy().map_err(|(error, _)| error)
    }

    /// Copies `src` (taken by value) into a new buffer without waiting: the
    /// vector is released when the copy completes.
    pub fn clone_htod_owned<T: DeviceRepr>(&self, src: Vec<T>) -> Result<DeviceBuffer<T>> {
        // SAFETY: the copy queued below writes every element before any
        // later work on this stream can read the buffer.
        let mut dst = unsafe { self.alloc::<T>(src.len()) }?;
        self.memcpy_htod_owned(src, &mut dst)?;
        Ok(dst)
    }

    /// Queues a copy of `src` (taken by value) into the start of `dst`
    /// without waiting; the vector is released when the copy completes.
    pub fn memcpy_htod_owned<T: DeviceRepr>(
        &self,
        src: Vec<T>,
        dst: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        check_fits("memcpy_htod_owned", src.len(), dst.len())?;
        self.join(dst.stream())?;
        let bytes = std::mem::size_of_val(src.as_slice());
        let host = Box::new(src);
        let queued = self.copy_raw(
            dst.device_ptr_mut(),
            host.as_ptr().cast(),
            bytes,
            hipMemcpyKind::hipMemcpyHostToDevice,
        );
        if let Err(e) = queued {
            self.release_after_sync(host);
            return Err(e);
        }
        self.release_after_completion(host);
        dst.stream().join_back(self)
    }

    /// Copies `src` into a new host vector; returns once the copy is done.
    pub fn clone_dtoh<T: DeviceRepr>(&self, src: &impl DevicePtr<T>) -> Result<Vec<T>> {
        let bytes = byte_len::<T>("clone_dtoh", src.len())?;
        let mut out = Vec::<T>::with_capacity(src.len());
        self.join(src.stream())?;
        self.copy_raw(
            out.as_mut_ptr().cast(),
            src.device_ptr(),
            bytes,
            hipMemcpyKind::hipMemcpyDeviceToHost,
        )?;
        if let Err((error, finished)) = self.finish_host_copy() {
            if !finished {
                // The copy may still write into the vector: never free it.
                std::mem::forget(out);
            }
            return Err(error);
        }
        // SAFETY: the synchronous copy initialised `src.len()` elements, and
        // every bit pattern is a valid `T` (`DeviceRepr` contract).
        unsafe { out.set_len(src.len()) };
        Ok(out)
    }

    /// Copies `src` into the first `src.len()` elements of `dst`; returns
    /// once the copy has finished.
    pub fn memcpy_dtoh<T: DeviceRepr>(&self, src: &impl DevicePtr<T>, dst: &mut [T]) -> Result<()> {
        check_fits("memcpy_dtoh", src.len(), dst.len())?;
        self.join(src.stream())?;
        self.copy_raw(
            dst.as_mut_ptr().cast(),
            src.device_ptr(),
            std::mem::size_of_val(&dst[..src.len()]),
            hipMemcpyKind::hipMemcpyDeviceToHost,
        )?;
        // The borrow of `dst` ends on return: wait for the copy even when
        // synchronizing fails (finish_host_copy's fallbacks).
        self.finish_host_copy().map_err(|(error, _)| error)
    }

    /// Queues a copy of `src` into the first `src.len()` elements of `dst`.
    ///
    /// The two buffers may live on different devices: the copy is then a
    /// peer copy (`hipMemcpyPeerAsync`), direct when
    /// [`crate::Device::enable_peer_access`] allowed it and staged by the
    /// runtime otherwise, never through memory this crate manages.
    pub fn memcpy_dtod<T: DeviceRepr>(
        &self,
        src: &impl DevicePtr<T>,
        dst: &mut impl DevicePtrMut<T>,
    ) -> Result<()> {
        check_fits("memcpy_dtod", src.len(), dst.len())?;
        let bytes = byte_len::<T>("memcpy_dtod", src.len())?;
        self.join(src.stream())?;
        self.join(dst.stream())?;
        let (src_device, dst_device) = (
            src.stream().device().ordinal(),
            dst.stream().device().ordinal(),
        );
        if src_device == dst_device {
            self.copy_raw(
                dst.device_ptr_mut(),
                src.device_ptr(),
                bytes,
                hipMemcpyKind::hipMemcpyDeviceToDevice,
            )?;
        } else {
            self.copy_peer(
                (dst.device_ptr_mut(), dst_device),
                (src.device_ptr(), src_device),
                bytes,
            )?;
        }
        // Both joins are attempted even when the first fails.
        let src_joined = src.stream().join_back(self);
        let dst_joined = dst.stream().join_back(self);
        src_joined.and(dst_joined)
    }

    /// Queues a copy of `src` into a new buffer on this stream.
    pub fn clone_dtod<T: DeviceRepr>(&self, src: &impl DevicePtr<T>) -> Result<DeviceBuffer<T>> {
        // SAFETY: the queued copy writes every element before later work on
        // this stream can read the buffer.
        let mut dst = unsafe { self.alloc::<T>(src.len()) }?;
        self.memcpy_dtod(src, &mut dst)?;
        Ok(dst)
    }

    /// Queues setting every element of `dst` to zero.
    pub fn memset_zeros<T: ValidAsZeroBits>(&self, dst: &mut impl DevicePtrMut<T>) -> Result<()> {
        self.memset_words(dst, Word::U8(0))
    }

    /// Queues setting every element of `dst` to `value`.
    ///
    /// Uses the 8/16/32-bit memset engines when the value is a repeated
    /// pattern of that width. Other values (e.g. most `f64`s, structs) are
    /// written on the device: one element is uploaded, then the filled
    /// prefix is doubled with device-to-device copies (about log2(len)
    /// copies moving `len` elements in all), so no host buffer larger than
    /// one element is needed.
    pub fn fill<T: DeviceRepr>(&self, dst: &mut impl DevicePtrMut<T>, value: T) -> Result<()> {
        // SAFETY: `T: DeviceRepr` has no padding, so all its bytes are
        // initialised; the slice lives only while `value` does.
        let pattern = unsafe {
            std::slice::from_raw_parts(std::ptr::from_ref(&value).cast::<u8>(), size_of::<T>())
        };
        match repeated_word(pattern) {
            Some(word) => self.memset_words(dst, word),
            None => self.fill_by_doubling(dst, value),
        }
    }

    /// Queues filling `dst` with `value`: uploads the first element, then
    /// copies the filled prefix after itself until the buffer is full.
    fn fill_by_doubling<T: DeviceRepr>(
        &self,
        dst: &mut impl DevicePtrMut<T>,
        value: T,
    ) -> Result<()> {
        let total = byte_len::<T>("fill", dst.len())?;
        if total == 0 {
            return Ok(());
        }
        self.join(dst.stream())?;
        let base = dst.device_ptr_mut();
        let host = Box::new(value);
        let queued = self.copy_raw(
            base,
            std::ptr::from_ref::<T>(&host).cast(),
            size_of::<T>(),
            hipMemcpyKind::hipMemcpyHostToDevice,
        );
        if let Err(e) = queued {
            self.release_after_sync(host);
            return Err(e);
        }
        self.release_after_completion(host);
        let copies = doubling_copies(total, size_of::<T>()).try_for_each(|(offset, bytes)| {
            self.copy_raw(
                base.cast::<u8>().wrapping_add(offset).cast(),
                base,
                bytes,
                hipMemcpyKind::hipMemcpyDeviceToDevice,
            )
        });
        // Joined back even when a copy failed: earlier ones are queued.
        let joined = dst.stream().join_back(self);
        copies.and(joined)
    }

    /// Queues filling all of `dst` with `word`.
    fn memset_words<T: DeviceRepr>(
        &self,
        dst: &mut impl DevicePtrMut<T>,
        word: Word,
    ) -> Result<()> {
        let count = byte_len::<T>("memset", dst.len())? / word.bytes();
        if count == 0 {
            return Ok(());
        }
        self.join(dst.stream())?;
        self.bind()?;
        let (api, ptr, stream) = (self.api(), dst.device_ptr_mut(), self.raw());
        // SAFETY: `dst` holds `count` words of the word's width (its byte
        // size is a multiple of the width because the pattern repeats within
        // one element).
        unsafe {
            match word {
                Word::U8(v) => api.hipMemsetAsync(ptr, i32::from(v), count, stream),
                Word::U16(v) => api.hipMemsetD16Async(ptr, v, count, stream),
                Word::U32(v) => {
                    api.hipMemsetD32Async(ptr, i32::from_ne_bytes(v.to_ne_bytes()), count, stream)
                }
            }
        }
        .check(format_args!(
            "memset of {count} {}-byte words",
            word.bytes()
        ))?;
        dst.stream().join_back(self)
    }

    /// One `hipMemcpyAsync` on this stream.
    fn copy_raw(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: hipMemcpyKind,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: callers pass pointers valid for `bytes` bytes in the
        // direction `kind` names, kept alive until the copy completes.
        unsafe { self.api().hipMemcpyAsync(dst, src, bytes, kind, self.raw()) }.check(format_args!(
            "hipMemcpyAsync of {bytes} bytes ({})",
            kind_name(kind)
        ))
    }

    /// Queues `hipMemcpyPeerAsync` of `bytes` bytes from `src` on its device
    /// to `dst` on its device.
    fn copy_peer(
        &self,
        (dst, dst_device): (*mut c_void, usize),
        (src, src_device): (*const c_void, usize),
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let op = format_args!(
            "hipMemcpyPeerAsync of {bytes} bytes (device {src_device} to device {dst_device})"
        );
        let ordinal = |d: usize| {
            std::ffi::c_int::try_from(d).map_err(|_| Error::invalid(op, "device ordinal too large"))
        };
        let (dst_c, src_c) = (ordinal(dst_device)?, ordinal(src_device)?);
        self.bind()?;
        // SAFETY: callers pass device pointers valid for `bytes` bytes on
        // the named devices, kept alive until the copy completes.
        unsafe {
            self.api()
                .hipMemcpyPeerAsync(dst, dst_c, src, src_c, bytes, self.raw())
        }
        .check(op)
    }

    /// Queues a host callback that drops `host` once the stream reaches it
    /// (or, if the callback cannot be queued, waits and drops it now).
    fn release_after_completion<T: Send + 'static>(&self, host: Box<T>) {
        unsafe extern "C" fn release<T>(data: *mut c_void) {
            // SAFETY: `data` came from `Box::into_raw` below and this callback
            // runs exactly once. Dropping plain data calls no HIP API, as
            // host callbacks require.
            drop(unsafe { Box::from_raw(data.cast::<T>()) });
        }
        let raw = Box::into_raw(host);
        // SAFETY: live stream; the callback takes back ownership of `raw`.
        let queued = unsafe {
            self.api()
                .hipLaunchHostFunc(self.raw(), Some(release::<T>), raw.cast())
        }
        .check("hipLaunchHostFunc");
        if queued.is_err() {
            // SAFETY: the callback was not queued, so we still own `raw`.
            self.release_after_sync(unsafe { Box::from_raw(raw) });
        }
    }

    /// Waits for the stream, then drops `host`; if the copy cannot be shown
    /// to have finished (see [`Stream::finish_host_copy`]) it may still read
    /// `host`, which is leaked instead (safe, and only on a failing device).
    fn release_after_sync<T>(&self, host: Box<T>) {
        if let Err((_, false)) = self.finish_host_copy() {
            std::mem::forget(host);
        }
    }
}

/// A fill value that repeats one 8-, 16- or 32-bit word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word {
    U8(u8),
    U16(u16),
    U32(u32),
}

impl Word {
    fn bytes(self) -> usize {
        match self {
            Word::U8(_) => 1,
            Word::U16(_) => 2,
            Word::U32(_) => 4,
        }
    }
}

/// The device-to-device copies that grow a filled prefix of `unit` bytes
/// to `total` bytes, as `(offset, bytes)`: each copies the first `bytes`
/// bytes to `offset`, where `bytes <= offset`, so source and destination
/// never overlap; together they cover `unit..total` exactly once.
fn doubling_copies(total: usize, unit: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut filled = unit.min(total);
    std::iter::from_fn(move || {
        if filled == 0 || filled >= total {
            return None;
        }
        let bytes = filled.min(total - filled);
        let copy = (filled, bytes);
        filled += bytes;
        Some(copy)
    })
}

/// The narrowest word whose repetition gives `pattern`, if any.
fn repeated_word(pattern: &[u8]) -> Option<Word> {
    let repeats = |w: usize| {
        let chunks = pattern.chunks_exact(w);
        chunks.remainder().is_empty() && chunks.clone().all(|c| c == &pattern[..w])
    };
    if pattern.is_empty() {
        return None;
    }
    if repeats(1) {
        Some(Word::U8(pattern[0]))
    } else if repeats(2) {
        Some(Word::U16(u16::from_ne_bytes([pattern[0], pattern[1]])))
    } else if repeats(4) {
        Some(Word::U32(u32::from_ne_bytes([
            pattern[0], pattern[1], pattern[2], pattern[3],
        ])))
    } else {
        None
    }
}

/// The size in bytes of `len` elements of `T`, computed here rather than
/// taken from a [`DevicePtr`] implementation; an error when it overflows
/// (which an implementation keeping its safety contract never causes).
fn byte_len<T>(op: &str, len: usize) -> Result<usize> {
    let elem = size_of::<T>();
    len.checked_mul(elem).ok_or_else(|| {
        Error::invalid(
            op,
            format_args!("{len} elements of {elem} bytes overflow usize"),
        )
    })
}

fn check_fits(op: &str, src_len: usize, dst_len: usize) -> Result<()> {
    if src_len > dst_len {
        return Err(Error::invalid(
            op,
            format_args!("source has {src_len} elements but destination only {dst_len}"),
        ));
    }
    Ok(())
}

fn kind_name(kind: hipMemcpyKind) -> &'static str {
    match kind {
        hipMemcpyKind::hipMemcpyHostToDevice => "host to device",
        hipMemcpyKind::hipMemcpyDeviceToHost => "device to host",
        hipMemcpyKind::hipMemcpyDeviceToDevice => "device to device",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_patterns_pick_the_narrowest_word() {
        assert_eq!(repeated_word(&0f32.to_ne_bytes()), Some(Word::U8(0)));
        assert_eq!(repeated_word(&[7u8]), Some(Word::U8(7)));
        let h = half::f16::from_f32(1.0).to_ne_bytes();
        assert_eq!(repeated_word(&h), Some(Word::U16(u16::from_ne_bytes(h))));
        let f = 1.5f32.to_ne_bytes();
        assert_eq!(repeated_word(&f), Some(Word::U32(u32::from_ne_bytes(f))));
        let mut twice = [0u8; 8];
        twice[..4].copy_from_slice(&f);
        twice[4..].copy_from_slice(&f);
        assert_eq!(
            repeated_word(&twice),
            Some(Word::U32(u32::from_ne_bytes(f)))
        );
        assert_eq!(repeated_word(&1.5f64.to_ne_bytes()), None);
        assert_eq!(repeated_word(&[]), None);
    }

    #[test]
    fn doubling_copies_cover_the_buffer_once_without_overlap() {
        for (total, unit) in [(8, 8), (16, 8), (24, 8), (8000, 8), (12 * 1001, 12), (3, 1)] {
            let copies: Vec<_> = doubling_copies(total, unit).collect();
            let mut covered = unit;
            for &(offset, bytes) in &copies {
                assert_eq!(offset, covered, "contiguous ({total}, {unit})");
                assert!(bytes <= offset && bytes > 0, "no overlap ({total}, {unit})");
                covered += bytes;
            }
            assert_eq!(covered, total, "covers ({total}, {unit})");
            let elems = total / unit;
            let doublings = usize::BITS - (elems - 1).leading_zeros();
            assert_eq!(copies.len(), doublings as usize, "log2 copies for {elems}");
        }
        let huge = doubling_copies(40 << 30, 8).count();
        assert_eq!(huge, 33, "40 GiB of f64 in 33 copies");
        assert_eq!(doubling_copies(0, 8).count(), 0);
        assert_eq!(doubling_copies(8, 0).count(), 0);
    }

    #[test]
    fn byte_counts_are_computed_with_overflow_checks() {
        assert_eq!(byte_len::<f32>("x", 3), Ok(12));
        assert_eq!(byte_len::<u8>("x", usize::MAX), Ok(usize::MAX));
        assert_eq!(byte_len::<half::f16>("x", 0), Ok(0));
        let err = byte_len::<f64>("clone_dtoh", usize::MAX / 4)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("clone_dtoh") && err.contains("overflow"),
            "{err}"
        );
    }

    #[test]
    fn copies_must_fit() {
        assert!(check_fits("x", 3, 3).is_ok());
        assert!(check_fits("x", 2, 3).is_ok());
        let err = check_fits("memcpy_htod", 4, 3).unwrap_err().to_string();
        assert!(
            err.contains("memcpy_htod") && err.contains("4") && err.contains("3"),
            "{err}"
        );
    }
}
