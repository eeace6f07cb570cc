//! [`CodeBundle`]: one versioned file of code objects compiled ahead of
//! time, so that a program can load its kernels without running hipRTC.
//!
//! The file format is documented on [`CodeBundle`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::code_object::{self, CodeTarget};

const MAGIC: [u8; 16] = *b"HIPSAFEBUNDLE\0\0\0";
const FORMAT_VERSION: u32 = 1;
/// File alignment of every code object.
const CODE_ALIGN: usize = 16;
/// The wave sizes of AMD (32 and 64) and NVIDIA (32) GPUs.
const WAVE_SIZES: [u32; 2] = [32, 64];
/// The most bytes any text field (compiler, producer, name, arch) may have.
const MAX_TEXT_BYTES: usize = 4096;
/// Bytes of an entry record besides its two texts' bytes: two lengths, the
/// wave size, the hash, offset, length and checksum.
const RECORD_FIXED_BYTES: usize = 4 + 4 + 4 + 32 + 8 + 8 + 8;

/// A 32-byte hash of the exact inputs a code object was compiled from
/// (source, headers, options): the part of a bundle key that ties an entry
/// to one version of a module.
///
/// The bundle never computes it: the producer and the reader of a bundle
/// must hash the same inputs the same way (any hash of up to 32 bytes, e.g.
/// SHA-256, or a shorter one zero-padded). The bundle stores and compares
/// the bytes as they are. Displayed as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceHash(pub [u8; 32]);

impl SourceHash {
    /// The hash `bytes`.
    pub const fn new(bytes: [u8; 32]) -> SourceHash {
        SourceHash(bytes)
    }

    /// The hash's bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl From<[u8; 32]> for SourceHash {
    fn from(bytes: [u8; 32]) -> SourceHash {
        SourceHash(bytes)
    }
}

impl fmt::Display for SourceHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for SourceHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SourceHash({self})")
    }
}

/// Why a bundle could not be read, parsed or written, or an entry not
/// added. Every message names the bundle (its path, or its size when it was
/// parsed from memory) and, for an entry, its index and key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// The file could not be read or written (a missing file included).
    #[error("code bundle {}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error's kind (`NotFound` for a missing file).
        kind: io::ErrorKind,
        /// What was attempted and what went wrong.
        message: String,
    },
    /// The data does not start with the bundle magic.
    #[error("{bundle}: not a code bundle (it does not start with `HIPSAFEBUNDLE`)")]
    NotABundle {
        /// Which bundle: `code bundle <path>`, or `code bundle (N bytes)`
        /// when it was parsed from memory.
        bundle: String,
    },
    /// The file is a bundle of a format version this reader does not know.
    #[error(
        "{bundle}: format version {found} is not supported: this build of hip-safe reads \
         version {supported} only; rebuild the bundle with this version's writer"
    )]
    UnsupportedVersion {
        /// Which bundle.
        bundle: String,
        /// The file's version.
        found: u32,
        /// The version this reader reads ([`CodeBundle::FORMAT_VERSION`]).
        supported: u32,
    },
    /// The bundle breaks a rule of the format (see the module
    /// documentation): cut short, damaged, or an entry that is not valid.
    #[error("{bundle}: {part}: {reason}")]
    Malformed {
        /// Which bundle.
        bundle: String,
        /// Which part: `header`, `entry table`, `layout`, or an entry as
        /// `entry 3 (`reduce.hip` for gfx942, wave 64)`.
        part: String,
        /// What is wrong.
        reason: String,
    },
    /// [`CodeBundleWriter`] refused an entry or a header field.
    #[error("code bundle writer: {what}: {reason}")]
    Rejected {
        /// The field, or the entry's key.
        what: String,
        /// Why it was refused.
        reason: String,
    },
}

/// The key of an entry, in the order the file sorts entries by.
type Key = (String, String, u32, SourceHash);

/// A parsed entry: its key, and where its code object lies in the file.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    arch: String,
    wave_size: u32,
    source_hash: SourceHash,
    start: usize,
    end: usize,
    checksum: u64,
}

impl Entry {
    fn key(&self) -> (&str, &str, u32, &SourceHash) {
        (&self.name, &self.arch, self.wave_size, &self.source_hash)
    }
}

/// One entry of a [`CodeBundle`], as [`CodeBundle::entries`] lists them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BundleEntry<'a> {
    name: &'a str,
    arch: &'a str,
    wave_size: u32,
    source_hash: SourceHash,
    code: &'a [u8],
    checksum: u64,
}

impl<'a> BundleEntry<'a> {
    /// The module name, e.g. `reduce.hip`.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The target architecture, e.g. `gfx942`.
    pub fn arch(&self) -> &'a str {
        self.arch
    }

    /// The wave size the code object was compiled for (32 or 64).
    pub fn wave_size(&self) -> u32 {
        self.wave_size
    }

    /// The hash of the inputs the code object was compiled from.
    pub fn source_hash(&self) -> SourceHash {
        self.source_hash
    }

    /// The code object.
    pub fn code(&self) -> &'a [u8] {
        self.code
    }

    /// The FNV-1a 64 checksum of [`BundleEntry::code`] (verified on parse).
    pub fn checksum(&self) -> u64 {
        self.checksum
    }
}

impl fmt::Debug for BundleEntry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BundleEntry")
            .field("name", &self.name)
            .field("arch", &self.arch)
            .field("wave_size", &self.wave_size)
            .field("source_hash", &self.source_hash)
            .field("code_bytes", &self.code.len())
            .field("checksum", &format_args!("{:#018x}", self.checksum))
            .finish()
    }
}

