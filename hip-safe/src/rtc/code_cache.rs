//! The on-disk code-object cache.
//!
//! One file per compiled program, named by the 128-bit hash of its key. A
//! file holds a magic tag, the full key (so a hash collision is detected),
//! the code object and a checksum of both. Files are written to a unique
//! temporary name and renamed into place, so readers never see a partial
//! entry, and two processes filling the same entry at once each rename a
//! complete file (the last one wins, both are identical). Anything that does
//! not parse or verify is treated as a miss and rewritten by the caller, and
//! the caller also checks that a hit is a well-formed code object.
//!
//! **The key** holds everything that determines the code object: the
//! source, every in-memory header (name and text), the options, the target
//! architecture, and the compiler's identity: hipRTC's own version
//! (`hiprtcVersion`), the hipRTC library file that was loaded (resolved
//! path, size and modification time, so an updated or rebuilt library, with
//! the built-in headers it carries, gets new keys) and the HIP runtime's
//! full version. hipRTC does not report which files a compile read, so a
//! program whose options make it read files from disk (`-I`, `-include`,
//! `--rocm-path`, ...; see `Program::compile_for_arch`) is not cached.
//!
//! **The directory** must be a directory owned by the current user and not
//! writable by group or others (checked on Unix before every use, after
//! creating it with mode 0700 if needed): anyone else who can write there
//! could plant entries. A directory that fails the check is not used at
//! all, every compile then runs hipRTC: loads miss, and stores fail with an
//! error saying why (`Program` ignores store errors, so the fallback is
//! simply no caching). Point `HIP_SAFE_CACHE_DIR` at a private directory to
//! cache again.
//!
//! **Entries** are read only when they are regular files (not symlinks,
//! FIFOs or devices: checked with `symlink_metadata` before opening, and the
//! file is opened non-blocking and checked again to be the same file, so a
//! FIFO planted at an entry path can never hang a read), owned by the
//! current user (Unix) and no larger than [`MAX_CACHE_BYTES`].
//!
//! **Size**: the directory holds at most [`MAX_CACHE_BYTES`] of entries. A
//! hit sets the entry's modification time to now, and every store evicts
//! the least recently used entries (oldest modification time first) until
//! the rest fits. Every store also deletes temporary files left behind by
//! writers that died: those whose process no longer exists (Linux, by
//! `/proc`) once a minute old, and any older than an hour.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use super::hash::fnv1a_128;

const MAGIC: &[u8; 8] = b"HIPSAFE1";
const KEY_TAG: &[u8] = b"hip-safe code-object cache v1";
/// Environment variable overriding the cache directory; set it to an empty
/// value to disable the cache.
pub const CACHE_DIR_VAR: &str = "HIP_SAFE_CACHE_DIR";
/// The most bytes of entries the cache directory keeps (256 MiB); least
/// recently used entries are deleted beyond it. No single entry larger
/// than this is read.
pub const MAX_CACHE_BYTES: u64 = 256 << 20;
/// How entries' file names end.
const ENTRY_SUFFIX: &str = ".hipco";
/// What follows an entry's file name in its temporary files' names.
const TEMP_MARKER: &str = ".tmp-";
/// A temporary file of a writer that no longer exists is deleted once
/// this old; any temporary file once [`STALE_TEMP_AGE`] old.
const DEAD_WRITER_TEMP_AGE: Duration = Duration::from_secs(60);
const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);

/// Everything that determines a compiled code object, serialised without
/// ambiguity (every field is length-prefixed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CodeCacheKey {
    bytes: Vec<u8>,
}

