//! The binary trace's layout, in the one place both its reader and its writer take it from.
//! docs/OUTPUT.md describes it for other readers.

/// The file's first eight bytes. Not text: a CSV trace cannot start with them.
pub(crate) const MAGIC: [u8; 8] = *b"\x89GSTRC\r\n";

/// The layout version this build writes. A reader refuses a newer one by name rather than
/// misreading it. Version 2 let the header name up to 128 columns (the presence and integer
/// masks grew from 64 to 128 bits, still LEB128): a version 1 file, at most 64 columns, reads
/// exactly as it did.
pub(super) const VERSION: u16 = 2;

/// The oldest layout version this build reads.
pub(super) const OLDEST_VERSION: u16 = 1;

/// The most metric columns a header may name: one bit each in a row's presence mask.
pub(super) const MAX_COLUMNS: usize = 128;

/// Bytes before the header's text: magic, version, reserved, the text's length, its CRC-32.
pub(super) const PREAMBLE_BYTES: usize = 20;

/// The longest header text accepted: 128 names of at most a few dozen bytes each.
pub(super) const MAX_HEADER_BYTES: usize = 64 * 1024;

/// A block's own header: its payload's length, its row count, the payload's CRC-32.
pub(super) const BLOCK_HEADER_BYTES: usize = 12;

/// The writer ends a block once its payload reaches this (and at every flush).
pub(super) const TARGET_BLOCK_BYTES: usize = 64 * 1024;

/// The most rows a block may hold, which a reader refuses past so that a damaged count cannot
/// make it allocate a sample for every byte of a block: a writer's block, ended at 64 KiB of
/// rows of at least 12 bytes, holds at most 5,462.
pub(super) const MAX_BLOCK_ROWS: usize = 8192;

/// The longest JSON list one row may carry in one column, as a CSV line may be at most this
/// long: a few hundred processes take some 100 KiB.
pub(crate) const MAX_LIST_BYTES: usize = 1 << 20;

/// The largest payload a reader accepts: a block the writer ends past [`TARGET_BLOCK_BYTES`]
/// holds one more row, at most three lists of [`MAX_LIST_BYTES`] and the numbers. A length
/// beyond it is damage, and must not make the reader allocate gigabytes.
pub(super) const MAX_BLOCK_BYTES: usize = 4 * MAX_LIST_BYTES;

/// The fewest bytes a row takes: GPU (1), time (8), extras (1), presence (1), integers (1).
pub(super) const MIN_ROW_BYTES: usize = 12;

/// Bits of a row's `extras` byte: which of the non-metric columns follow.
pub(super) const CLK_REASONS: u8 = 1;
pub(super) const PROCESSES: u8 = 2;
pub(super) const PODS: u8 = 4;
pub(super) const NVLINKS: u8 = 8;
pub(super) const EXTRAS: u8 = CLK_REASONS | PROCESSES | PODS | NVLINKS;

