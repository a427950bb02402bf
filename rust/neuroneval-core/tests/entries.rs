//! Counting and placing entries into compressed columns against slow definitions written here:
//! a stable sort of the entries by column, a scan for the first bad entry in the stated order.

use neuroneval_core::entries::{count_entries, place_entries, unordered_columns, BadEntry};
use proptest::prelude::*;

/// One entry: (sequence, position, column, value).
type Entry = (u16, u16, u16, f32);

/// Entries of a `sequences x ctx` by `columns` cache.
fn entries(
    sequences: u16,
    ctx: u16,
    columns: u16,
) -> impl Strategy<Value = Vec<(u16, u16, u16, f32)>> {
    prop::collection::vec((0..sequences, 0..ctx, 0..columns, -4.0f32..4.0), 0..300)
}

fn flat(entries: &[(u16, u16, u16, f32)]) -> (Vec<u16>, Vec<f32>) {
    let locations = entries.iter().flat_map(|&(s, p, c, _)| [s, p, c]).collect();
    (locations, entries.iter().map(|e| e.3).collect())
}

proptest! {
    #[test]
    fn count_then_place_is_a_stable_sort_by_column(
        data in entries(7, 5, 9),
        chunk in 1usize..64,
    ) {
        let (ctx, columns) = (5u64, 9usize);
        let mut counts = vec![0i64; columns];
        for part in data.chunks(chunk) {
            let (l, v) = flat(part);
            prop_assert_eq!(count_entries(&l, &v, [7, ctx, columns as u64], &mut counts).unwrap(), None);
        }
        let mut indptr = vec![0i64];
        for c in &counts {
            indptr.push(indptr[indptr.len() - 1] + c);
        }
        let n = data.len();
        let (mut indices, mut values) = (vec![-1i64; n], vec![f32::NAN; n]);
        let mut cursor = indptr[..columns].to_vec();
        for part in data.chunks(chunk) {
            let (l, v) = flat(part);
            place_entries(&l, &v, ctx, &mut cursor, &indptr[1..], &mut indices, &mut values).unwrap();
        }
        prop_assert_eq!(&cursor[..], &indptr[1..]);
        // the definition: entries sorted by column, file order kept within one
        let mut sorted: Vec<(usize, &Entry)> = data.iter().enumerate().collect();
        sorted.sort_by_key(|&(i, e)| (e.2, i));
        let rows: Vec<i64> = sorted.iter().map(|(_, e)| e.0 as i64 * ctx as i64 + e.1 as i64).collect();
        let vals: Vec<f32> = sorted.iter().map(|(_, e)| e.3).collect();
        prop_assert_eq!(indices, rows);
        prop_assert_eq!(values, vals);
        for (c, &n) in counts.iter().enumerate() {
            prop_assert_eq!(n as usize, data.iter().filter(|e| e.2 as usize == c).count());
        }
    }

    #[test]
    fn the_first_bad_entry_is_reported_in_the_stated_order(
        data in entries(9, 9, 9),
        nan_at in prop::option::of(0usize..300),
    ) {
        let limits = [6u64, 7, 8];
        let (l, mut v) = flat(&data);
        if let Some(i) = nan_at.filter(|&i| i < v.len()) {
            v[i] = f32::INFINITY;
        }
        let mut counts = vec![5i64; 8];
        let found = count_entries(&l, &v, limits, &mut counts).unwrap();
        let expected = (0..3)
            .find_map(|field| {
                data.iter().position(|e| [e.0, e.1, e.2][field] as u64 >= limits[field]).map(|index| {
                    BadEntry::OutOfRange { index, field, value: [data[index].0, data[index].1, data[index].2][field] as i128 }
                })
            })
            .or_else(|| v.iter().position(|x| !x.is_finite()).map(|index| BadEntry::NonFinite { index, value: f64::INFINITY }));
        if expected.is_some() {
            prop_assert_eq!(&counts, &vec![5i64; 8]);  // a bad chunk counts nothing
        }
        prop_assert_eq!(found, expected);
    }

    #[test]
    fn unordered_columns_are_those_not_strictly_increasing(
        columns in prop::collection::vec(prop::collection::vec(0i64..6, 0..6), 1..12),
    ) {
        let mut indptr = vec![0i64];
        let mut indices = vec![];
        for c in &columns {
            indices.extend_from_slice(c);
            indptr.push(indices.len() as i64);
        }
        let slow: Vec<usize> = (0..columns.len())
            .filter(|&c| (1..columns[c].len()).any(|j| columns[c][j] <= columns[c][j - 1]))
            .collect();
        prop_assert_eq!(unordered_columns(&indptr, &indices, 0..columns.len()).unwrap(), slow.clone());
        let tail: Vec<usize> = slow.into_iter().filter(|&c| c >= 1).collect();
        prop_assert_eq!(unordered_columns(&indptr, &indices, 1..columns.len()).unwrap(), tail);
    }
}

#[test]
fn signed_and_wide_locations_are_checked_without_wrapping() {
    let mut counts = vec![0i64; 4];
    let found = count_entries(&[0i64, -1, 2], &[1.0f64], [3, 3, 4], &mut counts).unwrap();
    assert_eq!(
        found,
        Some(BadEntry::OutOfRange {
            index: 0,
            field: 1,
            value: -1
        })
    );
    let found = count_entries(&[u64::MAX, 0, 2], &[1.0f64], [3, 3, 4], &mut counts).unwrap();
    assert_eq!(
        found,
        Some(BadEntry::OutOfRange {
            index: 0,
            field: 0,
            value: u64::MAX as i128
        })
    );
    assert_eq!(counts, vec![0; 4]);
}

#[test]
fn a_chunk_that_no_longer_fits_writes_nothing() {
    // two entries of column 0 where one was counted
    let (mut indices, mut values) = (vec![-1i64; 2], vec![0.0f32; 2]);
    let mut cursor = vec![0i64, 1];
    let err = place_entries(
        &[0u16, 0, 0, 0, 1, 0],
        &[1.0f32, 2.0],
        4,
        &mut cursor,
        &[1, 2],
        &mut indices,
        &mut values,
    );
    assert!(err
        .unwrap_err()
        .to_string()
        .contains("column 0's 2 entries"));
    assert_eq!(
        (indices, values, cursor),
        (vec![-1, -1], vec![0.0, 0.0], vec![0, 1])
    );
    // a location past the context is refused, not wrapped into another row
    let mut cursor = vec![0i64, 1];
    let mut indices = vec![-1i64; 2];
    let err = place_entries(
        &[0u16, 4, 0],
        &[1.0f32],
        4,
        &mut cursor,
        &[1, 2],
        &mut indices,
        &mut [0.0f32; 2],
    );
    assert!(err.unwrap_err().to_string().contains("entry 0"));
}

#[test]
fn lengths_that_disagree_are_shape_errors() {
    let mut counts = vec![0i64; 3];
    let wrong_counts = count_entries(&[0u8, 0, 0], &[1.0f32], [1, 1, 4], &mut counts);
    assert!(wrong_counts
        .unwrap_err()
        .to_string()
        .contains("3 counts for 4 columns"));
    let wrong_locations = count_entries(&[0u8, 0], &[1.0f32], [1, 1, 3], &mut counts);
    assert!(wrong_locations.unwrap_err().to_string().contains("[n, 3]"));
}