impl CodeCacheKey {
    /// The key of `source` (with its in-memory `headers`) compiled with
    /// `options` for `arch` by the compiler identified by `compiler`.
    pub(crate) fn new(
        source: &str,
        headers: &[(String, String)],
        options: &[String],
        arch: &str,
        compiler: &str,
    ) -> CodeCacheKey {
        let mut bytes = Vec::with_capacity(source.len() + 256);
        let mut field = |b: &[u8]| {
            bytes.extend_from_slice(&(b.len() as u64).to_le_bytes());
            bytes.extend_from_slice(b);
        };
        field(KEY_TAG);
        field(compiler.as_bytes());
        field(arch.as_bytes());
        field(&(options.len() as u64).to_le_bytes());
        options.iter().for_each(|o| field(o.as_bytes()));
        field(&(headers.len() as u64).to_le_bytes());
        for (name, text) in headers {
            field(name.as_bytes());
            field(text.as_bytes());
        }
        field(source.as_bytes());
        CodeCacheKey { bytes }
    }

    /// FNV-1a 128 of the serialised key.
    pub(crate) fn hash(&self) -> u128 {
        fnv1a_128(&[&self.bytes])
    }

    fn file_name(&self) -> String {
        format!("{:032x}{ENTRY_SUFFIX}", self.hash())
    }
}

/// A directory of cached code objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CodeCache {
    dir: PathBuf,
    /// The most bytes of entries kept ([`MAX_CACHE_BYTES`]).
    limit: u64,
}

impl CodeCache {
    pub(crate) fn new(dir: PathBuf) -> CodeCache {
        CodeCache {
            dir,
            limit: MAX_CACHE_BYTES,
        }
    }

