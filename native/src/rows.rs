//! Apache Fluss compacted rows decoded into Arrow buffers, every row once, every field of it.
//!
//! The same reading as `fluss_spark/protocol/apache_fluss/compacted_row.py`, which stays the
//! reference and builds the Arrow arrays from what this returns: a row is its null bits, then
//! each non-null field in order, a fixed width, a varint or a varint length and that many bytes.
//! Any read past a row's end, or a value that does not fit its type, is an `Error`; the caller
//! then decodes the rows the numpy way, which names the row and the column.

use crate::memory;

pub struct Error(pub String);

type Result<T> = std::result::Result<T, Error>;

/// How a field is laid out, as the caller numbers it.
#[derive(Clone, Copy, PartialEq)]
pub enum Layout {
    /// One byte, 0 or not: an Arrow bitmap.
    Bool,
    /// 1, 2, 4 or 8 bytes copied as they are (little-endian numbers).
    Fixed(usize),
    /// A varint of at most 5 bytes, as a Java int (int32 out).
    Int,
    /// A varint of at most 10 bytes, as a Java long (int64 out).
    Long,
    /// A long (milliseconds), then an int of nanoseconds of the millisecond in [0, 10^6).
    LongNanos,
    /// A varint length, then that many bytes (int32 offsets and the bytes out).
    Bytes,
    /// The same bytes, checked to be UTF-8.
    Utf8,
}

impl Layout {
    pub fn from_code(code: i64) -> Option<Layout> {
        Some(match code {
            0 => Layout::Bool,
            1 | 2 | 4 | 8 => Layout::Fixed(code as usize),
            -1 => Layout::Int,
            -2 => Layout::Long,
            -3 => Layout::LongNanos,
            -4 => Layout::Bytes,
            -5 => Layout::Utf8,
            _ => return None,
        })
    }
}

/// One decoded column: its validity bitmap (None when no row is null) and its buffers.
pub struct Column {
    pub nulls: usize,
    pub validity: Option<Vec<u8>>,
    /// Values (fixed widths, ints, longs, bits) or int32 offsets (bytes).
    pub first: Vec<u8>,
    /// Nanoseconds (int32 each) or the bytes of a bytes column.
    pub second: Vec<u8>,
}

fn truncated<T>(row: usize) -> Result<T> {
    Err(Error(format!("compacted row {row}: truncated")))
}

/// The varint at `row[*pos..]`, of at most `most` (5 or more) bytes; one byte takes one
/// branch, two or three (a key up to two million, a string's length past 127) a few more.
#[inline(always)]
fn varint(row: &[u8], pos: &mut usize, most: u32, r: usize) -> Result<u64> {
    let p = *pos;
    if let Some(&b) = row.get(p) {
        if b < 0x80 {
            *pos = p + 1;
            return Ok(b as u64);
        }
    }
    if let Some(&[b0, b1, b2]) = row.get(p..p + 3) {
        let low = (b0 & 0x7F) as u64 | ((b1 & 0x7F) as u64) << 7;
        if b1 < 0x80 {
            *pos = p + 2;
            return Ok(low);
        }
        if b2 < 0x80 {
            *pos = p + 3;
            return Ok(low | (b2 as u64) << 14);
        }
    }
    long_varint(row, pos, most, r)
}

fn long_varint(row: &[u8], pos: &mut usize, most: u32, r: usize) -> Result<u64> {
    let mut value: u64 = 0;
    for i in 0..most {
        let Some(&b) = row.get(*pos) else { return truncated(r) };
        *pos += 1;
        // Bits past the type's width are dropped, as a Java int or long drops them.
        value |= ((b & 0x7F) as u64) << (7 * i);
        if b < 0x80 {
            return Ok(value);
        }
    }
    Err(Error(format!("compacted row {r}: varint longer than {most} bytes")))
}

/// Decode fields `0..layouts.len()` of the rows `data[starts[r]..ends[r]]`, each starting with
/// `skip` bytes (a KV value's schema id, which must be `schema_id` when `skip` is 2) and then
/// the null bits of `fields` fields; the columns of the fields `wanted`, in field order.
#[allow(clippy::too_many_arguments)]
pub fn decode(data: &[u8], starts: &[i64], ends: &[i64], skip: usize, schema_id: i16,
              fields: usize, layouts: &[Layout], wanted: &[bool]) -> Result<Vec<Column>> {
    decode_into(data, starts, ends, skip, schema_id, fields, layouts, wanted, (0, 0))
}

