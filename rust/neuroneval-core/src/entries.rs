//! Sparse entries given as (sequence, position, column) locations in any order, placed into
//! compressed columns by counting, then placing: each column's entries keep the order they
//! were given in (a stable counting sort by column). This is how the delphi latent cache's
//! reader (`neuroneval.interop.delphi`) builds its CSC source, chunk by chunk, without
//! sorting: one pass counts and checks, one places.
//!
//! A location is three integers of one type, row-major (`[n, 3]`); its row in the matrix is
//! `sequence * ctx_len + position`.

use std::ops::Range;

use crate::error::{CoreError, Result};
use crate::matrix::Element;

/// An integer type locations are stored in (what safetensors files hold).
pub trait Location: Copy + Send + Sync + 'static {
    /// The value, exactly (every stored integer type fits).
    fn value(self) -> i128;
}

macro_rules! location {
    ($($t:ty),*) => {$(
        impl Location for $t {
            #[inline(always)]
            fn value(self) -> i128 {
                self as i128
            }
        }
    )*};
}
location!(u8, u16, u32, u64, i8, i16, i32, i64);

/// The first entry of a chunk that does not fit the matrix.
#[derive(Debug, Clone, PartialEq)]
pub enum BadEntry {
    /// Entry `index` has `value` in location field `field` (0: sequence, 1: position,
    /// 2: column), outside `0..limits[field]`.
    OutOfRange {
        index: usize,
        field: usize,
        value: i128,
    },
    /// Entry `index`'s value is NaN or infinite.
    NonFinite { index: usize, value: f64 },
}

fn check_lengths<L, V>(locations: &[L], values: &[V]) -> Result<()> {
    if locations.len() != 3 * values.len() {
        return Err(CoreError::Shape(format!(
            "locations must be [n, 3] for n = {} values; got {} integers",
            values.len(),
            locations.len()
        )));
    }
    Ok(())
}

/// Adds each column's entries in the chunk to `counts` (one per column, `limits[2]` of
/// them), after checking every location against `limits` (sequences, positions, columns)
/// and every value for finiteness. A bad chunk leaves `counts` as it was and returns the
/// entry to report: the first out of range in field 0, else in field 1, else in field 2,
/// else the first non-finite value (the order the checks are stated in).
pub fn count_entries<L: Location, V: Element>(
    locations: &[L],
    values: &[V],
    limits: [u64; 3],
    counts: &mut [i64],
) -> Result<Option<BadEntry>> {
    check_lengths(locations, values)?;
    if counts.len() as u64 != limits[2] {
        return Err(CoreError::Shape(format!(
            "{} counts for {} columns",
            counts.len(),
            limits[2]
        )));
    }
    let mut first: [Option<usize>; 4] = [None; 4];
    let mut here = vec![0i64; counts.len()];
    for (i, (location, value)) in locations.chunks_exact(3).zip(values).enumerate() {
        let mut fits = true;
        for (field, (&l, &limit)) in location.iter().zip(&limits).enumerate() {
            let v = l.value();
            if v < 0 || v >= limit as i128 {
                fits = false;
                first[field].get_or_insert(i);
            }
        }
        if !value.is_finite() {
            first[3].get_or_insert(i);
        }
        if fits {
            here[location[2].value() as usize] += 1;
        }
    }
    if let Some((field, &Some(index))) = first.iter().enumerate().find(|(_, f)| f.is_some()) {
        return Ok(Some(if field < 3 {
            BadEntry::OutOfRange {
                index,
                field,
                value: locations[3 * index + field].value(),
            }
        } else {
            BadEntry::NonFinite {
                index,
                value: values[index].to_f64(),
            }
        }));
    }
    for (c, h) in counts.iter_mut().zip(here) {
        *c += h;
    }
    Ok(None)
}

/// Places a chunk of entries: entry i goes to `indices[cursor[c]]` (its row) and
/// `out[cursor[c]]` (its value), `c` its column, and `cursor[c]` moves on. `ends[c]` is where
/// column c's range ends; a chunk that would write past it, or outside the arrays (its
/// locations changed since they were counted), is refused before anything is written.
pub fn place_entries<L: Location, V: Copy>(
    locations: &[L],
    values: &[V],
    ctx_len: u64,
    cursor: &mut [i64],
    ends: &[i64],
    indices: &mut [i64],
    out: &mut [V],
) -> Result<()> {
    check_lengths(locations, values)?;
    if ends.len() != cursor.len() || indices.len() != out.len() {
        return Err(CoreError::Shape(format!(
            "{} cursors for {} column ends, {} row slots for {} value slots",
            cursor.len(),
            ends.len(),
            indices.len(),
            out.len()
        )));
    }
    let changed = |what: String| {
        CoreError::Shape(format!(
            "{what} does not fit what was counted (was the file changed while it was read?)"
        ))
    };
    // checked first, so that a bad chunk writes nothing
    let mut need = vec![0i64; cursor.len()];
    for (i, location) in locations.chunks_exact(3).enumerate() {
        let (sequence, position, c) = (
            location[0].value(),
            location[1].value(),
            location[2].value(),
        );
        let row = sequence * ctx_len as i128 + position;
        if c < 0
            || c >= cursor.len() as i128
            || sequence < 0
            || position < 0
            || position >= ctx_len as i128
            || row > i64::MAX as i128
        {
            return Err(changed(format!("entry {i}")));
        }
        need[c as usize] += 1;
    }
    for (c, n) in need.iter().enumerate() {
        let (start, end) = (cursor[c], ends[c]);
        if start < 0 || start + n > end || end as u64 > indices.len() as u64 {
            return Err(changed(format!("column {c}'s {n} entries")));
        }
    }
    for (location, &value) in locations.chunks_exact(3).zip(values) {
        let c = location[2].value() as usize;
        let at = cursor[c] as usize;
        indices[at] = (location[0].value() * ctx_len as i128 + location[1].value()) as i64;
        out[at] = value;
        cursor[c] += 1;
    }
    Ok(())
}

/// The columns among `columns` whose rows (`indices[indptr[c]..indptr[c + 1]]`) do not
/// strictly increase, in ascending order.
pub fn unordered_columns(
    indptr: &[i64],
    indices: &[i64],
    columns: Range<usize>,
) -> Result<Vec<usize>> {
    if columns.end >= indptr.len() {
        return Err(CoreError::Shape(format!(
            "columns {columns:?} with {} column pointers",
            indptr.len()
        )));
    }
    let mut found = Vec::new();
    for c in columns {
        let (a, b) = (indptr[c], indptr[c + 1]);
        if a < 0 || b < a || b as u64 > indices.len() as u64 {
            return Err(CoreError::Shape(format!(
                "column {c} has pointers {a}..{b} outside 0..{}",
                indices.len()
            )));
        }
        if indices[a as usize..b as usize]
            .windows(2)
            .any(|p| p[1] <= p[0])
        {
            found.push(c);
        }
    }
    Ok(found)
}