    /// The path an entry for `key` lives at.
    pub(crate) fn path_of(&self, key: &CodeCacheKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The stored code object for `key`, or `None` when absent, unreadable,
    /// not a regular file of ours, corrupt, stored for another key, or when
    /// the directory is not private (see the module documentation). A hit
    /// marks the entry as recently used.
    pub(crate) fn load(&self, key: &CodeCacheKey) -> Option<Vec<u8>> {
        check_private_dir(&self.dir).ok()?;
        let path = self.path_of(key);
        let data = read_entry(&path, self.limit).ok()?;
        let code = decode_entry(&data, key)?;
        touch(&path);
        Some(code)
    }

    /// Stores `code` for `key` atomically (temporary file, then rename),
    /// then evicts least recently used entries beyond the size limit
    /// ([`MAX_CACHE_BYTES`]) and deletes dead writers' temporary files. Fails without writing
    /// when the directory is not private.
    pub(crate) fn store(&self, key: &CodeCacheKey, code: &[u8]) -> io::Result<()> {
        create_private_dir(&self.dir)?;
        check_private_dir(&self.dir)?;
        let target = self.path_of(key);
        let tmp = unique_temp_path(&target);
        let written =
            write_new(&tmp, &encode_entry(key, code)).and_then(|()| fs::rename(&tmp, &target));
        if written.is_err() {
            // Best effort: a leftover temporary file is harmless, but tidy up.
            let _ = fs::remove_file(&tmp);
        }
        written?;
        self.tidy(&target, SystemTime::now());
        Ok(())
    }

    /// Deletes dead writers' temporary files, then the least recently used
    /// entries (never `keep`, the entry just written) until the rest fits
    /// in the limit. Failures (a file another process removed
    /// first) are ignored.
    fn tidy(&self, keep: &Path, now: SystemTime) {
        let Ok(listing) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries = Vec::new();
        for item in listing.flatten() {
            let path = item.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.file_type().is_file() {
                continue;
            }
            let age = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            let name = item.file_name();
            let name = name.to_string_lossy();
            if let Some(pid) = temp_file_writer(&name) {
                if is_abandoned(pid, age) {
                    let _ = fs::remove_file(&path);
                }
            } else if name.ends_with(ENTRY_SUFFIX) && path != keep {
                entries.push((meta.modified().ok(), meta.len(), path));
            }
        }
        let keep_bytes = fs::symlink_metadata(keep).map_or(0, |m| m.len());
        let mut total = entries
            .iter()
            .fold(keep_bytes, |sum, (_, len, _)| sum.saturating_add(*len));
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.limit {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

/// The process id in a temporary file's name (`<entry>.tmp-<pid>-<n>`).
fn temp_file_writer(name: &str) -> Option<u32> {
    let (entry, rest) = name.split_once(TEMP_MARKER)?;
    if !entry.ends_with(ENTRY_SUFFIX) {
        return None;
    }
    let (pid, counter) = rest.split_once('-')?;
    counter.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Whether a temporary file of writer `pid`, `age` old, was left behind:
/// its writer no longer exists (where that can be told) and it is a
/// minute old, or it is an hour old whoever wrote it.
fn is_abandoned(pid: u32, age: Duration) -> bool {
    age >= STALE_TEMP_AGE || (age >= DEAD_WRITER_TEMP_AGE && process_is_gone(pid))
}

/// Whether process `pid` certainly does not exist: Linux's `/proc` has no
/// entry for it (`false` where there is no `/proc` to ask).
fn process_is_gone(pid: u32) -> bool {
    let proc = Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

/// Marks an entry as just used (its modification time orders eviction).
fn touch(path: &Path) {
    if let Ok(file) = open_nonblocking(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Reads an entry of at most `limit` bytes that passes the checks of the
/// module documentation.
fn read_entry(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let before = fs::symlink_metadata(path)?;
    check_entry(&before, limit)?;
    let file = open_nonblocking(path)?;
    let after = file.metadata()?;
    check_entry(&after, limit)?;
    if !same_file(&before, &after) {
        return Err(io::Error::other("the entry was replaced while opening it"));
    }
    let mut data = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut data)?;
    if data.len() as u64 > limit {
        return Err(io::Error::other("the entry grew past the size limit"));
    }
    Ok(data)
}

/// A regular file, owned by the current user, of at most `limit` bytes.
fn check_entry(meta: &fs::Metadata, limit: u64) -> io::Result<()> {
    if !meta.file_type().is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if meta.len() > limit {
        return Err(io::Error::other("larger than the cache"));
    }
    check_owner(meta)
}

#[cfg(unix)]
mod os {
    //! Unix: ownership, permission bits, non-blocking opens.

    use std::fs;
    use std::io;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    use std::path::Path;

    unsafe extern "C" {
        /// POSIX `geteuid`, from the C library std links on every Unix.
        fn geteuid() -> u32;
    }

    /// The effective user id of this process.
    pub(super) fn current_user() -> u32 {
        // SAFETY: geteuid takes no arguments, has no preconditions and
        // cannot fail.
        unsafe { geteuid() }
    }

    /// `O_NONBLOCK` where its value is known: opening a FIFO then returns
    /// at once instead of waiting for a writer. Elsewhere 0 (the check
    /// before opening still refuses FIFOs).
    #[cfg(all(
        any(target_os = "linux", target_os = "android"),
        not(any(
            target_arch = "mips",
            target_arch = "mips32r6",
            target_arch = "mips64",
            target_arch = "mips64r6",
            target_arch = "sparc",
            target_arch = "sparc64"
        ))
    ))]
    const O_NONBLOCK: i32 = 0o4000;
    #[cfg(any(
        target_vendor = "apple",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly"
    ))]
    const O_NONBLOCK: i32 = 0x4;
    #[cfg(not(any(
        all(
            any(target_os = "linux", target_os = "android"),
            not(any(
                target_arch = "mips",
                target_arch = "mips32r6",
                target_arch = "mips64",
                target_arch = "mips64r6",
                target_arch = "sparc",
                target_arch = "sparc64"
            ))
        ),
        target_vendor = "apple",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly"
    )))]
    const O_NONBLOCK: i32 = 0;

    pub(super) fn open_nonblocking(path: &Path) -> io::Result<fs::File> {
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NONBLOCK)
            .open(path)
    }

    pub(super) fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
        (a.dev(), a.ino()) == (b.dev(), b.ino())
    }

    pub(super) fn check_owner(meta: &fs::Metadata) -> io::Result<()> {
        let (owner, me) = (meta.uid(), current_user());
        if owner != me {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("owned by user {owner}, not by this process's user {me}"),
            ));
        }
        Ok(())
    }

    /// Refuses a directory that is not ours or that group or others may
    /// write to.
    pub(super) fn check_private_dir(dir: &Path) -> io::Result<()> {
        let meta = fs::metadata(dir)?;
        let denied = |why: String| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "code-object cache directory {} {why}; it is not used (every program is \
                     compiled; point HIP_SAFE_CACHE_DIR at a private directory)",
                    dir.display()
                ),
            )
        };
        if !meta.is_dir() {
            return Err(denied("is not a directory".into()));
        }
        check_owner(&meta).map_err(|e| denied(format!("is {e}")))?;
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            return Err(denied(format!(
                "is writable by group or others (mode {mode:04o})"
            )));
        }
        Ok(())
    }

    /// Creates `dir` (and missing parents) with mode 0700.
    pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
}

