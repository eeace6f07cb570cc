//! Structural checks of a code object before the runtime reads it.
//!
//! `hipModuleLoadData` takes a pointer and no length: the loader finds its
//! way through the image with the offsets and sizes written inside it. A
//! truncated or malformed image (a cache file cut short, a planted file)
//! would make it read past the end of the buffer. [`validate`] therefore
//! checks, with checked arithmetic, that everything those offsets and sizes
//! locate lies inside the slice before the image is handed over. What each
//! platform's compiler produces is accepted:
//!
//! - **ELF64** (little-endian) for the device's machine: `EM_AMDGPU` on AMD
//!   (hipRTC's output), `EM_CUDA` on the NVIDIA test platform (the CUBIN its
//!   hipRTC returns for `sm_NN`). Checked: the file header; the program
//!   header table and every segment's file range; the section header table
//!   and every section's file range (`SHT_NOBITS` sections occupy none);
//!   that every string table ends with a NUL and every section and symbol
//!   name starts inside its string table; symbol tables' entry size, string
//!   table link and section indices; and every note record of `SHT_NOTE`
//!   sections and `PT_NOTE` segments. Extended numbering (more than 65 279
//!   sections or program headers) is refused: no GPU compiler writes it.
//! - **Clang offload bundles** (`__CLANG_OFFLOAD_BUNDLE__`, what `hipcc
//!   --genco` writes; AMD only): the entry table and every entry's range,
//!   and every non-empty `amdgcn` entry as an AMD ELF image as above.
//!   Compressed bundles (`CCOB`, from `--offload-compress`) are refused:
//!   their content cannot be checked without decompressing it.
//! - **PTX text** (NVIDIA test platform only, where hipRTC returns PTX for a
//!   `compute_NN` target): printable ASCII ending in a NUL byte inside the
//!   slice, which is where the driver stops reading. CUDA fat binaries are
//!   refused (no compiler of this project produces them).
//!
//! The checks make every read the loader does through the image's own
//! offsets land inside the slice; they do not prove that a well-formed image
//! is a sensible program (its instructions and metadata are the loader's
//! business).

use std::fmt::Display;

/// Which loader the image is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodeTarget {
    /// The AMD HIP runtime: AMDGPU ELF or an offload bundle of them.
    Amd,
    /// The HIP-on-CUDA test platform: CUBIN (ELF) or NUL-terminated PTX.
    Nvidia,
}

impl CodeTarget {
    /// The target of a device (or compile) architecture: NVIDIA for
    /// `sm_NN`, AMD otherwise.
    pub(crate) fn for_arch(arch: &str) -> CodeTarget {
        if crate::rtc::is_nvidia_arch(arch) {
            CodeTarget::Nvidia
        } else {
            CodeTarget::Amd
        }
    }
}

/// What is wrong with an image, in words.
pub(crate) type Invalid = String;

const ELF_MAGIC: &[u8] = b"\x7fELF";
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
const COMPRESSED_BUNDLE_MAGIC: &[u8] = b"CCOB";

/// `EM_AMDGPU` and `EM_CUDA` (`e_machine`).
const EM_AMDGPU: u16 = 224;
const EM_CUDA: u16 = 190;

const ELF_HEADER_BYTES: usize = 64;
const PROGRAM_HEADER_BYTES: u64 = 56;
const SECTION_HEADER_BYTES: u64 = 64;
const SYMBOL_BYTES: u64 = 24;
/// `e_phnum` value announcing extended numbering (`PN_XNUM`).
const PN_XNUM: u16 = 0xffff;
/// Section indices from here on are reserved (`SHN_LORESERVE`).
const SHN_LORESERVE: u16 = 0xff00;

const SHT_NULL: u32 = 0;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_NOTE: u32 = 7;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const PT_NOTE: u32 = 4;

/// Accepts `image` if the loader of `target` can read it without leaving
/// the slice (see the module documentation); otherwise says what is wrong.
pub(crate) fn validate(image: &[u8], target: CodeTarget) -> Result<(), Invalid> {
    if image.is_empty() {
        return Err("the code object is empty".into());
    }
    if image.starts_with(ELF_MAGIC) {
        return validate_elf(image, machine_of(target)).map_err(|e| format!("ELF image: {e}"));
    }
    match target {
        CodeTarget::Amd if image.starts_with(BUNDLE_MAGIC) => validate_bundle(image),
        CodeTarget::Amd if image.starts_with(COMPRESSED_BUNDLE_MAGIC) => Err(
            "compressed offload bundles (CCOB) are not accepted: their content cannot be \
             checked before loading; unbundle the code object or build it without \
             --offload-compress"
                .into(),
        ),
        CodeTarget::Amd => Err(
            "not an AMD GPU code object (expected an ELF image or a clang offload bundle)".into(),
        ),
        CodeTarget::Nvidia => validate_ptx(image),
    }
}