/// A validated bundle of precompiled code objects, parsed from one file.
///
/// Parsing checks everything up front, so a `CodeBundle` only ever hands out
/// code objects that passed their checksum and the structural checks of
/// their architecture. Lookups are a binary search over the sorted entries.
///
/// A bundle is generic: it maps a key, (module name, [`SourceHash`],
/// architecture, wave size), to a code object, and knows nothing about what
/// the modules are. Whoever fills it computes the source hash of the exact
/// program inputs (source, headers, options); whoever reads it computes the
/// same hash at run time, so a bundle built from other sources simply has no
/// entry for the key and the caller falls back to compiling.
///
/// # File format, version 1
///
/// Little-endian throughout; `text` is a `u32` byte length followed by that
/// many bytes of UTF-8 (at most [`CodeBundle::MAX_TEXT_BYTES`], no control
/// characters).
///
/// | Field          | Size        | Content                                                  |
/// |----------------|-------------|----------------------------------------------------------|
/// | magic          | 16          | `HIPSAFEBUNDLE\0\0\0`                                    |
/// | format version | 4 (`u32`)   | `1` ([`CodeBundle::FORMAT_VERSION`])                     |
/// | compiler       | `text`      | what compiled the entries (non-empty)                    |
/// | producer       | `text`      | what wrote the file, e.g. `candle-hip 0.1.0` (may be "") |
/// | entry count    | 4 (`u32`)   | `N`                                                      |
/// | entry table    | `N` records | see below                                                |
/// | table checksum | 8 (`u64`)   | FNV-1a 64 of every byte before it (magic to last record) |
/// | code objects   | the rest    | in table order, each at the next 16-byte file offset     |
///
/// Each entry record:
///
/// | Field       | Size       | Content                                                       |
/// |-------------|------------|---------------------------------------------------------------|
/// | name        | `text`     | module name, e.g. `reduce.hip` (non-empty)                    |
/// | arch        | `text`     | bare target, e.g. `gfx942`, `gfx1100`, `sm_90`: `[A-Za-z0-9_]+` |
/// | wave size   | 4 (`u32`)  | 32 or 64                                                      |
/// | source hash | 32         | [`SourceHash`], as the producer computed it                   |
/// | offset      | 8 (`u64`)  | file offset of the code object                                |
/// | length      | 8 (`u64`)  | its length in bytes (non-zero)                                |
/// | checksum    | 8 (`u64`)  | FNV-1a 64 of the code object's bytes                          |
///
/// **One encoding per content.** The reader accepts only the layout the
/// writer produces, so every byte of a valid file is checked by something
/// and `parse(bytes)` re-encodes to exactly `bytes`:
/// - entries are sorted by key, comparing name (bytewise), then arch
///   (bytewise), then wave size, then source hash (bytewise); a repeated key
///   is refused as a duplicate, any other disorder as out of order;
/// - the first code object starts at the first 16-byte boundary at or after
///   the end of the table checksum, every further one at the first 16-byte
///   boundary at or after the end of the one before; the padding bytes are
///   zero; the file ends where the last code object ends (with no entries,
///   after the table checksum).
///
/// The table checksum covers the header and the table (so a damaged name or
/// offset is caught, not silently looked up), each entry's checksum its code
/// object, and the layout rules the padding and the end: a single changed,
/// missing or extra byte anywhere makes the file invalid. FNV-1a detects
/// damage, not tampering; a bundle is trusted as much as the file it came
/// from. Finally every code object must pass the same structural checks as
/// [`Module::from_code_object`](crate::Module::from_code_object) for its
/// architecture (AMD ELF or offload bundle for `gfx*`, CUBIN or
/// NUL-terminated PTX for `sm_NN`), so a bundle is accepted or refused as a
/// whole when it is opened, never half-way through a run.
///
/// Code objects are 16-byte aligned in the file; in memory the alignment is
/// whatever the buffer has (`Module::from_code_object` copies the image into
/// aligned storage before loading it).
///
/// # Example
///
/// ```no_run
/// use hip_safe::{CodeBundle, Device, Module, SourceHash};
///
/// let bundle = CodeBundle::open("kernels.hipbundle")?;
/// let dev = Device::new(0)?;
/// let hash = SourceHash::new([0; 32]); // The hash of the module's inputs.
/// if let Some(code) = bundle.code_object("reduce.hip", hash, dev.arch(), dev.wave_size()) {
///     let _module = Module::from_code_object(&dev, code)?;
/// }
/// # Ok::<(), hip_safe::Error>(())
/// ```
#[derive(Clone)]
pub struct CodeBundle {
    bytes: Cow<'static, [u8]>,
    compiler: String,
    producer: String,
    entries: Vec<Entry>,
}

impl CodeBundle {
    /// The format version this crate reads and writes.
    pub const FORMAT_VERSION: u32 = FORMAT_VERSION;

    /// The first 16 bytes of every bundle file.
    pub const MAGIC: [u8; 16] = MAGIC;

    /// The most bytes a text field (compiler, producer, module name, arch)
    /// may have.
    pub const MAX_TEXT_BYTES: usize = MAX_TEXT_BYTES;

    /// Parses and validates a bundle held in memory: a `Vec<u8>`, or a
    /// `&'static [u8]` (e.g. `include_bytes!`) which is then not copied.
    /// The bundle is accepted or refused as a whole; the error says which
    /// part or entry is wrong and why.
    pub fn parse(bytes: impl Into<Cow<'static, [u8]>>) -> Result<CodeBundle, BundleError> {
        let bytes = bytes.into();
        let bundle = format!("code bundle ({} bytes)", bytes.len());
        parse(bytes, bundle)
    }

    /// Reads the whole file at `path` and parses it as
    /// [`CodeBundle::parse`] does. A missing or unreadable file, or one that
    /// is not a regular file, is a [`BundleError::Io`] naming the path;
    /// parse errors name the path too.
    pub fn open(path: impl AsRef<Path>) -> Result<CodeBundle, BundleError> {
        let path = path.as_ref();
        let io_error = |e: io::Error| BundleError::Io {
            path: path.to_path_buf(),
            kind: e.kind(),
            message: format!("cannot read it: {e}"),
        };
        // Refuse directories, FIFOs and devices before reading: reading a
        // FIFO would block until someone writes to it.
        let meta = fs::metadata(path).map_err(io_error)?;
        if !meta.is_file() {
            return Err(BundleError::Io {
                path: path.to_path_buf(),
                kind: io::ErrorKind::InvalidInput,
                message: "cannot read it: not a regular file".into(),
            });
        }
        let bytes = fs::read(path).map_err(io_error)?;
        parse(Cow::Owned(bytes), format!("code bundle {}", path.display()))
    }

    /// The code object stored for module `name` compiled from inputs
    /// hashing to `source_hash` for `arch` (a bare name such as `gfx942`)
    /// at `wave_size`; `None` when the bundle has no such entry.
    pub fn code_object(
        &self,
        name: &str,
        source_hash: SourceHash,
        arch: &str,
        wave_size: u32,
    ) -> Option<&[u8]> {
        let wanted = (name, arch, wave_size, &source_hash);
        let index = self
            .entries
            .binary_search_by(|e| e.key().cmp(&wanted))
            .ok()?;
        let entry = &self.entries[index];
        self.bytes.get(entry.start..entry.end)
    }