#[cfg(not(unix))]
mod os {
    //! Elsewhere: no ownership or permission bits to check.

    use std::fs;
    use std::io;
    use std::path::Path;

    pub(super) fn open_nonblocking(path: &Path) -> io::Result<fs::File> {
        fs::File::open(path)
    }

    pub(super) fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
        a.len() == b.len() && a.modified().ok() == b.modified().ok()
    }

    pub(super) fn check_owner(_: &fs::Metadata) -> io::Result<()> {
        Ok(())
    }

    pub(super) fn check_private_dir(dir: &Path) -> io::Result<()> {
        if fs::metadata(dir)?.is_dir() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "code-object cache directory {} is not a directory",
                dir.display()
            )))
        }
    }

    pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
}

use os::{check_owner, check_private_dir, create_private_dir, open_nonblocking, same_file};

/// The default cache directory: `$HIP_SAFE_CACHE_DIR` when set (an empty
/// value disables the cache: `None`), else `$XDG_CACHE_HOME/hip-safe`, else
/// `$HOME/.cache/hip-safe`, else `None`.
///
/// A cache directory is created with mode 0700 and used only while it
/// belongs to the current user and cannot be written by group or others
/// (on Unix); otherwise programs are compiled every time, as if there were
/// no cache. It keeps at most [`MAX_CACHE_BYTES`] of code objects, evicting
/// the least recently used, and deletes temporary files that writers which
/// died left behind.
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_dir_from(
        std::env::var_os(CACHE_DIR_VAR),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

fn cache_dir_from(
    explicit: Option<std::ffi::OsString>,
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    if let Some(dir) = explicit {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    if let Some(xdg) = xdg.filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(xdg).join("hip-safe"));
    }
    home.filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache").join("hip-safe"))
}

fn unique_temp_path(target: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(format!("{TEMP_MARKER}{}-{n}", std::process::id()));
    target.with_file_name(name)
}

fn write_new(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(data)
}

fn encode_entry(key: &CodeCacheKey, code: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 32 + key.bytes.len() + code.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&key.bytes);
    out.extend_from_slice(&(code.len() as u64).to_le_bytes());
    out.extend_from_slice(code);
    out.extend_from_slice(&fnv1a_128(&[&key.bytes, code]).to_le_bytes());
    out
}

fn decode_entry(data: &[u8], key: &CodeCacheKey) -> Option<Vec<u8>> {
    let rest = data.strip_prefix(MAGIC)?;
    let (stored_key, rest) = take_field(rest)?;
    let (code, rest) = take_field(rest)?;
    let checksum = u128::from_le_bytes(rest.try_into().ok()?);
    let valid = stored_key == key.bytes.as_slice()
        && !code.is_empty()
        && checksum == fnv1a_128(&[stored_key, code]);
    valid.then(|| code.to_vec())
}