fn machine_of(target: CodeTarget) -> (u16, &'static str) {
    match target {
        CodeTarget::Amd => (EM_AMDGPU, "EM_AMDGPU"),
        CodeTarget::Nvidia => (EM_CUDA, "EM_CUDA"),
    }
}

/// Little-endian fields of a byte slice, each read with bounds checks.
struct Fields<'a> {
    data: &'a [u8],
}

impl<'a> Fields<'a> {
    fn bytes(&self, offset: u64, len: u64, what: impl Display) -> Result<&'a [u8], Invalid> {
        let (start, end) =
            file_range(offset, len, self.data.len()).map_err(|e| format!("{what}: {e}"))?;
        Ok(&self.data[start..end])
    }

    fn u16(&self, offset: u64, what: impl Display) -> Result<u16, Invalid> {
        let b = self.bytes(offset, 2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&self, offset: u64, what: impl Display) -> Result<u32, Invalid> {
        let b = self.bytes(offset, 4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&self, offset: u64, what: impl Display) -> Result<u64, Invalid> {
        let b = self.bytes(offset, 8, what)?;
        let mut raw = [0u8; 8];
        raw.copy_from_slice(b);
        Ok(u64::from_le_bytes(raw))
    }
}

/// `offset..offset + len` as indices into `total` bytes, or why not.
fn file_range(offset: u64, len: u64, total: usize) -> Result<(usize, usize), Invalid> {
    let end = offset
        .checked_add(len)
        .ok_or_else(|| format!("offset {offset} + size {len} overflows"))?;
    let total_u64 = u64::try_from(total).unwrap_or(u64::MAX);
    if end > total_u64 {
        return Err(format!(
            "bytes {offset}..{end} lie past the end of the {total}-byte image"
        ));
    }
    // Both fit in usize: they are at most `total`.
    Ok((offset as usize, end as usize))
}

/// `count` entries of `entry_size` bytes at `offset`, or why not.
fn table_range(
    offset: u64,
    count: u64,
    entry_size: u64,
    total: usize,
) -> Result<(usize, usize), Invalid> {
    let len = count
        .checked_mul(entry_size)
        .ok_or_else(|| format!("{count} entries of {entry_size} bytes overflow"))?;
    file_range(offset, len, total)
}

/// One section header, the fields the checks use.
#[derive(Clone, Copy)]
struct Section {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entry_size: u64,
    align: u64,
}

fn validate_elf(image: &[u8], (machine, machine_name): (u16, &str)) -> Result<(), Invalid> {
    if image.len() < ELF_HEADER_BYTES {
        return Err(format!(
            "{} bytes are too few for the {ELF_HEADER_BYTES}-byte ELF header",
            image.len()
        ));
    }
    let f = Fields { data: image };
    match image[4] {
        2 => {}
        class => {
            return Err(format!(
                "ELF class {class}: only 64-bit (ELFCLASS64) code objects are loaded"
            ));
        }
    }
    if image[5] != 1 {
        return Err(format!(
            "data encoding {}: only little-endian (ELFDATA2LSB) code objects are loaded",
            image[5]
        ));
    }
    if image[6] != 1 {
        return Err(format!("ELF identification version {} is not 1", image[6]));
    }
    let found = f.u16(18, "e_machine")?;
    if found != machine {
        return Err(format!(
            "machine {found} is not this device's ({machine_name}, {machine})"
        ));
    }
    let header_size = f.u16(52, "e_ehsize")?;
    if usize::from(header_size) != ELF_HEADER_BYTES {
        return Err(format!(
            "header size {header_size} is not {ELF_HEADER_BYTES}"
        ));
    }
    validate_program_headers(&f)?;
    let sections = read_sections(&f)?;
    validate_sections(&f, &sections)
}

fn validate_program_headers(f: &Fields<'_>) -> Result<(), Invalid> {
    let offset = f.u64(32, "e_phoff")?;
    let count = f.u16(56, "e_phnum")?;
    if count == 0 {
        return Ok(());
    }
    if count == PN_XNUM {
        return Err("extended program header numbering (PN_XNUM) is not supported".into());
    }
    let entry = f.u16(54, "e_phentsize")?;
    if u64::from(entry) != PROGRAM_HEADER_BYTES {
        return Err(format!(
            "program header size {entry} is not {PROGRAM_HEADER_BYTES}"
        ));
    }
    table_range(offset, u64::from(count), PROGRAM_HEADER_BYTES, f.data.len())
        .map_err(|e| format!("program header table ({count} entries at offset {offset}): {e}"))?;
    for i in 0..u64::from(count) {
        let at = offset + i * PROGRAM_HEADER_BYTES;
        let kind = f.u32(at, "p_type")?;
        let seg_offset = f.u64(at + 8, "p_offset")?;
        let file_size = f.u64(at + 32, "p_filesz")?;
        let what =
            || format!("segment {i} (type {kind:#x}, offset {seg_offset}, {file_size} bytes)");
        let (start, end) = file_range(seg_offset, file_size, f.data.len())
            .map_err(|e| format!("{}: {e}", what()))?;
        if kind == PT_NOTE {
            let align = f.u64(at + 48, "p_align")?;
            validate_notes(&f.data[start..end], align).map_err(|e| format!("{}: {e}", what()))?;
        }
    }
    Ok(())
}

fn read_sections(f: &Fields<'_>) -> Result<Vec<Section>, Invalid> {
    let offset = f.u64(40, "e_shoff")?;
    let count = f.u16(60, "e_shnum")?;
    if offset == 0 {
        if count != 0 {
            return Err(format!(
                "{count} sections announced but no section header table"
            ));
        }
        return Ok(Vec::new());
    }
    if count == 0 {
        return Err("extended section numbering (e_shnum 0) is not supported".into());
    }
    if count >= SHN_LORESERVE {
        return Err(format!(
            "{count} sections is beyond the ELF section index range"
        ));
    }
    let entry = f.u16(58, "e_shentsize")?;
    if u64::from(entry) != SECTION_HEADER_BYTES {
        return Err(format!(
            "section header size {entry} is not {SECTION_HEADER_BYTES}"
        ));
    }
    table_range(offset, u64::from(count), SECTION_HEADER_BYTES, f.data.len())
        .map_err(|e| format!("section header table ({count} entries at offset {offset}): {e}"))?;
    (0..u64::from(count))
        .map(|i| {
            let at = offset + i * SECTION_HEADER_BYTES;
            Ok(Section {
                name: f.u32(at, "sh_name")?,
                kind: f.u32(at + 4, "sh_type")?,
                offset: f.u64(at + 24, "sh_offset")?,
                size: f.u64(at + 32, "sh_size")?,
                link: f.u32(at + 40, "sh_link")?,
                align: f.u64(at + 48, "sh_addralign")?,
                entry_size: f.u64(at + 56, "sh_entsize")?,
            })
        })
        .collect()
}

/// The bytes a section occupies in the file (empty for `SHT_NOBITS` and
/// `SHT_NULL`), or why they are not inside the image.
fn section_bytes<'a>(f: &Fields<'a>, index: usize, s: &Section) -> Result<&'a [u8], Invalid> {
    if s.kind == SHT_NOBITS || s.kind == SHT_NULL {
        return Ok(&[]);
    }
    f.bytes(
        s.offset,
        s.size,
        format_args!(
            "section {index} (type {:#x}, offset {}, {} bytes)",
            s.kind, s.offset, s.size
        ),
    )
}