    /// Every entry, sorted by key (name, arch, wave size, source hash).
    pub fn entries(&self) -> impl ExactSizeIterator<Item = BundleEntry<'_>> + '_ {
        self.entries.iter().map(|e| BundleEntry {
            name: &e.name,
            arch: &e.arch,
            wave_size: e.wave_size,
            source_hash: e.source_hash,
            // In range: checked when parsing.
            code: self.bytes.get(e.start..e.end).unwrap_or_default(),
            checksum: e.checksum,
        })
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the bundle has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What compiled the entries, as the producer recorded it.
    pub fn compiler(&self) -> &str {
        &self.compiler
    }

    /// What wrote the bundle, as the producer recorded it.
    pub fn producer(&self) -> &str {
        &self.producer
    }

    /// The file's format version (always [`CodeBundle::FORMAT_VERSION`]
    /// for a bundle this crate parsed).
    pub fn version(&self) -> u32 {
        FORMAT_VERSION
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Two bundles are equal when their files are: every content has exactly
/// one encoding.
impl PartialEq for CodeBundle {
    fn eq(&self, other: &CodeBundle) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for CodeBundle {}

impl fmt::Debug for CodeBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeBundle")
            .field("compiler", &self.compiler)
            .field("producer", &self.producer)
            .field("entries", &self.entries.len())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Builds a bundle file: collect entries with [`CodeBundleWriter::add`],
/// then [`CodeBundleWriter::to_bytes`] or [`CodeBundleWriter::write`].
///
/// Every entry is checked when it is added (its key's fields and its code
/// object, as [`CodeBundle::parse`] will check them), so what the writer
/// produces always parses. The output depends only on the entries, not on
/// the order they were added in: a build that compiles in parallel still
/// writes the same file.
///
/// ```
/// use hip_safe::{CodeBundle, CodeBundleWriter, SourceHash};
///
/// let mut writer = CodeBundleWriter::new("nvrtc 12.8", "example 0.1")?;
/// let ptx = b".version 8.5\n.target sm_90\n\0".to_vec();
/// let hash = SourceHash::new([7; 32]);
/// writer.add("scale.hip", hash, "sm_90", 32, ptx.clone())?;
/// let bundle = CodeBundle::parse(writer.to_bytes())?;
/// assert_eq!(bundle.code_object("scale.hip", hash, "sm_90", 32), Some(&ptx[..]));
/// # Ok::<(), hip_safe::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct CodeBundleWriter {
    compiler: String,
    producer: String,
    entries: BTreeMap<Key, Vec<u8>>,
}

impl CodeBundleWriter {
    /// An empty bundle whose entries were compiled by `compiler` (e.g.
    /// `hipRTC 6.4.43484 (ROCm 6.4)`; must not be empty) and which is
    /// written by `producer` (e.g. `candle-hip 0.1.0`). Both are at most
    /// [`CodeBundle::MAX_TEXT_BYTES`] bytes without control characters.
    pub fn new(
        compiler: impl Into<String>,
        producer: impl Into<String>,
    ) -> Result<CodeBundleWriter, BundleError> {
        let (compiler, producer) = (compiler.into(), producer.into());
        let reject = |what: &str, reason| BundleError::Rejected {
            what: what.into(),
            reason,
        };
        check_text(&compiler, false).map_err(|r| reject("compiler", r))?;
        check_text(&producer, true).map_err(|r| reject("producer", r))?;
        Ok(CodeBundleWriter {
            compiler,
            producer,
            entries: BTreeMap::new(),
        })
    }

    /// A writer holding everything `bundle` holds: to add entries to an
    /// existing bundle, or to merge bundles.
    pub fn from_bundle(bundle: &CodeBundle) -> CodeBundleWriter {
        CodeBundleWriter {
            compiler: bundle.compiler.clone(),
            producer: bundle.producer.clone(),
            entries: bundle
                .entries()
                .map(|e| {
                    let key = (e.name.into(), e.arch.into(), e.wave_size, e.source_hash);
                    (key, e.code.to_vec())
                })
                .collect(),
        }
    }

    /// Adds the code object `code` of module `name`, compiled from inputs
    /// hashing to `source_hash`, for `arch` at `wave_size`. Refused (and
    /// nothing added) when the key is already present, when `name` is empty
    /// or has control characters, when `arch` is not a bare name
    /// (`[A-Za-z0-9_]+`), when `wave_size` is not 32 or 64, or when `code`
    /// is not a well-formed code object for `arch` (see
    /// [`Module::from_code_object`](crate::Module::from_code_object)).
    pub fn add(
        &mut self,
        name: &str,
        source_hash: SourceHash,
        arch: &str,
        wave_size: u32,
        code: Vec<u8>,
    ) -> Result<(), BundleError> {
        let reject = |reason: String| BundleError::Rejected {
            what: format!("entry {}", describe_key(name, arch, wave_size)),
            reason,
        };
        check_key(name, arch, wave_size).map_err(reject)?;
        code_object::validate(&code, CodeTarget::for_arch(arch))
            .map_err(|e| reject(format!("not a valid code object for {arch}: {e}")))?;
        if u32::try_from(self.entries.len()).is_ok_and(|n| n == u32::MAX) {
            return Err(reject(format!("the bundle is full ({} entries)", u32::MAX)));
        }
        let key = (name.to_string(), arch.to_string(), wave_size, source_hash);
        if self.entries.contains_key(&key) {
            return Err(reject(format!(
                "the bundle already has an entry for this key (source hash {source_hash})"
            )));
        }
        self.entries.insert(key, code);
        Ok(())
    }

    /// The number of entries added.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no entry was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bundle file (see [`CodeBundle`] for its layout).
    pub fn to_bytes(&self) -> Vec<u8> {
        let text_len = |s: &str| 4 + s.len();
        let table_end = MAGIC.len()
            + 4
            + text_len(&self.compiler)
            + text_len(&self.producer)
            + 4
            + self
                .entries
                .keys()
                .map(|(name, arch, _, _)| RECORD_FIXED_BYTES + name.len() + arch.len())
                .sum::<usize>();
        // Where each code object goes: the first 16-byte boundary at or
        // after the end of what precedes it.
        let mut cursor = table_end + 8;
        let offsets: Vec<usize> = self
            .entries
            .values()
            .map(|code| {
                let at = cursor.next_multiple_of(CODE_ALIGN);
                cursor = at + code.len();
                at
            })
            .collect();

        let mut out = Vec::with_capacity(cursor);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        put_text(&mut out, &self.compiler);
        put_text(&mut out, &self.producer);
        // `add` keeps the count within u32 and every text within
        // MAX_TEXT_BYTES, so these conversions are exact.
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (((name, arch, wave_size, hash), code), offset) in self.entries.iter().zip(&offsets) {
            put_text(&mut out, name);
            put_text(&mut out, arch);
            out.extend_from_slice(&wave_size.to_le_bytes());
            out.extend_from_slice(&hash.0);
            out.extend_from_slice(&(*offset as u64).to_le_bytes());
            out.extend_from_slice(&(code.len() as u64).to_le_bytes());
            out.extend_from_slice(&fnv1a_64(code).to_le_bytes());
        }
        debug_assert_eq!(out.len(), table_end);
        out.extend_from_slice(&fnv1a_64(&out).to_le_bytes());
        for (code, offset) in self.entries.values().zip(&offsets) {
            out.resize(*offset, 0);
            out.extend_from_slice(code);
        }
        out
    }

    /// Writes the bundle file to `path`: to a temporary file next to it,
    /// then renamed over `path`, so a reader never sees a partial bundle.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), BundleError> {
        let path = path.as_ref();
        let mut temp_name = path.file_name().unwrap_or_default().to_os_string();
        temp_name.push(format!(".tmp-{}", std::process::id()));
        let temp = path.with_file_name(temp_name);
        let written = fs::write(&temp, self.to_bytes()).and_then(|()| fs::rename(&temp, path));
        if let Err(e) = written {
            // Best effort: do not leave a partial temporary file behind.
            let _ = fs::remove_file(&temp);
            return Err(BundleError::Io {
                path: path.to_path_buf(),
                kind: e.kind(),
                message: format!("cannot write it: {e}"),
            });
        }
        Ok(())
    }
}

impl fmt::Debug for CodeBundleWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeBundleWriter")
            .field("compiler", &self.compiler)
            .field("producer", &self.producer)
            .field("entries", &self.entries.len())
            .finish()
    }
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// 64-bit FNV-1a (offset basis `0xcbf29ce484222325`, prime
/// `0x100000001b3`): the checksum of the table and of each code object.
/// Detects damage, not tampering.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `name for arch, wave N` as messages show a key.
fn describe_key(name: &str, arch: &str, wave_size: u32) -> String {
    format!("`{name}` for {arch}, wave {wave_size}")
}

/// A text field: at most [`MAX_TEXT_BYTES`], no control characters (texts
/// appear in messages and listings), non-empty unless `may_be_empty`.
fn check_text(text: &str, may_be_empty: bool) -> Result<(), String> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "{} bytes is longer than the limit of {MAX_TEXT_BYTES}",
            text.len()
        ));
    }
    if text.is_empty() && !may_be_empty {
        return Err("it is empty".into());
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(format!("it contains the control character {c:?}"));
    }
    Ok(())
}

