//! The hashing every fingerprint of exec shares: hex digits, length-prefixed fields, and a file's
//! sha256 read in streaming [`READ`]-sized reads. Content versions (`run::publish`), code
//! versions (`data::code`), recipe versions (`data::versions`) and kept plans' keys
//! (`engine::plan_cache`) are all made of these, so two of them never disagree on an encoding.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// How much of a file one read hashes: 64 KiB, a buffer the caller reuses across files.
pub const READ: usize = 64 * 1024;

/// Lowercase hex digits of `bytes`, two a byte.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Feeds one field to `h`, its length first: `("ab", "c")` and `("a", "bc")` then differ.
pub fn field(h: &mut Sha256, bytes: impl AsRef<[u8]>) {
    let bytes = bytes.as_ref();
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// A sha256 of a sequence of [`field`]s.
#[derive(Default)]
pub struct Fields(Sha256);

impl Fields {
    pub fn new() -> Self {
        Fields::default()
    }

    /// Adds one length-prefixed field.
    pub fn field(&mut self, bytes: impl AsRef<[u8]>) -> &mut Self {
        field(&mut self.0, bytes);
        self
    }

    /// Adds bytes as they are: a fixed-size tag or digest, which needs no length.
    pub fn raw(&mut self, bytes: impl AsRef<[u8]>) -> &mut Self {
        self.0.update(bytes);
        self
    }

    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

/// The sha256 of a file's bytes, read through `buf` (a [`READ`]-sized buffer, reused): an empty
/// file costs one open and one read.
pub fn file_sha256(path: &Path, buf: &mut [u8]) -> std::io::Result<[u8; 32]> {
    file_sha256_counted(path, buf, &mut 0)
}

/// [`file_sha256`], adding the bytes it read to `bytes` (a run's output size costs no read
/// of its own).
pub fn file_sha256_counted(
    path: &Path,
    buf: &mut [u8],
    bytes: &mut u64,
) -> std::io::Result<[u8; 32]> {
    let mut file = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    loop {
        let n = match file.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
        *bytes += n as u64;
    }
    Ok(h.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_two_lowercase_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0xab, 0x0f]), "00ab0f");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn fields_are_length_prefixed() {
        let mut a = Fields::new();
        a.field("ab").field("c");
        let mut b = Fields::new();
        b.field("a").field("bc");
        assert_ne!(a.finish(), b.finish());
    }

    #[test]
    fn a_file_is_hashed_across_reads() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        let big = "x".repeat(3 * READ + 7);
        std::fs::write(&f, &big).unwrap();
        let mut buf = vec![0; READ];
        let whole: [u8; 32] = Sha256::digest(big.as_bytes()).into();
        assert_eq!(file_sha256(&f, &mut buf).unwrap(), whole);
    }
}