fn validate_sections(f: &Fields<'_>, sections: &[Section]) -> Result<(), Invalid> {
    if sections.is_empty() {
        return Ok(());
    }
    let contents = sections
        .iter()
        .enumerate()
        .map(|(i, s)| section_bytes(f, i, s))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, (s, bytes)) in sections.iter().zip(&contents).enumerate() {
        if s.kind == SHT_STRTAB && bytes.last().is_some_and(|&b| b != 0) {
            return Err(format!(
                "string table section {i} does not end with a NUL byte"
            ));
        }
    }
    let names = usize::from(f.u16(62, "e_shstrndx")?);
    if names != 0 {
        let table = sections
            .get(names)
            .filter(|s| s.kind == SHT_STRTAB)
            .ok_or_else(|| {
                format!("section name table index {names} is not a string table section")
            })?;
        for (i, s) in sections.iter().enumerate() {
            if u64::from(s.name) >= table.size && s.name != 0 {
                return Err(format!(
                    "section {i}'s name offset {} lies outside the {}-byte name table",
                    s.name, table.size
                ));
            }
        }
    }
    for (i, (s, bytes)) in sections.iter().zip(&contents).enumerate() {
        let what = || format!("section {i} (type {:#x})", s.kind);
        match s.kind {
            SHT_SYMTAB | SHT_DYNSYM => {
                validate_symbols(bytes, s, sections).map_err(|e| format!("{}: {e}", what()))?
            }
            SHT_NOTE => validate_notes(bytes, s.align).map_err(|e| format!("{}: {e}", what()))?,
            _ => {}
        }
    }
    Ok(())
}