/// The rules for an entry's key (see [`CodeBundle`]).
fn check_key(name: &str, arch: &str, wave_size: u32) -> Result<(), String> {
    check_text(name, false).map_err(|e| format!("the module name is refused: {e}"))?;
    check_text(arch, false).map_err(|e| format!("the architecture is refused: {e}"))?;
    if !arch.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!(
            "architecture `{arch}` is not a bare target name (letters, digits and `_` only, \
             e.g. gfx90a; no feature suffixes such as `:xnack-`)"
        ));
    }
    if !WAVE_SIZES.contains(&wave_size) {
        return Err(format!("wave size {wave_size} is neither 32 nor 64"));
    }
    Ok(())
}

/// Bounds-checked little-endian reads from the front of the file.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8], String> {
        let start = self.at;
        let bytes = start
            .checked_add(len)
            .and_then(|end| self.data.get(start..end))
            .ok_or_else(|| {
                format!(
                    "the file ends inside the {what} ({len} bytes at offset {start}, {} bytes \
                     left): it is cut short or damaged",
                    self.data.len().saturating_sub(start)
                )
            })?;
        self.at = start + len;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A `u32`-length-prefixed byte string (its UTF-8 is checked later).
    fn text(&mut self, what: &str) -> Result<&'a [u8], String> {
        let len = self.u32(&format!("{what}'s length"))?;
        let len = usize::try_from(len).map_err(|_| format!("{what}: length {len} overflows"))?;
        self.take(len, what)
    }
}

/// An entry record as read, before any of its fields is checked.
struct RawEntry<'a> {
    name: &'a [u8],
    arch: &'a [u8],
    wave_size: u32,
    source_hash: SourceHash,
    offset: u64,
    len: u64,
    checksum: u64,
}

/// Parses and validates `bytes`; `bundle` names it in errors. In three
/// steps: read the header and table with bounds checks only, verify the
/// table checksum (so a damaged file is reported as damaged rather than by
/// whatever field the damage happened to hit), then check every field,
/// the layout and every code object.
fn parse(bytes: Cow<'static, [u8]>, bundle: String) -> Result<CodeBundle, BundleError> {
    let malformed = |part: &str, reason: String| BundleError::Malformed {
        bundle: bundle.clone(),
        part: part.into(),
        reason,
    };
    let data: &[u8] = &bytes;
    if !data.starts_with(&MAGIC) {
        if !data.is_empty() && MAGIC.starts_with(data) {
            return Err(malformed(
                "header",
                format!("the file ends after {} bytes, inside the magic", data.len()),
            ));
        }
        return Err(BundleError::NotABundle { bundle });
    }
    let mut r = Reader {
        data,
        at: MAGIC.len(),
    };
    let version = r
        .u32("format version")
        .map_err(|e| malformed("header", e))?;
    if version != FORMAT_VERSION {
        return Err(BundleError::UnsupportedVersion {
            bundle,
            found: version,
            supported: FORMAT_VERSION,
        });
    }

    // Step 1: the header and the table, bounds-checked.
    let compiler = r.text("compiler").map_err(|e| malformed("header", e))?;
    let producer = r.text("producer").map_err(|e| malformed("header", e))?;
    let count = r.u32("entry count").map_err(|e| malformed("header", e))?;
    // Never reserve more records than the rest of the file could hold.
    let room = (data.len() - r.at) / RECORD_FIXED_BYTES;
    let mut raw = Vec::with_capacity(usize::try_from(count).map_or(room, |c| c.min(room)));
    for index in 0..count {
        let record = |e: String| malformed("entry table", format!("entry {index}: {e}"));
        raw.push(RawEntry {
            name: r.text("name").map_err(record)?,
            arch: r.text("arch").map_err(record)?,
            wave_size: r.u32("wave size").map_err(record)?,
            source_hash: SourceHash(r.array("source hash").map_err(record)?),
            offset: r.u64("code offset").map_err(record)?,
            len: r.u64("code length").map_err(record)?,
            checksum: r.u64("code checksum").map_err(record)?,
        });
    }
    let table_end = r.at;
    let stored = r
        .u64("table checksum")
        .map_err(|e| malformed("entry table", e))?;

    // Step 2: the table checksum.
    let computed = fnv1a_64(&data[..table_end]);
    if stored != computed {
        return Err(malformed(
            "entry table",
            format!(
                "the checksum of the header and table is {computed:#018x}, the file says \
                 {stored:#018x}: the file is damaged"
            ),
        ));
    }

    // Step 3: every field, the layout, every code object.
    let compiler = header_text(compiler, false).map_err(|e| malformed("compiler", e))?;
    let producer = header_text(producer, true).map_err(|e| malformed("producer", e))?;
    let mut entries: Vec<Entry> = Vec::with_capacity(raw.len());
    let mut cursor = r.at;
    for (index, e) in raw.iter().enumerate() {
        let entry = check_entry(data, index, e, cursor, entries.last())
            .map_err(|(part, reason)| malformed(&part, reason))?;
        cursor = entry.end;
        entries.push(entry);
    }
    if cursor != data.len() {
        return Err(malformed(
            "layout",
            format!(
                "{} bytes follow the last code object (which ends at offset {cursor})",
                data.len() - cursor
            ),
        ));
    }
    Ok(CodeBundle {
        compiler,
        producer,
        entries,
        bytes,
    })
}

fn header_text(bytes: &[u8], may_be_empty: bool) -> Result<String, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    check_text(text, may_be_empty)?;
    Ok(text.to_string())
}