/// `decode`, its buffers sized for `room` more (rows, bytes) than its own rows need: rows
/// that the caller appends after them.
#[allow(clippy::too_many_arguments)]
fn decode_into(data: &[u8], starts: &[i64], ends: &[i64], skip: usize, schema_id: i16,
               fields: usize, layouts: &[Layout], wanted: &[bool], room: (usize, u64))
               -> Result<Vec<Column>> {
    let n = starts.len();
    if ends.len() != n || layouts.len() != wanted.len() || layouts.len() > fields
        || !(skip == 0 || skip == 2) {
        return Err(Error("rows: mismatched arguments".into()));
    }
    // The bytes of all rows bound any one column's bytes.
    let mut span: u64 = 0;
    for (&start, &end) in starts.iter().zip(ends) {
        if start < 0 || end < start || end as u64 > data.len() as u64 {
            return Err(Error("rows: a row lies outside its buffer".into()));
        }
        span += (end - start) as u64;
    }
    let (rows, span) = (n + room.0, span + room.1);
    let header = fields.div_ceil(8);
    let mut columns: Vec<Option<Column>> = layouts.iter().zip(wanted).map(|(layout, &want)| {
        want.then(|| {
            let first = match layout {
                Layout::Bool => {
                    let mut bits = memory::take(rows.div_ceil(8));
                    bits.resize(n.div_ceil(8), 0);
                    bits
                }
                Layout::Fixed(w) => memory::take(rows * w),
                Layout::Int => memory::take(rows * 4),
                Layout::Long | Layout::LongNanos => memory::take(rows * 8),
                Layout::Bytes | Layout::Utf8 => {
                    let mut offsets = memory::take((rows + 1) * 4);
                    offsets.extend_from_slice(&0i32.to_le_bytes());
                    offsets
                }
            };
            let second = match layout {
                Layout::LongNanos => memory::take(rows * 4),
                Layout::Bytes | Layout::Utf8 => memory::take(span as usize),
                _ => Vec::new(),
            };
            Column { nulls: 0, validity: None, first, second }
        })
    }).collect();
    // The null bits of the decoded fields: a row with none of them set checks no field's.
    let mut mask = vec![0u8; header];
    for i in 0..layouts.len() {
        mask[i >> 3] |= 1 << (i & 7);
    }
    let head = skip + header;
    for r in 0..n {
        // Inside `data`: every range was checked above.
        let row = &data[starts[r] as usize..ends[r] as usize];
        if row.len() < head {
            return truncated(r);
        }
        if skip == 2 && i16::from_le_bytes([row[0], row[1]]) != schema_id {
            return Err(Error(format!("row {r}: another schema id")));
        }
        let bits = &row[skip..head];
        let any_null = bits.iter().zip(&mask).any(|(b, m)| b & m != 0);
        let mut pos = head;
        for (i, (layout, column)) in layouts.iter().zip(columns.iter_mut()).enumerate() {
            if any_null && bits[i >> 3] & (1 << (i & 7)) != 0 {
                if let Some(c) = column {
                    null_value(c, *layout, r, n);
                }
                continue;
            }
            match *layout {
                Layout::Bool => {
                    let Some(&b) = row.get(pos) else { return truncated(r) };
                    if let Some(c) = column {
                        if b != 0 {
                            c.first[r >> 3] |= 1 << (r & 7);
                        }
                    }
                    pos += 1;
                }
                Layout::Fixed(w) => {
                    let Some(bytes) = row.get(pos..pos + w) else { return truncated(r) };
                    if let Some(c) = column {
                        // Constant sizes: a move each, not a call to copy `w` bytes.
                        match *bytes {
                            [a] => c.first.push(a),
                            [a, b] => c.first.extend_from_slice(&[a, b]),
                            [a, b, c2, d] => c.first.extend_from_slice(&[a, b, c2, d]),
                            _ => c.first.extend_from_slice(&<[u8; 8]>::try_from(bytes)
                                .expect("8 bytes")),
                        }
                    }
                    pos += w;
                }
                Layout::Int => {
                    let v = varint(row, &mut pos, 5, r)? as u32;
                    if let Some(c) = column {
                        c.first.extend_from_slice(&v.to_le_bytes());
                    }
                }
                Layout::Long | Layout::LongNanos => {
                    let v = varint(row, &mut pos, 10, r)?;
                    if let Some(c) = column {
                        c.first.extend_from_slice(&v.to_le_bytes());
                    }
                    if *layout == Layout::LongNanos {
                        let nanos = varint(row, &mut pos, 5, r)? as u32 as i32;
                        if !(0..1_000_000).contains(&nanos) {
                            return Err(Error(format!("compacted row {r}: nanos of millisecond \
                                                      out of range")));
                        }
                        if let Some(c) = column {
                            c.second.extend_from_slice(&nanos.to_le_bytes());
                        }
                    }
                }
                Layout::Bytes | Layout::Utf8 => {
                    let length = varint(row, &mut pos, 5, r)? as u32 as i32;
                    let Some(bytes) = usize::try_from(length).ok()
                        .and_then(|length| row.get(pos..pos + length)) else {
                        return truncated(r);
                    };
                    pos += bytes.len();
                    if let Some(c) = column {
                        memory::append(&mut c.second, bytes);
                        let offset = i32::try_from(c.second.len()).map_err(|_| {
                            Error("rows: a column's bytes pass 2 GiB".into())
                        })?;
                        c.first.extend_from_slice(&offset.to_le_bytes());
                    }
                }
            }
        }
    }
    let columns: Vec<Column> = columns.into_iter().flatten().collect();
    for (c, layout) in columns.iter().zip(layouts.iter().zip(wanted).filter(|(_, &w)| w)) {
        if *layout.0 == Layout::Utf8 && !utf8(c) {
            return Err(Error("a string is not valid UTF-8".into()));
        }
    }
    Ok(columns)
}