fn validate_symbols(bytes: &[u8], table: &Section, sections: &[Section]) -> Result<(), Invalid> {
    if table.entry_size != SYMBOL_BYTES {
        return Err(format!(
            "symbol entry size {} is not {SYMBOL_BYTES}",
            table.entry_size
        ));
    }
    if table.size % SYMBOL_BYTES != 0 {
        return Err(format!(
            "{} bytes is not a whole number of {SYMBOL_BYTES}-byte symbols",
            table.size
        ));
    }
    let strings = usize::try_from(table.link)
        .ok()
        .and_then(|l| sections.get(l))
        .filter(|s| s.kind == SHT_STRTAB)
        .ok_or_else(|| format!("linked section {} is not a string table", table.link))?;
    let f = Fields { data: bytes };
    for (n, at) in (0..table.size).step_by(SYMBOL_BYTES as usize).enumerate() {
        let name = f.u32(at, "st_name")?;
        if name != 0 && u64::from(name) >= strings.size {
            return Err(format!(
                "symbol {n}'s name offset {name} lies outside the {}-byte string table",
                strings.size
            ));
        }
        let section = f.u16(at + 6, "st_shndx")?;
        if section < SHN_LORESERVE && usize::from(section) >= sections.len() {
            return Err(format!(
                "symbol {n} refers to section {section} of {}",
                sections.len()
            ));
        }
    }
    Ok(())
}

/// Walks the note records of a note section or segment: a 12-byte header
/// (name size, descriptor size, type), the name and the descriptor, each
/// padded to the alignment (8 when the container says so, else 4).
fn validate_notes(bytes: &[u8], align: u64) -> Result<(), Invalid> {
    let align = if align == 8 { 8 } else { 4 };
    let f = Fields { data: bytes };
    let pad = |n: u64| n.checked_next_multiple_of(align);
    let mut at = 0u64;
    let total = bytes.len() as u64;
    while at < total {
        let name_size = f.u32(at, "note name size")?;
        let desc_size = f.u32(at + 4, "note descriptor size")?;
        let desc_start = pad(u64::from(name_size))
            .and_then(|n| (at + 12).checked_add(n))
            .ok_or("note name size overflows")?;
        file_range(desc_start, u64::from(desc_size), bytes.len()).map_err(|e| {
            format!(
                "note at offset {at} (name {name_size} bytes, descriptor {desc_size} bytes): {e}"
            )
        })?;
        // The last record's padding may be cut off by the container's end.
        at = pad(u64::from(desc_size))
            .and_then(|d| desc_start.checked_add(d))
            .ok_or("note descriptor size overflows")?;
    }
    Ok(())
}

/// A clang offload bundle: the magic, the entry count, then per entry its
/// offset, size, target triple size and triple; the entries' code follows.
fn validate_bundle(image: &[u8]) -> Result<(), Invalid> {
    let f = Fields { data: image };
    let header = BUNDLE_MAGIC.len() as u64;
    let count = f.u64(header, "offload bundle entry count")?;
    if count == 0 {
        return Err("the offload bundle has no entries".into());
    }
    let mut at = header + 8;
    for i in 0..count {
        let what = |field: &str| format!("offload bundle entry {i} {field}");
        let offset = f.u64(at, what("offset"))?;
        let size = f.u64(at + 8, what("size"))?;
        let triple_size = f.u64(at + 16, what("triple size"))?;
        let triple = f.bytes(at + 24, triple_size, what("triple"))?;
        let triple = std::str::from_utf8(triple)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| format!("offload bundle entry {i} has no readable target triple"))?;
        at = at + 24 + triple_size;
        let (start, end) = file_range(offset, size, image.len())
            .map_err(|e| format!("offload bundle entry {i} ({triple}): {e}"))?;
        if size > 0 && triple.contains("amdgcn") {
            validate_elf(&image[start..end], machine_of(CodeTarget::Amd))
                .map_err(|e| format!("offload bundle entry {i} ({triple}): ELF image: {e}"))?;
        }
    }
    Ok(())
}