/// Splits a `u64` length-prefixed field off the front of `data`.
fn take_field(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = data.split_first_chunk::<8>()?;
    let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
    (len <= rest.len()).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: &str) -> CodeCacheKey {
        CodeCacheKey::new(src, &[], &["-O3".into()], "gfx90a", "6.4.43484")
    }

    fn temp_cache(name: &str) -> CodeCache {
        let dir =
            std::env::temp_dir().join(format!("hip-safe-cache-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        CodeCache::new(dir)
    }

    #[test]
    fn stores_and_loads() {
        let cache = temp_cache("roundtrip");
        let k = key("kernel");
        assert_eq!(cache.load(&k), None);
        cache.store(&k, b"\x7fELF code").unwrap();
        assert_eq!(cache.load(&k).as_deref(), Some(&b"\x7fELF code"[..]));
        let _ = fs::remove_dir_all(&cache.dir);
    }

    #[test]
    fn every_key_field_matters() {
        let base = CodeCacheKey::new("s", &[], &["-O3".into()], "gfx90a", "6.4");
        let variants = [
            CodeCacheKey::new("t", &[], &["-O3".into()], "gfx90a", "6.4"),
            CodeCacheKey::new("s", &[], &["-O2".into()], "gfx90a", "6.4"),
            CodeCacheKey::new("s", &[], &[], "gfx90a", "6.4"),
            CodeCacheKey::new("s", &[], &["-O3".into()], "gfx942", "6.4"),
            CodeCacheKey::new("s", &[], &["-O3".into()], "gfx90a", "7.0"),
            CodeCacheKey::new(
                "s",
                &[("h.h".into(), "x".into())],
                &["-O3".into()],
                "gfx90a",
                "6.4",
            ),
        ];
        for v in &variants {
            assert_ne!(v, &base);
            assert_ne!(v.file_name(), base.file_name());
        }
        // Length prefixes keep field boundaries apart.
        assert_ne!(
            CodeCacheKey::new("s", &[], &["a".into(), "b".into()], "x", "1"),
            CodeCacheKey::new("s", &[], &["ab".into()], "x", "1")
        );
    }

    #[test]
    fn corrupt_entries_are_misses_and_get_rewritten() {
        let cache = temp_cache("corrupt");
        let k = key("kernel");
        cache.store(&k, b"good code").unwrap();
        let path = cache.path_of(&k);
        let good = fs::read(&path).unwrap();
        let mut flipped = good.clone();
        let last = flipped.len() - 20;
        flipped[last] ^= 0xff;
        let corruptions: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"garbage".to_vec(),
            good[..good.len() / 2].to_vec(),
            flipped,
            [good.as_slice(), b"trailing"].concat(),
        ];
        for bad in corruptions {
            fs::write(&path, &bad).unwrap();
            assert_eq!(cache.load(&k), None, "{bad:?} must not load");
        }
        cache.store(&k, b"good code").unwrap();
        assert_eq!(cache.load(&k).as_deref(), Some(&b"good code"[..]));
        let _ = fs::remove_dir_all(&cache.dir);
    }

    #[test]
    fn an_entry_for_another_key_is_a_miss() {
        let cache = temp_cache("collision");
        let (a, b) = (key("a"), key("b"));
        cache.store(&a, b"code of a").unwrap();
        fs::rename(cache.path_of(&a), cache.path_of(&b)).unwrap();
        assert_eq!(cache.load(&b), None);
        let _ = fs::remove_dir_all(&cache.dir);
    }

    #[test]
    fn concurrent_writers_and_readers_never_see_partial_entries() {
        let cache = temp_cache("threads");
        let k = key("shared");
        let code: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20 {
                        cache.store(&k, &code).unwrap();
                    }
                });
                s.spawn(|| {
                    for _ in 0..200 {
                        if let Some(found) = cache.load(&k) {
                            assert_eq!(found, code);
                        }
                    }
                });
            }
        });
        assert_eq!(cache.load(&k), Some(code));
        let leftovers = fs::read_dir(&cache.dir).unwrap().count();
        assert_eq!(leftovers, 1, "temporary files must be renamed away");
        let _ = fs::remove_dir_all(&cache.dir);
    }

    /// Child half of the two-process test: fills the cache directory named
    /// by the environment (does nothing when run on its own).
    #[test]
    fn child_process_writer() {
        let Some(dir) = std::env::var_os("HIP_SAFE_TEST_CACHE_CHILD") else {
            return;
        };
        let cache = CodeCache::new(PathBuf::from(dir));
        let code: Vec<u8> = (0..300_000u32).map(|i| (i % 239) as u8).collect();
        for _ in 0..30 {
            cache.store(&key("two processes"), &code).unwrap();
            if let Some(found) = cache.load(&key("two processes")) {
                assert_eq!(found, code);
            }
        }
    }

    #[test]
    fn two_processes_fill_one_entry_at_once() {
        let cache = temp_cache("processes");
        let exe = std::env::current_exe().unwrap();
        let children: Vec<_> = (0..2)
            .map(|_| {
                std::process::Command::new(&exe)
                    .args([
                        "--exact",
                        "rtc::code_cache::tests::child_process_writer",
                        "--quiet",
                    ])
                    .env("HIP_SAFE_TEST_CACHE_CHILD", &cache.dir)
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
        let code: Vec<u8> = (0..300_000u32).map(|i| (i % 239) as u8).collect();
        assert_eq!(cache.load(&key("two processes")), Some(code));
        let _ = fs::remove_dir_all(&cache.dir);
    }

    /// An entry path's file with its modification time `ago` in the past.
    fn age(path: &Path, ago: Duration) {
        let file = fs::File::options().append(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - ago).unwrap();
    }

    #[cfg(unix)]
    fn chmod(dir: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_others_can_write_is_not_used() {
        let cache = temp_cache("permissions");
        let k = key("kernel");
        cache.store(&k, b"code").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&cache.dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "created private");
        for open in [0o777, 0o770, 0o702, 0o1777] {
            chmod(&cache.dir, open);
            assert_eq!(
                cache.load(&k),
                None,
                "mode {open:o}: a planted entry is read"
            );
            let err = cache.store(&k, b"code").unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
            assert!(
                err.to_string().contains("writable by group or others"),
                "{err}"
            );
        }
        chmod(&cache.dir, 0o755);
        assert_eq!(cache.load(&k).as_deref(), Some(&b"code"[..]));
        if os::current_user() == 0 {
            // Root can hand the directory, or an entry, to another user.
            let nobody = 65534;
            std::os::unix::fs::chown(cache.path_of(&k), Some(nobody), None).unwrap();
            assert_eq!(cache.load(&k), None, "an entry of another user is read");
            std::os::unix::fs::chown(&cache.dir, Some(nobody), None).unwrap();
            let err = cache.store(&k, b"code").unwrap_err();
            assert!(err.to_string().contains("owned by user 65534"), "{err}");
        }
        let _ = fs::remove_dir_all(&cache.dir);
    }

    #[cfg(unix)]
    #[test]
    fn fifos_and_symlinks_at_entry_paths_are_misses_without_blocking() {
        let cache = temp_cache("fifo");
        let (k, other) = (key("kernel"), key("other"));
        cache.store(&other, b"code of other").unwrap();
        let path = cache.path_of(&k);
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let (done, finished) = std::sync::mpsc::channel();
        let reader = cache.clone();
        let key = k.clone();
        std::thread::spawn(move || done.send(reader.load(&key)).unwrap());
        let loaded = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("loading a FIFO entry must not block");
        assert_eq!(loaded, None);
        // A store replaces the FIFO with a regular entry.
        cache.store(&k, b"code").unwrap();
        assert_eq!(cache.load(&k).as_deref(), Some(&b"code"[..]));
        // A symlink to a valid entry is not followed.
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(cache.path_of(&other), &path).unwrap();
        assert_eq!(cache.load(&k), None);
        let _ = fs::remove_dir_all(&cache.dir);
    }

    #[test]
    fn the_size_limit_evicts_least_recently_used_entries() {
        let mut cache = temp_cache("lru");
        let code = vec![7u8; 10_000];
        let keys: Vec<_> = ["a", "b", "c", "d"].into_iter().map(key).collect();
        cache.store(&keys[0], &code).unwrap();
        let entry = fs::metadata(cache.path_of(&keys[0])).unwrap().len();
        // Room for three entries and a half.
        cache.limit = 3 * entry + entry / 2;
        for (k, ago) in keys[..3].iter().zip([40, 30, 20]) {
            cache.store(k, &code).unwrap();
            age(&cache.path_of(k), Duration::from_secs(ago));
        }
        // Using `a` makes `b` the least recently used.
        assert_eq!(cache.load(&keys[0]), Some(code.clone()));
        cache.store(&keys[3], &code).unwrap();
        let present: Vec<bool> = keys.iter().map(|k| cache.path_of(k).exists()).collect();
        assert_eq!(present, [true, false, true, true]);
        // An entry larger than the limit is never read.
        cache.limit = entry - 1;
        assert_eq!(cache.load(&keys[3]), None);
        let _ = fs::remove_dir_all(&cache.dir);
    }

    #[test]
    fn temporary_files_of_dead_writers_are_deleted() {
        let cache = temp_cache("temps");
        let k = key("kernel");
        cache.store(&k, b"code").unwrap();
        let entry = k.file_name();
        let me = std::process::id();
        let file = |name: String, ago: u64| {
            let path = cache.dir.join(name);
            fs::write(&path, b"partial").unwrap();
            age(&path, Duration::from_secs(ago));
            path
        };
        let dead_old = file(format!("{entry}.tmp-999999999-0"), 120);
        let dead_fresh = file(format!("{entry}.tmp-999999999-1"), 0);
        let live = file(format!("{entry}.tmp-{me}-7"), 120);
        let live_stale = file(format!("{entry}.tmp-{me}-8"), 7200);
        let unrelated = file("notes.txt.tmp-999999999-0".into(), 7200);
        cache.store(&key("another"), b"code").unwrap();
        assert_eq!(
            dead_old.exists(),
            !cfg!(target_os = "linux"),
            "a dead writer's file (Linux tells by /proc)"
        );
        assert!(
            dead_fresh.exists(),
            "a dead writer's file younger than a minute"
        );
        assert!(live.exists(), "a live writer's file");
        assert!(
            !live_stale.exists(),
            "any temporary file older than an hour"
        );
        assert!(unrelated.exists(), "not a cache file");
        assert_eq!(temp_file_writer(&format!("{entry}.tmp-42-3")), Some(42));
        assert_eq!(temp_file_writer(&format!("{entry}.tmp-x-3")), None);
        assert_eq!(temp_file_writer(&entry), None);
        let _ = fs::remove_dir_all(&cache.dir);
    }

    #[test]
    fn default_directory_follows_the_environment() {
        use std::ffi::OsString;
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(
            cache_dir_from(os("/x"), os("/xdg"), os("/home/u")),
            Some(PathBuf::from("/x"))
        );
        assert_eq!(cache_dir_from(os(""), os("/xdg"), os("/home/u")), None);
        assert_eq!(
            cache_dir_from(None, os("/xdg"), os("/home/u")),
            Some(PathBuf::from("/xdg/hip-safe"))
        );
        assert_eq!(
            cache_dir_from(None, None, os("/home/u")),
            Some(PathBuf::from("/home/u/.cache/hip-safe"))
        );
        assert_eq!(cache_dir_from(None, None, None), None);
    }
}