/// Whether every string of a column is UTF-8: its bytes all together are, and no string starts
/// inside a character (one pass over the bytes, not a call per string).
fn utf8(c: &Column) -> bool {
    if std::str::from_utf8(&c.second).is_err() {
        return false;
    }
    c.first.chunks_exact(4).all(|o| {
        let at = i32::from_le_bytes([o[0], o[1], o[2], o[3]]) as usize;
        at >= c.second.len() || (c.second[at] as i8) >= -0x40
    })
}

/// Row `r` of column `c` is null: a zero value (or an empty range) and a clear validity bit.
fn null_value(c: &mut Column, layout: Layout, r: usize, n: usize) {
    let validity = c.validity.get_or_insert_with(|| {
        // Every row is valid until it is found null: a valid value sets no bit.
        let mut bits = vec![0xFFu8; n.div_ceil(8)];
        if !n.is_multiple_of(8) {
            bits[n / 8] = (1u8 << (n % 8)) - 1;
        }
        bits
    });
    validity[r >> 3] &= !(1 << (r & 7));
    c.nulls += 1;
    match layout {
        Layout::Bool => {}
        Layout::Fixed(w) => c.first.resize(c.first.len() + w, 0),
        Layout::Int => c.first.extend_from_slice(&[0; 4]),
        Layout::Long => c.first.extend_from_slice(&[0; 8]),
        Layout::LongNanos => {
            c.first.extend_from_slice(&[0; 8]);
            c.second.extend_from_slice(&[0; 4]);
        }
        Layout::Bytes | Layout::Utf8 => {
            let offset = c.second.len() as i32;
            c.first.extend_from_slice(&offset.to_le_bytes());
        }
    }
}

/// Rows decoded on two threads when there are at least this many and two threads are allowed.
const PARALLEL_ROWS: usize = 1 << 15;

/// `decode` of many rows on two threads when it may use two (`threads`), each taking half of
/// them, the halves' buffers joined after (one copy of each column, a fraction of decoding it).
#[allow(clippy::too_many_arguments)]
pub fn decode_parallel(data: &[u8], starts: &[i64], ends: &[i64], skip: usize, schema_id: i16,
                       fields: usize, layouts: &[Layout], wanted: &[bool], threads: usize)
                       -> Result<Vec<Column>> {
    let n = starts.len();
    let two = threads > 1 && n >= PARALLEL_ROWS && ends.len() == n;
    if !two {
        return decode(data, starts, ends, skip, schema_id, fields, layouts, wanted);
    }
    // A multiple of 8 rows first, so that the halves' bitmaps join byte by byte.
    let half = n / 2 / 8 * 8;
    // The first half's buffers are sized for all rows: the second's are appended to them.
    let later: u64 = starts[half..].iter().zip(&ends[half..])
        .map(|(&s, &e)| e.saturating_sub(s).max(0) as u64).sum();
    let (first, second) = std::thread::scope(|scope| {
        let other = scope.spawn(|| decode(data, &starts[half..], &ends[half..], skip, schema_id,
                                          fields, layouts, wanted));
        let mine = decode_into(data, &starts[..half], &ends[..half], skip, schema_id, fields,
                               layouts, wanted, (n - half, later));
        (mine, other.join().expect("a decoding thread panicked"))
    });
    let kinds = layouts.iter().zip(wanted).filter(|(_, w)| **w).map(|(l, _)| *l);
    first?.into_iter().zip(second?).zip(kinds)
        .map(|((a, b), layout)| join(a, b, layout, half, n - half)).collect()
}

/// Column `a` of `rows_a` rows (a multiple of 8) followed by column `b` of `rows_b` rows.
fn join(mut a: Column, b: Column, layout: Layout, rows_a: usize, rows_b: usize)
        -> Result<Column> {
    let validity = match (a.validity.take(), b.validity) {
        (None, None) => None,
        (va, vb) => {
            let mut bits = va.unwrap_or_else(|| vec![0xFF; rows_a / 8]);
            bits.extend(vb.unwrap_or_else(|| vec![0xFF; rows_b.div_ceil(8)]));
            Some(bits)
        }
    };
    if matches!(layout, Layout::Bytes | Layout::Utf8) {
        let shift = a.second.len();
        if i32::try_from(shift + b.second.len()).is_err() {
            return Err(Error("rows: a column's bytes pass 2 GiB".into()));
        }
        for o in b.first[4..].chunks_exact(4) {
            let at = i32::from_le_bytes([o[0], o[1], o[2], o[3]]) + shift as i32;
            a.first.extend_from_slice(&at.to_le_bytes());
        }
    } else {
        a.first.extend_from_slice(&b.first);
    }
    a.second.extend_from_slice(&b.second);
    Ok(Column { nulls: a.nulls + b.nulls, validity, first: a.first, second: a.second })
}