/// Appends `v` as LEB128: seven bits a byte, low first, the high bit set on all but the last.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a presence or integer mask as LEB128, which for a mask under 2^64 is the same bytes
/// [`put_varint`] writes.
pub(super) fn put_mask(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a mask [`put_mask`] wrote; `None` when the bytes end first or it does not fit 128
/// bits (more than nineteen bytes, or a nineteenth above 1).
#[inline(always)]
pub(super) fn get_mask(b: &[u8], p: &mut usize) -> Option<u128> {
    let start = *p;
    if let Some(v) = get_varint(b, p) {
        return Some(u128::from(v));
    }
    // Past 64 bits: a byte at a time, from where the short form gave up.
    *p = start;
    let mut v = 0u128;
    for shift in (0..128).step_by(7) {
        let byte = *b.get(*p)?;
        *p += 1;
        if shift == 126 && byte > 3 {
            return None;
        }
        v |= u128::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Reads a LEB128 number at `*p`, moving past it; `None` when the bytes end first or it does
/// not fit 64 bits (more than ten bytes, or a tenth byte above 1).
#[inline(always)]
pub(super) fn get_varint(b: &[u8], p: &mut usize) -> Option<u64> {
    // One byte (a flag, a small count) is most of them.
    if let Some(&byte) = b.get(*p) {
        if byte < 0x80 {
            *p += 1;
            return Some(u64::from(byte));
        }
    }
    // Up to eight bytes (every reading below 2^56) from one load, without a branch a byte:
    // the byte that ends it is the first with its high bit clear, and the seven-bit groups
    // are packed together pairwise, then by fours, then by eights.
    if let Some(bytes) = b.get(*p..).and_then(|rest| rest.first_chunk::<8>()) {
        let word = u64::from_le_bytes(*bytes);
        let ends = !word & 0x8080_8080_8080_8080;
        if ends != 0 {
            let len = ends.trailing_zeros() / 8 + 1;
            let x = word & (u64::MAX >> (64 - 8 * len)) & 0x7f7f_7f7f_7f7f_7f7f;
            let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
            let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
            let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
            *p += len as usize;
            return Some(x);
        }
    }
    get_long_varint(b, p)
}

/// [`get_varint`] for nine or ten bytes, and near the end of the bytes: a byte at a time.
#[inline(never)]
fn get_long_varint(b: &[u8], p: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*p)?;
        *p += 1;
        if shift == 63 && byte > 1 {
            return None;
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// `v` as an integer that gives `v` back exactly (within ±2^53, no fraction, not −0), which
/// takes one to eight bytes as a varint instead of eight as a double: most readings are
/// counts, milliwatts, megahertz, bytes.
pub(super) fn exact_integer(v: f64) -> Option<i64> {
    const LIMIT: f64 = (1u64 << 53) as f64;
    let i = v as i64;
    (v.abs() <= LIMIT && i as f64 == v && !(v == 0.0 && v.is_sign_negative())).then_some(i)
}

/// A signed integer with its sign in the low bit, so that small magnitudes of either sign
/// take few varint bytes.
pub(super) fn zigzag(i: i64) -> u64 {
    ((i << 1) ^ (i >> 63)) as u64
}

pub(super) fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mask_reads_back_on_both_sides_of_64_bits() {
        for v in [
            0u128,
            1,
            127,
            128,
            u128::from(u64::MAX),
            1 << 64,
            (1 << 64) | 5,
            u128::MAX,
        ] {
            let mut out = Vec::new();
            put_mask(&mut out, v);
            if let Ok(short) = u64::try_from(v) {
                let mut same = Vec::new();
                put_varint(&mut same, short);
                assert_eq!(
                    out, same,
                    "a mask under 2^64 is written as version 1 wrote it"
                );
            }
            let mut p = 0;
            assert_eq!(get_mask(&out, &mut p), Some(v));
            assert_eq!(p, out.len());
        }
        // A twentieth byte, or a nineteenth above 3: not a 128-bit mask.
        let mut p = 0;
        assert_eq!(get_mask(&[0xff; 20], &mut p), None);
        let mut long = vec![0xff; 18];
        long.push(4);
        let mut p = 0;
        assert_eq!(get_mask(&long, &mut p), None);
    }

    #[test]
    fn varints_round_trip_at_every_length_and_refuse_overflow() {
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut p = 0;
            assert_eq!(get_varint(&b, &mut p), Some(v));
            assert_eq!(p, b.len());
        }
        let mut p = 0;
        assert_eq!(get_varint(&[0x80, 0x80], &mut p), None, "cut short");
        let eleven = [0xff; 11];
        assert_eq!(get_varint(&eleven, &mut 0), None, "more than ten bytes");
        let mut too_big = vec![0xff; 9];
        too_big.push(0x02);
        assert_eq!(get_varint(&too_big, &mut 0), None, "past 64 bits");
        // The same, with bytes after them (the one-load path) and without (a byte at a time).
        for v in [0, 127, 128, 300, (1 << 56) - 1, 1 << 56, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let end = b.len();
            b.extend_from_slice(&[0x80; 12]);
            let mut p = 0;
            assert_eq!((get_varint(&b, &mut p), p), (Some(v), end));
        }
        too_big.extend_from_slice(&[0; 4]);
        assert_eq!(
            get_varint(&too_big, &mut 0),
            None,
            "past 64 bits, bytes after"
        );
        assert_eq!(get_varint(&[0xff; 16], &mut 0), None, "no end in ten bytes");
    }

    #[test]
    fn only_values_an_integer_gives_back_exactly_are_integers() {
        assert_eq!(exact_integer(700_000.0), Some(700_000));
        assert_eq!(exact_integer(0.0), Some(0));
        assert_eq!(exact_integer(-0.0), None, "the sign of zero would be lost");
        assert_eq!(exact_integer(96.5), None);
        assert_eq!(exact_integer(9_007_199_254_740_992.0), Some(1 << 53));
        assert_eq!(exact_integer(1.8e19), None, "past 2^53");
        assert_eq!(exact_integer(f64::NAN), None);
        assert_eq!(exact_integer(f64::INFINITY), None);
        for i in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(i)), i);
        }
        assert_eq!((zigzag(-1), zigzag(1)), (1, 2));
    }
}