/// PTX text: printable ASCII (and tabs, line ends) up to a NUL byte.
fn validate_ptx(image: &[u8]) -> Result<(), Invalid> {
    let text_end = image.iter().position(|&b| b == 0);
    let text = &image[..text_end.unwrap_or(image.len())];
    let is_text = |b: &u8| matches!(b, b'\t' | b'\n' | b'\r' | 0x20..=0x7e);
    if !text.iter().all(is_text) {
        return Err("not an NVIDIA code object (expected an EM_CUDA ELF image or PTX text)".into());
    }
    if text_end.is_none() {
        return Err("PTX text must end with a NUL byte inside the image".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little ELF64 image: sections null, .shstrtab, .strtab, .symtab,
    /// .note, .text, .bss (no file bytes); one PT_LOAD and one PT_NOTE
    /// segment; the section header table at the end.
    struct Elf {
        machine: u16,
        shstrtab: Vec<u8>,
        strtab: Vec<u8>,
        symbols: Vec<(u32, u16)>,
        note: Vec<u8>,
        text: Vec<u8>,
    }

    /// Where the pieces of a built image lie.
    struct Layout {
        ph_offset: usize,
        sh_offset: usize,
        note_offset: usize,
    }

    fn note(name: &[u8], desc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        out.extend_from_slice(&32u32.to_le_bytes());
        out.extend_from_slice(name);
        out.resize(out.len().next_multiple_of(4), 0);
        out.extend_from_slice(desc);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    impl Elf {
        fn new(machine: u16) -> Elf {
            Elf {
                machine,
                shstrtab: b"\0.shstrtab\0.strtab\0.symtab\0.note\0.text\0.bss\0".to_vec(),
                strtab: b"\0kernel\0kernel.kd\0".to_vec(),
                symbols: vec![(0, 0), (1, 5), (8, 5)],
                note: [note(b"AMDGPU\0", b"metadata"), note(b"AMD\0", b"")].concat(),
                text: vec![0xbf; 64],
            }
        }

        fn build(&self) -> (Vec<u8>, Layout) {
            let mut out = vec![0u8; 64];
            let put = |out: &mut Vec<u8>, bytes: &[u8]| {
                out.resize(out.len().next_multiple_of(8), 0);
                let at = out.len();
                out.extend_from_slice(bytes);
                at
            };
            let mut symtab = Vec::new();
            for &(name, shndx) in &self.symbols {
                let mut sym = [0u8; 24];
                sym[..4].copy_from_slice(&name.to_le_bytes());
                sym[6..8].copy_from_slice(&shndx.to_le_bytes());
                symtab.extend_from_slice(&sym);
            }
            let ph_offset = put(&mut out, &[0u8; 2 * 56]);
            let shstrtab = put(&mut out, &self.shstrtab);
            let strtab = put(&mut out, &self.strtab);
            let symtab_at = put(&mut out, &symtab);
            let note_offset = put(&mut out, &self.note);
            let text = put(&mut out, &self.text);
            // (name, type, offset, size, link, align, entsize)
            let sections: [(u32, u32, usize, usize, u32, u64, u64); 7] = [
                (0, SHT_NULL, 0, 0, 0, 0, 0),
                (1, SHT_STRTAB, shstrtab, self.shstrtab.len(), 0, 1, 0),
                (11, SHT_STRTAB, strtab, self.strtab.len(), 0, 1, 0),
                (19, SHT_SYMTAB, symtab_at, symtab.len(), 2, 8, 24),
                (27, SHT_NOTE, note_offset, self.note.len(), 0, 4, 0),
                (33, 1, text, self.text.len(), 0, 256, 0),
                (39, SHT_NOBITS, 1 << 40, 1 << 40, 0, 8, 0),
            ];
            let sh_offset = put(&mut out, &[]);
            for (name, kind, offset, size, link, align, entsize) in sections {
                let mut sh = [0u8; 64];
                sh[..4].copy_from_slice(&name.to_le_bytes());
                sh[4..8].copy_from_slice(&kind.to_le_bytes());
                sh[24..32].copy_from_slice(&(offset as u64).to_le_bytes());
                sh[32..40].copy_from_slice(&(size as u64).to_le_bytes());
                sh[40..44].copy_from_slice(&link.to_le_bytes());
                sh[48..56].copy_from_slice(&align.to_le_bytes());
                sh[56..64].copy_from_slice(&entsize.to_le_bytes());
                out.extend_from_slice(&sh);
            }
            // PT_LOAD over the text, PT_NOTE over the notes.
            for (i, (kind, offset, size)) in [
                (1u32, text, self.text.len()),
                (PT_NOTE, note_offset, self.note.len()),
            ]
            .into_iter()
            .enumerate()
            {
                let at = ph_offset + i * 56;
                out[at..at + 4].copy_from_slice(&kind.to_le_bytes());
                out[at + 8..at + 16].copy_from_slice(&(offset as u64).to_le_bytes());
                out[at + 32..at + 40].copy_from_slice(&(size as u64).to_le_bytes());
                out[at + 40..at + 48].copy_from_slice(&(size as u64).to_le_bytes());
                out[at + 48..at + 56].copy_from_slice(&4u64.to_le_bytes());
            }
            out[..4].copy_from_slice(ELF_MAGIC);
            out[4] = 2;
            out[5] = 1;
            out[6] = 1;
            out[16..18].copy_from_slice(&3u16.to_le_bytes());
            out[18..20].copy_from_slice(&self.machine.to_le_bytes());
            out[20..24].copy_from_slice(&1u32.to_le_bytes());
            out[32..40].copy_from_slice(&(ph_offset as u64).to_le_bytes());
            out[40..48].copy_from_slice(&(sh_offset as u64).to_le_bytes());
            out[52..54].copy_from_slice(&64u16.to_le_bytes());
            out[54..56].copy_from_slice(&56u16.to_le_bytes());
            out[56..58].copy_from_slice(&2u16.to_le_bytes());
            out[58..60].copy_from_slice(&64u16.to_le_bytes());
            out[60..62].copy_from_slice(&7u16.to_le_bytes());
            out[62..64].copy_from_slice(&1u16.to_le_bytes());
            (
                out,
                Layout {
                    ph_offset,
                    sh_offset,
                    note_offset,
                },
            )
        }
    }

    fn amd_elf() -> Vec<u8> {
        Elf::new(EM_AMDGPU).build().0
    }

    fn set_u64(image: &mut [u8], at: usize, value: u64) {
        image[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn set_u16(image: &mut [u8], at: usize, value: u16) {
        image[at..at + 2].copy_from_slice(&value.to_le_bytes());
    }

    /// Asserts that `image` is refused for `target` with a message
    /// containing `needle`.
    #[track_caller]
    fn refused(image: &[u8], target: CodeTarget, needle: &str) {
        match validate(image, target) {
            Ok(()) => panic!("accepted an image that should be refused for `{needle}`"),
            Err(e) => assert!(e.contains(needle), "`{e}` does not mention `{needle}`"),
        }
    }

    #[test]
    fn well_formed_images_of_each_platform_are_accepted() {
        assert_eq!(validate(&amd_elf(), CodeTarget::Amd), Ok(()));
        let cubin = Elf::new(EM_CUDA).build().0;
        assert_eq!(validate(&cubin, CodeTarget::Nvidia), Ok(()));
        let ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n.version 8.5\n.target sm_90\n\0";
        assert_eq!(validate(ptx, CodeTarget::Nvidia), Ok(()));
        assert_eq!(
            validate(
                &bundle(&[
                    ("host-x86_64-unknown-linux-gnu", &[]),
                    ("hipv4-amdgcn-amd-amdhsa--gfx90a", &amd_elf())
                ]),
                CodeTarget::Amd
            ),
            Ok(())
        );
    }

    #[test]
    fn every_truncation_is_refused() {
        let image = amd_elf();
        for len in 0..image.len() {
            assert!(
                validate(&image[..len], CodeTarget::Amd).is_err(),
                "a {len}-byte prefix of a {}-byte image was accepted",
                image.len()
            );
        }
    }

    #[test]
    fn images_for_another_loader_are_refused() {
        refused(&amd_elf(), CodeTarget::Nvidia, "EM_CUDA");
        refused(&Elf::new(EM_CUDA).build().0, CodeTarget::Amd, "EM_AMDGPU");
        refused(&Elf::new(62).build().0, CodeTarget::Amd, "machine 62");
        refused(
            b".version 8.5\n.target sm_90\n\0",
            CodeTarget::Amd,
            "not an AMD GPU code object",
        );
        refused(b"", CodeTarget::Amd, "empty");
        let fatbin = [0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0];
        refused(&fatbin, CodeTarget::Nvidia, "not an NVIDIA code object");
    }

    #[test]
    fn malformed_elf_headers_are_refused() {
        let good = amd_elf();
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut image = good.clone();
            f(&mut image);
            image
        };
        refused(&with(&|i| i[4] = 1), CodeTarget::Amd, "ELFCLASS64");
        refused(&with(&|i| i[5] = 2), CodeTarget::Amd, "little-endian");
        refused(
            &with(&|i| set_u16(i, 52, 52)),
            CodeTarget::Amd,
            "header size",
        );
        refused(
            &with(&|i| set_u64(i, 40, u64::MAX - 8)),
            CodeTarget::Amd,
            "overflows",
        );
        refused(
            &with(&|i| set_u64(i, 40, 1 << 20)),
            CodeTarget::Amd,
            "section header table",
        );
        refused(
            &with(&|i| set_u16(i, 60, 0xfff0)),
            CodeTarget::Amd,
            "section index range",
        );
        refused(
            &with(&|i| set_u16(i, 60, 0)),
            CodeTarget::Amd,
            "extended section numbering",
        );
        refused(
            &with(&|i| set_u16(i, 58, 40)),
            CodeTarget::Amd,
            "section header size",
        );
        refused(
            &with(&|i| set_u16(i, 62, 9)),
            CodeTarget::Amd,
            "name table index 9",
        );
        refused(
            &with(&|i| set_u16(i, 62, 3)),
            CodeTarget::Amd,
            "name table index 3",
        );
        refused(
            &with(&|i| set_u64(i, 32, u64::MAX)),
            CodeTarget::Amd,
            "program header table",
        );
        refused(
            &with(&|i| set_u16(i, 56, PN_XNUM)),
            CodeTarget::Amd,
            "PN_XNUM",
        );
        refused(
            &with(&|i| set_u16(i, 54, 32)),
            CodeTarget::Amd,
            "program header size",
        );
    }

    #[test]
    fn sections_and_segments_outside_the_image_are_refused() {
        let (good, layout) = Elf::new(EM_AMDGPU).build();
        let section = |i: usize| layout.sh_offset + i * 64;
        let segment = |i: usize| layout.ph_offset + i * 56;
        let with = |at: usize, value: u64| {
            let mut image = good.clone();
            set_u64(&mut image, at, value);
            image
        };
        // .text's size and offset.
        refused(
            &with(section(5) + 32, good.len() as u64),
            CodeTarget::Amd,
            "section 5",
        );
        refused(
            &with(section(5) + 24, u64::MAX - 2),
            CodeTarget::Amd,
            "overflows",
        );
        // .bss may be anywhere: it has no file bytes.
        assert_eq!(
            validate(&with(section(6) + 24, u64::MAX), CodeTarget::Amd),
            Ok(())
        );
        // A segment's file size.
        refused(
            &with(segment(0) + 32, 1 << 30),
            CodeTarget::Amd,
            "segment 0",
        );
        refused(
            &with(segment(1) + 8, u64::MAX),
            CodeTarget::Amd,
            "segment 1",
        );
    }

    #[test]
    fn string_tables_symbols_and_notes_are_checked() {
        let mut elf = Elf::new(EM_AMDGPU);
        elf.strtab.pop();
        refused(&elf.build().0, CodeTarget::Amd, "does not end with a NUL");

        let mut elf = Elf::new(EM_AMDGPU);
        elf.symbols.push((4096, 5));
        refused(
            &elf.build().0,
            CodeTarget::Amd,
            "symbol 3's name offset 4096",
        );

        let mut elf = Elf::new(EM_AMDGPU);
        elf.symbols.push((1, 200));
        refused(&elf.build().0, CodeTarget::Amd, "refers to section 200");

        let (good, layout) = Elf::new(EM_AMDGPU).build();
        let mut image = good.clone();
        set_u16(&mut image, layout.sh_offset + 3 * 64 + 40, 5);
        refused(&image, CodeTarget::Amd, "not a string table");
        let mut image = good.clone();
        image[layout.sh_offset + 5 * 64..][..4].copy_from_slice(&4096u32.to_le_bytes());
        refused(&image, CodeTarget::Amd, "section 5's name offset 4096");

        // A note whose descriptor size runs past its section.
        let mut image = good.clone();
        image[layout.note_offset + 4..][..4].copy_from_slice(&u32::MAX.to_le_bytes());
        refused(&image, CodeTarget::Amd, "note at offset 0");
        let mut image = good;
        image[layout.note_offset..][..4].copy_from_slice(&u32::MAX.to_le_bytes());
        refused(&image, CodeTarget::Amd, "note");
    }

    /// An offload bundle of `(triple, code)` entries.
    fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let header: usize =
            BUNDLE_MAGIC.len() + 8 + entries.iter().map(|(t, _)| 24 + t.len()).sum::<usize>();
        let mut out = BUNDLE_MAGIC.to_vec();
        out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        let mut offset = header;
        for (triple, code) in entries {
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            out.extend_from_slice(&(code.len() as u64).to_le_bytes());
            out.extend_from_slice(&(triple.len() as u64).to_le_bytes());
            out.extend_from_slice(triple.as_bytes());
            offset += code.len();
        }
        for (_, code) in entries {
            out.extend_from_slice(code);
        }
        out
    }

    #[test]
    fn malformed_offload_bundles_are_refused() {
        let elf = amd_elf();
        let triple = "hipv4-amdgcn-amd-amdhsa--gfx942";
        let good = bundle(&[("host-x86_64-unknown-linux-gnu", &[]), (triple, &elf)]);
        let entry1 = BUNDLE_MAGIC.len() + 8 + 24 + "host-x86_64-unknown-linux-gnu".len();
        for len in BUNDLE_MAGIC.len()..good.len() {
            assert!(
                validate(&good[..len], CodeTarget::Amd).is_err(),
                "prefix {len}"
            );
        }
        let mut image = good.clone();
        set_u64(&mut image, BUNDLE_MAGIC.len(), u64::MAX);
        refused(&image, CodeTarget::Amd, "entry 2");
        let mut image = good.clone();
        set_u64(&mut image, BUNDLE_MAGIC.len(), 0);
        refused(&image, CodeTarget::Amd, "no entries");
        let mut image = good.clone();
        set_u64(&mut image, entry1, u64::MAX - 4);
        refused(&image, CodeTarget::Amd, "overflows");
        let mut image = good.clone();
        set_u64(&mut image, entry1 + 8, elf.len() as u64 + 1);
        refused(&image, CodeTarget::Amd, "past the end");
        let mut image = good.clone();
        set_u64(&mut image, entry1 + 16, u64::MAX);
        refused(&image, CodeTarget::Amd, "triple");
        // The amdgcn entry is itself checked: cut its ELF short.
        let short = bundle(&[(triple, &elf[..elf.len() - 64])]);
        refused(
            &short,
            CodeTarget::Amd,
            "offload bundle entry 0 (hipv4-amdgcn-amd-amdhsa--gfx942): ELF image",
        );
        let mut compressed = b"CCOB".to_vec();
        compressed.extend_from_slice(&[2, 0, 1, 0]);
        refused(&compressed, CodeTarget::Amd, "compressed offload bundles");
        // Bundles are an AMD format.
        refused(&good, CodeTarget::Nvidia, "not an NVIDIA code object");
    }

    #[test]
    fn ptx_must_be_text_ending_in_nul() {
        refused(
            b".version 8.5\n.target sm_90\n",
            CodeTarget::Nvidia,
            "must end with a NUL",
        );
        refused(
            b".version 8.5\n\xff\0",
            CodeTarget::Nvidia,
            "not an NVIDIA code object",
        );
        assert_eq!(
            validate(b".version 8.5\n\0trailing", CodeTarget::Nvidia),
            Ok(())
        );
    }

    /// Real hipRTC output passes the checks: in the ROCm sandbox (no GPU)
    /// for every architecture family the project targets, on the NVIDIA
    /// test platform (where GPU runs include ignored tests) for its device.
    #[test]
    #[ignore = "needs the ROCm sandbox or a HIP device"]
    fn sandbox_hiprtc_code_objects_pass_validation() {
        let source = r#"
            extern "C" __global__ void scale(float* x, float a, unsigned n) {
                __shared__ float tile[64];
                unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
                tile[threadIdx.x % 64] = i < n ? x[i] : 0.0f;
                __syncthreads();
                if (i < n) x[i] = a * tile[threadIdx.x % 64];
            }"#;
        let archs: Vec<String> = if crate::Program::supported_archs().is_empty() {
            vec![crate::Device::new(0).expect("a device").arch().to_string()]
        } else {
            ["gfx90a", "gfx942", "gfx1100", "gfx1201"]
                .map(String::from)
                .to_vec()
        };
        for arch in &archs {
            let code = crate::Program::new(source, "scale.hip")
                .without_cache()
                .compile_for_arch(arch)
                .expect("hipRTC compiles");
            let target = CodeTarget::for_arch(arch);
            assert_eq!(validate(&code, target), Ok(()), "{arch}");
            for len in [code.len() / 2, code.len() - 1] {
                assert!(validate(&code[..len], target).is_err(), "{arch}");
            }
        }
    }

    #[test]
    fn targets_follow_the_architecture() {
        assert_eq!(CodeTarget::for_arch("sm_90"), CodeTarget::Nvidia);
        assert_eq!(CodeTarget::for_arch("gfx90a"), CodeTarget::Amd);
        assert_eq!(CodeTarget::for_arch("gfx1201"), CodeTarget::Amd);
    }
}
