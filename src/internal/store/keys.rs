//! What a WAL key is: `<prefix>/<20-digit sequence>.wal` (FORMAT.md "Keys"), and which
//! prefix they start with (`config::validate_prefix`, the configuration's rule).

use object_store::path::Path;

use crate::format::MAX_SEQUENCE;

/// Digits of the zero-padded sequence in a key.
pub const SEQUENCE_DIGITS: usize = 20;
/// Suffix of every WAL key.
pub const KEY_SUFFIX: &str = ".wal";

/// The key of the object with `sequence` under `prefix`.
pub fn object_key(prefix: &Path, sequence: u64) -> Path {
    Path::from(format!("{prefix}/{sequence:020}{KEY_SUFFIX}"))
}

/// The sequence named by `key`, if it is a WAL key directly under `prefix`.
pub fn parse_key(prefix: &Path, key: &Path) -> Option<u64> {
    let name = key
        .as_ref()
        .strip_prefix(prefix.as_ref())?
        .strip_prefix('/')?;
    let digits = name.strip_suffix(KEY_SUFFIX)?;
    if digits.len() != SEQUENCE_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sequence: u64 = digits.parse().ok()?;
    (1..=MAX_SEQUENCE).contains(&sequence).then_some(sequence)
}
