//! The on-disk code-object cache.
//!
//! One file per compiled program, named by the 128-bit hash of its key. A
//! file holds a magic tag, the full key (so a hash collision is detected),
//! the code object and a checksum of both. Files are written to a unique
//! temporary name and renamed into place, so readers never see a partial
//! entry, and two processes filling the same entry at once each rename a
//! complete file (the last one wins, both are identical). Anything that does
//! not parse or verify is treated as a miss and rewritten by the caller.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::hash::fnv1a_128;

const MAGIC: &[u8; 8] = b"HIPSAFE1";
const KEY_TAG: &[u8] = b"hip-safe code-object cache v1";
/// Environment variable overriding the cache directory; set it to an empty
/// value to disable the cache.
pub const CACHE_DIR_VAR: &str = "HIP_SAFE_CACHE_DIR";

/// Everything that determines a compiled code object, serialised without
/// ambiguity (every field is length-prefixed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CodeCacheKey {
    bytes: Vec<u8>,
}

impl CodeCacheKey {
    /// The key of `source` (with its in-memory `headers`) compiled with
    /// `options` for `arch` by the runtime identified by `runtime`.
    pub(crate) fn new(
        source: &str,
        headers: &[(String, String)],
        options: &[String],
        arch: &str,
        runtime: &str,
    ) -> CodeCacheKey {
        let mut bytes = Vec::with_capacity(source.len() + 256);
        let mut field = |b: &[u8]| {
            bytes.extend_from_slice(&(b.len() as u64).to_le_bytes());
            bytes.extend_from_slice(b);
        };
        field(KEY_TAG);
        field(runtime.as_bytes());
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

    fn file_name(&self) -> String {
        format!("{:032x}.hipco", fnv1a_128(&[&self.bytes]))
    }
}

/// A directory of cached code objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CodeCache {
    dir: PathBuf,
}

impl CodeCache {
    pub(crate) fn new(dir: PathBuf) -> CodeCache {
        CodeCache { dir }
    }

    /// The path an entry for `key` lives at.
    pub(crate) fn path_of(&self, key: &CodeCacheKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The stored code object for `key`, or `None` when absent, unreadable,
    /// corrupt or stored for another key.
    pub(crate) fn load(&self, key: &CodeCacheKey) -> Option<Vec<u8>> {
        let data = fs::read(self.path_of(key)).ok()?;
        decode_entry(&data, key)
    }

    /// Stores `code` for `key` atomically (temporary file, then rename).
    pub(crate) fn store(&self, key: &CodeCacheKey, code: &[u8]) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let target = self.path_of(key);
        let tmp = unique_temp_path(&target);
        let written =
            write_new(&tmp, &encode_entry(key, code)).and_then(|()| fs::rename(&tmp, &target));
        if written.is_err() {
            // Best effort: a leftover temporary file is harmless, but tidy up.
            let _ = fs::remove_file(&tmp);
        }
        written
    }
}

/// The default cache directory: `$HIP_SAFE_CACHE_DIR` when set (an empty
/// value disables the cache: `None`), else `$XDG_CACHE_HOME/hip-safe`, else
/// `$HOME/.cache/hip-safe`, else `None`.
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
    name.push(format!(".tmp-{}-{n}", std::process::id()));
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