/// Checks entry `index` (`e`), whose code object must start at the first
/// 16-byte boundary at or after `cursor` and whose key must sort after
/// `previous`'s. On error: the part (the entry, described as far as it could
/// be read) and the reason.
fn check_entry(
    data: &[u8],
    index: usize,
    e: &RawEntry<'_>,
    cursor: usize,
    previous: Option<&Entry>,
) -> Result<Entry, (String, String)> {
    let unnamed = || format!("entry {index}");
    let name = std::str::from_utf8(e.name)
        .map_err(|err| (unnamed(), format!("the module name is not UTF-8: {err}")))?;
    let arch = std::str::from_utf8(e.arch)
        .map_err(|err| (unnamed(), format!("the architecture is not UTF-8: {err}")))?;
    // Keys with control characters are described by index only: they are
    // refused below, and must not reach a terminal.
    let part = if check_key(name, arch, e.wave_size).is_ok() {
        format!("entry {index} ({})", describe_key(name, arch, e.wave_size))
    } else {
        unnamed()
    };
    let fail = |reason: String| (part.clone(), reason);
    check_key(name, arch, e.wave_size).map_err(fail)?;
    let key = (name, arch, e.wave_size, &e.source_hash);
    if let Some(previous) = previous {
        match previous.key().cmp(&key) {
            std::cmp::Ordering::Less => {}
            std::cmp::Ordering::Equal => {
                return Err(fail(format!(
                    "duplicate key: entry {} has the same name, arch, wave size and source \
                     hash ({})",
                    index - 1,
                    e.source_hash
                )));
            }
            std::cmp::Ordering::Greater => {
                return Err(fail(format!(
                    "out of order: entries are sorted by name, arch, wave size and source \
                     hash, and this one sorts before entry {}",
                    index - 1
                )));
            }
        }
    }

    let expected = cursor.next_multiple_of(CODE_ALIGN);
    if usize::try_from(e.offset).ok() != Some(expected) {
        return Err(fail(format!(
            "the code object is at offset {}, expected {expected}: code objects follow the \
             table in entry order, each at the next {CODE_ALIGN}-byte boundary",
            e.offset
        )));
    }
    if e.len == 0 {
        return Err(fail("the code object is empty".into()));
    }
    let end = usize::try_from(e.len)
        .ok()
        .and_then(|len| expected.checked_add(len))
        .filter(|&end| end <= data.len())
        .ok_or_else(|| {
            fail(format!(
                "the code object ({} bytes at offset {expected}) runs past the end of the \
                 {}-byte file",
                e.len,
                data.len()
            ))
        })?;
    // The padding before the code object lies inside the file: `expected`
    // is at most `end`.
    if data[cursor..expected].iter().any(|&b| b != 0) {
        return Err(fail(format!(
            "the padding at offsets {cursor}..{expected} is not zero"
        )));
    }
    let code = &data[expected..end];
    let checksum = fnv1a_64(code);
    if checksum != e.checksum {
        return Err(fail(format!(
            "the code object's checksum is {checksum:#018x}, the table says {:#018x}: the \
             file is damaged",
            e.checksum
        )));
    }
    code_object::validate(code, CodeTarget::for_arch(arch))
        .map_err(|err| fail(format!("not a valid code object for {arch}: {err}")))?;
    Ok(Entry {
        name: name.to_string(),
        arch: arch.to_string(),
        wave_size: e.wave_size,
        source_hash: e.source_hash,
        start: expected,
        end,
        checksum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small AMDGPU ELF64 code object that passes `code_object::validate`:
    /// the file header, a `.shstrtab` and a `.text` holding `text`, and the
    /// section header table (null, `.shstrtab`, `.text`) at the end.
    fn amd_elf(text: &[u8]) -> Vec<u8> {
        elf(224, text)
    }

    /// The same for `machine` (`EM_AMDGPU` 224, `EM_CUDA` 190).
    fn elf(machine: u16, text: &[u8]) -> Vec<u8> {
        let names = b"\0.shstrtab\0.text\0";
        let mut out = vec![0u8; 64];
        let names_at = out.len();
        out.extend_from_slice(names);
        out.resize(out.len().next_multiple_of(8), 0);
        let text_at = out.len();
        out.extend_from_slice(text);
        out.resize(out.len().next_multiple_of(8), 0);
        let sh_at = out.len();
        // (name, type, offset, size): null, SHT_STRTAB, SHT_PROGBITS.
        for (name, kind, offset, size) in [
            (0u32, 0u32, 0usize, 0usize),
            (1, 3, names_at, names.len()),
            (11, 1, text_at, text.len()),
        ] {
            let mut sh = [0u8; 64];
            sh[..4].copy_from_slice(&name.to_le_bytes());
            sh[4..8].copy_from_slice(&kind.to_le_bytes());
            sh[24..32].copy_from_slice(&(offset as u64).to_le_bytes());
            sh[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            out.extend_from_slice(&sh);
        }
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = 2; // ELFCLASS64
        out[5] = 1; // ELFDATA2LSB
        out[6] = 1; // EV_CURRENT
        out[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
        out[18..20].copy_from_slice(&machine.to_le_bytes());
        out[20..24].copy_from_slice(&1u32.to_le_bytes());
        out[40..48].copy_from_slice(&(sh_at as u64).to_le_bytes());
        out[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        out[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        out[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        out[60..62].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
        out[62..64].copy_from_slice(&1u16.to_le_bytes()); // e_shstrndx
        out
    }

    const PTX: &[u8] = b"//\n.version 8.5\n.target sm_90\n.address_size 64\n\0";

    fn hash(n: u8) -> SourceHash {
        let mut bytes = [0u8; 32];
        bytes[0] = n;
        bytes[31] = 0xa5;
        SourceHash(bytes)
    }

    /// The entries of the sample bundle, added out of order on purpose.
    fn sample_entries() -> Vec<(&'static str, SourceHash, &'static str, u32, Vec<u8>)> {
        vec![
            ("reduce.hip", hash(1), "gfx942", 64, amd_elf(&[0xbf; 37])),
            ("affine.hip", hash(2), "gfx1100", 32, amd_elf(&[0x11; 64])),
            ("affine.hip", hash(2), "gfx1100", 64, amd_elf(&[0x22; 5])),
            ("affine.hip", hash(2), "sm_90", 32, PTX.to_vec()),
            ("affine.hip", hash(3), "gfx1100", 32, amd_elf(&[0x33; 9])),
        ]
    }

    fn sample_writer() -> CodeBundleWriter {
        let mut w = CodeBundleWriter::new("hipRTC 6.4.43484 (ROCm 6.4)", "hip-safe tests").unwrap();
        for (name, h, arch, wave, code) in sample_entries() {
            w.add(name, h, arch, wave, code).unwrap();
        }
        w
    }

    fn sample() -> Vec<u8> {
        sample_writer().to_bytes()
    }

    /// Asserts that `bytes` is refused with a message containing every
    /// one of `needles`.
    #[track_caller]
    fn refused(bytes: Vec<u8>, needles: &[&str]) -> BundleError {
        match CodeBundle::parse(bytes) {
            Ok(b) => panic!("accepted a bundle that should be refused for {needles:?}: {b:?}"),
            Err(e) => {
                let text = e.to_string();
                for needle in needles {
                    assert!(
                        text.contains(needle),
                        "`{text}` does not mention `{needle}`"
                    );
                }
                e
            }
        }
    }

    /// A test-side encoder with every field under control, independent of
    /// the writer: by default it produces the canonical file; the test
    /// changes fields, and `encode` recomputes the table checksum unless
    /// `table_checksum` is set, so the parser's later checks are reached.
    #[derive(Clone)]
    struct Raw {
        magic: Vec<u8>,
        version: u32,
        compiler: Vec<u8>,
        producer: Vec<u8>,
        count: Option<u32>,
        entries: Vec<RawRecord>,
        table_checksum: Option<u64>,
        padding: u8,
        trailing: Vec<u8>,
    }

    #[derive(Clone)]
    struct RawRecord {
        name: Vec<u8>,
        arch: Vec<u8>,
        wave: u32,
        hash: SourceHash,
        code: Vec<u8>,
        offset: Option<u64>,
        len: Option<u64>,
        checksum: Option<u64>,
    }

    impl Raw {
        /// The sample bundle's content, entries sorted as the file wants.
        fn sample() -> Raw {
            let mut entries: Vec<_> = sample_entries()
                .into_iter()
                .map(|(name, h, arch, wave, code)| RawRecord {
                    name: name.into(),
                    arch: arch.into(),
                    wave,
                    hash: h,
                    code,
                    offset: None,
                    len: None,
                    checksum: None,
                })
                .collect();
            entries.sort_by(|a, b| {
                (&a.name, &a.arch, a.wave, a.hash).cmp(&(&b.name, &b.arch, b.wave, b.hash))
            });
            Raw {
                magic: MAGIC.to_vec(),
                version: FORMAT_VERSION,
                compiler: b"hipRTC 6.4.43484 (ROCm 6.4)".to_vec(),
                producer: b"hip-safe tests".to_vec(),
                count: None,
                entries,
                table_checksum: None,
                padding: 0,
                trailing: Vec::new(),
            }
        }

        fn encode(&self) -> Vec<u8> {
            let text = |out: &mut Vec<u8>, t: &[u8]| {
                out.extend_from_slice(&(t.len() as u32).to_le_bytes());
                out.extend_from_slice(t);
            };
            let mut out = self.magic.clone();
            out.extend_from_slice(&self.version.to_le_bytes());
            text(&mut out, &self.compiler);
            text(&mut out, &self.producer);
            let count = self.count.unwrap_or(self.entries.len() as u32);
            out.extend_from_slice(&count.to_le_bytes());
            let table_end = out.len()
                + self
                    .entries
                    .iter()
                    .map(|e| RECORD_FIXED_BYTES + e.name.len() + e.arch.len())
                    .sum::<usize>();
            let mut cursor = table_end + 8;
            let mut offsets = Vec::new();
            for e in &self.entries {
                let at = cursor.next_multiple_of(16);
                offsets.push(at);
                cursor = at + e.code.len();
            }
            for (e, &at) in self.entries.iter().zip(&offsets) {
                text(&mut out, &e.name);
                text(&mut out, &e.arch);
                out.extend_from_slice(&e.wave.to_le_bytes());
                out.extend_from_slice(&e.hash.0);
                out.extend_from_slice(&e.offset.unwrap_or(at as u64).to_le_bytes());
                let len = e.len.unwrap_or(e.code.len() as u64);
                out.extend_from_slice(&len.to_le_bytes());
                let sum = e.checksum.unwrap_or_else(|| fnv1a_64(&e.code));
                out.extend_from_slice(&sum.to_le_bytes());
            }
            let sum = self.table_checksum.unwrap_or_else(|| fnv1a_64(&out));
            out.extend_from_slice(&sum.to_le_bytes());
            for (e, &at) in self.entries.iter().zip(&offsets) {
                out.resize(at, self.padding);
                out.extend_from_slice(&e.code);
            }
            out.extend_from_slice(&self.trailing);
            out
        }

        fn with(&self, change: impl FnOnce(&mut Raw)) -> Vec<u8> {
            let mut raw = self.clone();
            change(&mut raw);
            raw.encode()
        }
    }

    #[test]
    fn fnv1a_64_matches_reference_values() {
        // The FNV reference test vectors for FNV-1a 64.
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_test_helpers_build_valid_code_objects() {
        assert_eq!(
            code_object::validate(&amd_elf(&[1, 2, 3]), CodeTarget::Amd),
            Ok(())
        );
        assert_eq!(code_object::validate(PTX, CodeTarget::Nvidia), Ok(()));
        assert_eq!(
            code_object::validate(&elf(190, &[1]), CodeTarget::Nvidia),
            Ok(())
        );
    }

    #[test]
    fn the_writer_produces_the_documented_layout() {
        // The independent encoder and the writer agree byte for byte.
        assert!(Raw::sample().encode() == sample());
        let bytes = sample();
        assert_eq!(&bytes[..16], b"HIPSAFEBUNDLE\0\0\0");
        assert_eq!(&bytes[16..20], &1u32.to_le_bytes());
        let bundle = CodeBundle::parse(bytes.clone()).unwrap();
        for e in bundle.entries() {
            let offset = e.code().as_ptr() as usize - bundle.as_bytes().as_ptr() as usize;
            assert_eq!(offset % 16, 0, "{e:?}");
        }
        // The file ends with the last code object.
        let last = bundle.entries().last().unwrap();
        assert!(bytes.ends_with(last.code()));
    }

    #[test]
    fn round_trip() {
        let bytes = sample();
        let bundle = CodeBundle::parse(bytes.clone()).unwrap();
        assert_eq!(bundle.version(), 1);
        assert_eq!(bundle.compiler(), "hipRTC 6.4.43484 (ROCm 6.4)");
        assert_eq!(bundle.producer(), "hip-safe tests");
        assert_eq!(bundle.len(), 5);
        assert!(!bundle.is_empty());
        assert_eq!(bundle.as_bytes(), &bytes[..]);
        // Every entry comes back, listed in key order.
        let mut expected = sample_entries();
        expected.sort_by(|a, b| (a.0, a.2, a.3, a.1).cmp(&(b.0, b.2, b.3, b.1)));
        let listed: Vec<_> = bundle
            .entries()
            .map(|e| {
                assert_eq!(e.checksum(), fnv1a_64(e.code()));
                (
                    e.name(),
                    e.source_hash(),
                    e.arch(),
                    e.wave_size(),
                    e.code().to_vec(),
                )
            })
            .collect();
        assert_eq!(listed, expected);
        for (name, h, arch, wave, code) in &expected {
            assert_eq!(bundle.code_object(name, *h, arch, *wave), Some(&code[..]));
        }
        // Re-encoding a parsed bundle gives the same file, and the order
        // entries were added in does not matter.
        assert_eq!(CodeBundleWriter::from_bundle(&bundle).to_bytes(), bytes);
        assert_eq!(CodeBundleWriter::from_bundle(&bundle), sample_writer());
        let mut reversed =
            CodeBundleWriter::new("hipRTC 6.4.43484 (ROCm 6.4)", "hip-safe tests").unwrap();
        for (name, h, arch, wave, code) in sample_entries().into_iter().rev() {
            reversed.add(name, h, arch, wave, code).unwrap();
        }
        assert_eq!(reversed.to_bytes(), bytes);
        assert_eq!(CodeBundle::parse(reversed.to_bytes()).unwrap(), bundle);
    }

    #[test]
    fn an_empty_bundle_round_trips() {
        let w = CodeBundleWriter::new("hipRTC 6.4", "").unwrap();
        assert!(w.is_empty());
        let bytes = w.to_bytes();
        assert_eq!(bytes.len(), 16 + 4 + 4 + 10 + 4 + 4 + 8);
        let bundle = CodeBundle::parse(bytes).unwrap();
        assert!(bundle.is_empty());
        assert_eq!(bundle.entries().count(), 0);
        assert_eq!(bundle.producer(), "");
        assert_eq!(bundle.code_object("a", hash(0), "gfx942", 64), None);
    }

    #[test]
    fn an_embedded_bundle_is_not_copied() {
        let bytes: &'static [u8] = sample().leak();
        let bundle = CodeBundle::parse(bytes).unwrap();
        assert_eq!(bundle.as_bytes().as_ptr(), bytes.as_ptr());
        let code = bundle
            .code_object("affine.hip", hash(2), "sm_90", 32)
            .unwrap();
        assert_eq!(code, PTX);
        assert!(bytes.as_ptr_range().contains(&code.as_ptr()));
    }

    #[test]
    fn every_key_part_selects() {
        let bundle = CodeBundle::parse(sample()).unwrap();
        let get = |name, h, arch, wave| bundle.code_object(name, h, arch, wave);
        let base = get("affine.hip", hash(2), "gfx1100", 32).unwrap();
        assert_eq!(base, amd_elf(&[0x11; 64]));
        // Wave size: the same source and arch, another code object.
        assert_eq!(
            get("affine.hip", hash(2), "gfx1100", 64).unwrap(),
            amd_elf(&[0x22; 5])
        );
        // Source hash.
        assert_eq!(
            get("affine.hip", hash(3), "gfx1100", 32).unwrap(),
            amd_elf(&[0x33; 9])
        );
        assert_eq!(get("affine.hip", hash(9), "gfx1100", 32), None);
        // Arch, including the NVIDIA entry.
        assert_eq!(get("affine.hip", hash(2), "sm_90", 32).unwrap(), PTX);
        assert_eq!(get("affine.hip", hash(2), "gfx942", 32), None);
        assert_eq!(get("affine.hip", hash(2), "sm_90", 64), None);
        // Name.
        assert_eq!(get("reduce.hip", hash(2), "gfx1100", 32), None);
        assert_eq!(
            get("reduce.hip", hash(1), "gfx942", 64).unwrap(),
            amd_elf(&[0xbf; 37])
        );
        assert_eq!(get("reduce.hip", hash(1), "gfx942", 32), None);
        assert_eq!(get("affine", hash(2), "gfx1100", 32), None);
        assert_eq!(get("", hash(2), "gfx1100", 32), None);
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let bytes = sample();
        for len in 0..bytes.len() {
            assert!(
                CodeBundle::parse(bytes[..len].to_vec()).is_err(),
                "a {len}-byte prefix of a {}-byte bundle was accepted",
                bytes.len()
            );
        }
        for extra in [&[0u8][..], &[0; 16], b"x"] {
            refused(
                [bytes.as_slice(), extra].concat(),
                &["follow the last code object"],
            );
        }
        refused(Vec::new(), &["not a code bundle"]);
        refused(bytes[..7].to_vec(), &["inside the magic"]);
        refused(bytes[..18].to_vec(), &["header", "format version"]);
        refused(bytes[..30].to_vec(), &["header", "compiler"]);
    }

    #[test]
    fn every_changed_byte_is_refused() {
        let bytes = sample();
        for at in 0..bytes.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= mask;
                assert!(
                    CodeBundle::parse(damaged).is_err(),
                    "byte {at} ^ {mask:#x} of a {}-byte bundle was accepted",
                    bytes.len()
                );
            }
        }
    }

    /// A deterministic xorshift generator (no dependencies for tests).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn random_damage_never_panics_and_never_passes() {
        let bytes = sample();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..3000 {
            let mut damaged = bytes.clone();
            for _ in 0..1 + rng.below(6) {
                match rng.below(4) {
                    0 => {
                        let at = rng.below(damaged.len().max(1));
                        if let Some(b) = damaged.get_mut(at) {
                            *b = rng.next() as u8;
                        }
                    }
                    1 => damaged.truncate(rng.below(damaged.len() + 1)),
                    2 => {
                        // A plausible big number where a length or offset
                        // might be.
                        let at = rng.below(damaged.len().max(1));
                        let value = [u64::MAX, u64::from(u32::MAX), 1 << 40, 0][rng.below(4)];
                        for (i, b) in value.to_le_bytes().iter().enumerate() {
                            if let Some(slot) = damaged.get_mut(at + i) {
                                *slot = *b;
                            }
                        }
                    }
                    _ => {
                        let at = rng.below(damaged.len() + 1);
                        damaged.insert(at, rng.next() as u8);
                    }
                }
            }
            let unchanged = damaged == bytes;
            assert_eq!(CodeBundle::parse(damaged).is_ok(), unchanged);
        }
    }

    #[test]
    fn wrong_magic_and_versions_are_refused() {
        let raw = Raw::sample();
        let e = refused(
            raw.with(|r| r.magic = b"HIPSAFEBUNDLE\0\0\x01".to_vec()),
            &["not a code bundle"],
        );
        assert!(matches!(e, BundleError::NotABundle { .. }));
        refused(amd_elf(&[0; 8]), &["not a code bundle"]);
        for version in [0, 2, u32::MAX] {
            let e = refused(
                raw.with(|r| r.version = version),
                &[
                    &format!("format version {version} is not supported"),
                    "reads version 1",
                ],
            );
            assert_eq!(
                e,
                BundleError::UnsupportedVersion {
                    bundle: e.to_string().split(':').next().unwrap().to_string(),
                    found: version,
                    supported: 1,
                }
            );
        }
    }

    #[test]
    fn damage_to_the_header_or_table_is_reported_as_damage() {
        let raw = Raw::sample();
        refused(
            raw.with(|r| r.table_checksum = Some(1)),
            &["entry table", "the file is damaged"],
        );
        // A changed name without a resealed table.
        let mut bytes = raw.encode();
        let at = bytes.windows(10).position(|w| w == b"reduce.hip").unwrap();
        bytes[at] = b'R';
        refused(bytes, &["checksum of the header and table"]);
        // An entry count that does not match the table.
        refused(raw.with(|r| r.count = Some(4)), &["the file is damaged"]);
        refused(
            raw.with(|r| r.count = Some(u32::MAX)),
            &["entry table", "entry 5", "cut short"],
        );
        // Lengths that run past the end.
        let mut bytes = raw.encode();
        bytes[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        refused(bytes, &["header", "compiler", "cut short"]);
    }

    #[test]
    fn code_checksums_are_verified() {
        let raw = Raw::sample();
        refused(
            raw.with(|r| r.entries[1].checksum = Some(0)),
            &[
                "entry 1 (`affine.hip` for gfx1100, wave 32)",
                "checksum",
                "damaged",
            ],
        );
        // A changed code byte (the table is intact).
        let mut bytes = raw.encode();
        let last = bytes.len() - 3;
        bytes[last] ^= 1;
        refused(
            bytes,
            &["entry 4 (`reduce.hip` for gfx942, wave 64)", "checksum"],
        );
    }

    #[test]
    fn offsets_and_lengths_are_checked() {
        let raw = Raw::sample();
        let bad = |change: &dyn Fn(&mut RawRecord), needles: &[&str]| {
            refused(raw.with(|r| change(&mut r.entries[2])), needles);
        };
        bad(
            &|e| e.offset = Some(u64::MAX),
            &["entry 2", "offset 18446744073709551615"],
        );
        // Where entry 2's code object lies in the canonical file.
        let bundle = CodeBundle::parse(raw.encode()).unwrap();
        let code = bundle.entries().nth(2).unwrap().code().as_ptr();
        let at = (code as usize - bundle.as_bytes().as_ptr() as usize) as u64;
        let expected = format!("expected {at}");
        for offset in [0, 1, at - 16, at - 1, at + 1, at + 16] {
            bad(&|e| e.offset = Some(offset), &["entry 2", &expected]);
        }
        bad(
            &|e| e.len = Some(u64::MAX),
            &["entry 2", "runs past the end"],
        );
        bad(
            &|e| e.len = Some(u64::MAX - 8),
            &["entry 2", "runs past the end"],
        );
        bad(&|e| e.len = Some(0), &["entry 2", "empty"]);
        // One byte short: the checksum (of the whole code object) fails.
        bad(
            &|e| e.len = Some(e.code.len() as u64 - 1),
            &["entry 2", "checksum"],
        );
        // The last entry's length past the end of the file.
        refused(
            raw.with(|r| {
                let last = r.entries.last_mut().unwrap();
                last.len = Some(last.code.len() as u64 + 1);
            }),
            &["entry 4", "runs past the end"],
        );
        refused(raw.with(|r| r.padding = 0xee), &["padding", "not zero"]);
        refused(
            raw.with(|r| r.trailing = vec![0; 16]),
            &["layout", "16 bytes follow"],
        );
    }

    #[test]
    fn keys_are_checked() {
        let raw = Raw::sample();
        let bad = |change: &dyn Fn(&mut RawRecord), needles: &[&str]| {
            refused(raw.with(|r| change(&mut r.entries[0])), needles);
        };
        bad(
            &|e| e.name = vec![b'a', 0xff],
            &["entry 0:", "module name is not UTF-8"],
        );
        bad(
            &|e| e.arch = vec![0xc3],
            &["entry 0:", "architecture is not UTF-8"],
        );
        bad(&|e| e.name.clear(), &["entry 0:", "module name", "empty"]);
        bad(
            &|e| e.name = b"a\nb".to_vec(),
            &["entry 0:", "control character"],
        );
        bad(&|e| e.name = vec![b'a'; 4097], &["entry 0:", "4097 bytes"]);
        bad(
            &|e| e.arch = b"gfx90a:xnack-".to_vec(),
            &["entry 0:", "bare target name"],
        );
        bad(&|e| e.arch.clear(), &["entry 0:", "architecture", "empty"]);
        bad(&|e| e.wave = 48, &["entry 0:", "wave size 48"]);
        refused(raw.with(|r| r.compiler.clear()), &["compiler", "empty"]);
        refused(
            raw.with(|r| r.compiler = vec![0xff]),
            &["compiler", "UTF-8"],
        );
        refused(
            raw.with(|r| r.producer = b"x\x1b[31m".to_vec()),
            &["producer", "control"],
        );
        // An empty producer is fine.
        CodeBundle::parse(raw.with(|r| r.producer.clear())).unwrap();
    }

    #[test]
    fn duplicate_and_unsorted_keys_are_refused() {
        let raw = Raw::sample();
        let e = refused(
            raw.with(|r| r.entries.insert(1, r.entries[0].clone())),
            &[
                "entry 1 (`affine.hip` for gfx1100, wave 32)",
                "duplicate key",
                "entry 0",
            ],
        );
        assert!(matches!(e, BundleError::Malformed { .. }));
        // Also when only the code differs.
        refused(
            raw.with(|r| {
                let mut twin = r.entries[0].clone();
                twin.code = amd_elf(&[7]);
                r.entries.insert(1, twin);
            }),
            &["duplicate key"],
        );
        refused(
            raw.with(|r| r.entries.swap(0, 4)),
            &["entry 1", "out of order"],
        );
        refused(
            raw.with(|r| r.entries.swap(0, 1)),
            &["entry 1", "out of order"],
        );
        // Every key part orders: hash (entries 0 and 2 differ only in it).
        refused(raw.with(|r| r.entries.swap(1, 2)), &["out of order"]);
    }

    #[test]
    fn code_objects_must_suit_their_arch() {
        let raw = Raw::sample();
        // An AMD ELF filed under an NVIDIA target, and PTX under an AMD one.
        refused(
            raw.with(|r| r.entries[3].code = amd_elf(&[1])),
            &[
                "entry 3 (`affine.hip` for sm_90, wave 32)",
                "not a valid code object for sm_90",
                "EM_CUDA",
            ],
        );
        refused(
            raw.with(|r| r.entries[0].code = PTX.to_vec()),
            &["entry 0", "not a valid code object for gfx1100"],
        );
        // A truncated ELF with a correct checksum.
        refused(
            raw.with(|r| {
                let code = &mut r.entries[4].code;
                code.truncate(code.len() - 8);
            }),
            &["entry 4", "ELF image"],
        );
        // PTX without its NUL.
        refused(
            raw.with(|r| r.entries[3].code.pop().map(drop).unwrap_or_default()),
            &["entry 3", "NUL"],
        );
    }

    #[test]
    fn the_writer_refuses_what_the_reader_would() {
        let mut w = sample_writer();
        let rejected = |r: Result<(), BundleError>, needle: &str| {
            let e = r.unwrap_err();
            assert!(matches!(e, BundleError::Rejected { .. }), "{e:?}");
            assert!(e.to_string().contains(needle), "`{e}` lacks `{needle}`");
        };
        let elf = amd_elf(&[1]);
        rejected(
            w.add("reduce.hip", hash(1), "gfx942", 64, elf.clone()),
            "already has an entry",
        );
        rejected(w.add("x.hip", hash(1), "sm_90", 32, elf.clone()), "EM_CUDA");
        rejected(
            w.add("x.hip", hash(1), "gfx942", 64, PTX.to_vec()),
            "not a valid code object",
        );
        rejected(w.add("x.hip", hash(1), "gfx942", 64, Vec::new()), "empty");
        rejected(
            w.add("x.hip", hash(1), "gfx942:sramecc+", 64, elf.clone()),
            "bare target",
        );
        rejected(
            w.add("x.hip", hash(1), "gfx942", 16, elf.clone()),
            "wave size 16",
        );
        rejected(w.add("", hash(1), "gfx942", 64, elf.clone()), "module name");
        rejected(
            w.add("a\tb", hash(1), "gfx942", 64, elf.clone()),
            "control character",
        );
        assert_eq!(w, sample_writer(), "refused entries must not be added");
        assert!(matches!(
            CodeBundleWriter::new("", "p"),
            Err(BundleError::Rejected { .. })
        ));
        assert!(CodeBundleWriter::new("c", "x".repeat(4097)).is_err());
        assert!(CodeBundleWriter::new("c", "x".repeat(4096)).is_ok());
        // A CUBIN (EM_CUDA ELF) is accepted for an NVIDIA target.
        w.add("x.hip", hash(1), "sm_90", 32, elf_cuda()).unwrap();
        assert_eq!(w.len(), 6);
        CodeBundle::parse(w.to_bytes()).unwrap();
    }

    fn elf_cuda() -> Vec<u8> {
        elf(190, &[9; 12])
    }

    #[test]
    fn files_round_trip_and_missing_files_are_named() {
        let dir = std::env::temp_dir().join(format!("hip-safe-bundle-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kernels.hipbundle");
        sample_writer().write(&path).unwrap();
        let bundle = CodeBundle::open(&path).unwrap();
        assert_eq!(bundle.as_bytes(), &sample()[..]);
        // Nothing but the bundle is left in the directory.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);

        let missing = dir.join("missing.hipbundle");
        let e = CodeBundle::open(&missing).unwrap_err();
        assert!(
            matches!(
                &e,
                BundleError::Io { path, kind: io::ErrorKind::NotFound, .. } if *path == missing
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("missing.hipbundle"), "{e}");
        let e = CodeBundle::open(&dir).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // Parse errors name the file.
        fs::write(&path, b"garbage").unwrap();
        let e = CodeBundle::open(&path).unwrap_err();
        assert!(
            e.to_string().contains("kernels.hipbundle")
                && e.to_string().contains("not a code bundle"),
            "{e}"
        );
        // Writing into a missing directory fails with its path.
        let e = sample_writer()
            .write(dir.join("no/such/dir.hipbundle"))
            .unwrap_err();
        assert!(e.to_string().contains("cannot write"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn errors_convert_into_the_crate_error() {
        let e = CodeBundle::parse(b"nope".to_vec()).unwrap_err();
        let crate_error = crate::Error::from(e.clone());
        assert_eq!(crate_error, crate::Error::Bundle(e.clone()));
        assert_eq!(crate_error.to_string(), e.to_string());
        assert_eq!(
            e.to_string(),
            "code bundle (4 bytes): not a code bundle (it does not start with `HIPSAFEBUNDLE`)"
        );
    }

    #[test]
    fn source_hashes_display_as_hex() {
        let h = hash(0xab);
        let text = h.to_string();
        assert_eq!(text.len(), 64);
        assert!(text.starts_with("ab00") && text.ends_with("00a5"), "{text}");
        assert_eq!(format!("{h:?}"), format!("SourceHash({text})"));
        assert_eq!(SourceHash::from(h.0), SourceHash::new(*h.as_bytes()));
    }
}
