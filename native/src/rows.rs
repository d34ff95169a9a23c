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

    /// The caller's number of this layout (`from_code`'s).
    pub fn code(self) -> i64 {
        match self {
            Layout::Bool => 0,
            Layout::Fixed(w) => w as i64,
            Layout::Int => -1,
            Layout::Long => -2,
            Layout::LongNanos => -3,
            Layout::Bytes => -4,
            Layout::Utf8 => -5,
        }
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
    /// The bytes' high bits ORed together, as they were appended: none set, they are ASCII.
    high: u64,
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

/// What a decode reads of each row and keeps: `skip` bytes first (a KV value's schema id, which
/// must be `schema_id` when `skip` is 2), then the null bits of `fields` fields, then fields
/// `0..layouts.len()` laid out as `layouts`; the columns of the fields `wanted`, in field order.
pub struct Plan {
    skip: usize,
    schema_id: i16,
    fields: usize,
    layouts: Vec<Layout>,
    wanted: Vec<bool>,
}

impl Plan {
    pub fn new(skip: usize, schema_id: i16, fields: usize, layouts: Vec<Layout>,
               wanted: Vec<bool>) -> Result<Plan> {
        if layouts.len() != wanted.len() || layouts.len() > fields || !(skip == 0 || skip == 2) {
            return Err(Error("rows: mismatched arguments".into()));
        }
        Ok(Plan { skip, schema_id, fields, layouts, wanted })
    }

    /// The schema id, layout codes and wanted fields it was made of.
    pub fn parts(&self) -> (i16, Vec<i64>, Vec<bool>) {
        (self.schema_id, self.layouts.iter().map(|l| l.code()).collect(), self.wanted.clone())
    }

    /// The rows `data[starts[r]..ends[r]]` decoded; on two threads when it may use two
    /// (`threads`) and they are many, each taking half of them, the halves' buffers joined
    /// after (one copy of each column, a fraction of decoding it).
    pub fn decode(&self, data: &[u8], starts: &[i64], ends: &[i64], threads: usize)
                  -> Result<Vec<Column>> {
        let n = starts.len();
        if threads < 2 || n < PARALLEL_ROWS || ends.len() != n {
            return decode_into(self, data, starts, ends, (0, 0));
        }
        // A multiple of 8 rows first, so that the halves' bitmaps join byte by byte.
        let half = n / 2 / 8 * 8;
        // The first half's buffers are sized for all rows: the second's are appended to them.
        let later: u64 = starts[half..].iter().zip(&ends[half..])
            .map(|(&s, &e)| e.saturating_sub(s).max(0) as u64).sum();
        let (first, second) = std::thread::scope(|scope| {
            let other = scope.spawn(|| decode_into(self, data, &starts[half..], &ends[half..],
                                                   (0, 0)));
            let mine = decode_into(self, data, &starts[..half], &ends[..half],
                                   (n - half, later));
            (mine, other.join().expect("a decoding thread panicked"))
        });
        let kinds = self.layouts.iter().zip(&self.wanted).filter(|(_, w)| **w).map(|(l, _)| *l);
        first?.into_iter().zip(second?).zip(kinds)
            .map(|((a, b), layout)| join(a, b, layout, half, n - half)).collect()
    }
}

/// `Plan::decode` on this thread, its buffers sized for `room` more (rows, bytes) than its own
/// rows need: rows that the caller appends after them.
fn decode_into(plan: &Plan, data: &[u8], starts: &[i64], ends: &[i64], room: (usize, u64))
               -> Result<Vec<Column>> {
    let rows = Checked::new(data, starts, ends)?;
    // The bytes of all rows bound any one column's bytes.
    let mut decoder = Decoder::new(plan, starts.len() + room.0,
                                   usize::try_from(rows.span + room.1).unwrap_or(usize::MAX));
    decoder.add(&rows)?;
    decoder.finish()
}

/// Rows `data[starts[r]..ends[r]]`, each checked to lie inside `data`, and their bytes.
struct Checked<'a> {
    data: &'a [u8],
    starts: &'a [i64],
    ends: &'a [i64],
    span: u64,
}

impl<'a> Checked<'a> {
    fn new(data: &'a [u8], starts: &'a [i64], ends: &'a [i64]) -> Result<Checked<'a>> {
        if ends.len() != starts.len() {
            return Err(Error("rows: mismatched arguments".into()));
        }
        let mut span: u64 = 0;
        for (&start, &end) in starts.iter().zip(ends) {
            if start < 0 || end < start || end as u64 > data.len() as u64 {
                return Err(Error("rows: a row lies outside its buffer".into()));
            }
            span += (end - start) as u64;
        }
        Ok(Checked { data, starts, ends, span })
    }
}

/// Rows decoded by a plan, a batch of them at a time (`add`), into columns that grow.
struct Decoder<'p> {
    plan: &'p Plan,
    columns: Vec<Option<Column>>,
    /// Rows decoded so far.
    rows: usize,
    /// The null bits of the decoded fields: a chunk whose rows have none of them set checks no
    /// field's.
    mask: Vec<u8>,
}

impl<'p> Decoder<'p> {
    /// A decoder whose buffers have room for `rows` rows of `bytes` bytes in all.
    fn new(plan: &'p Plan, rows: usize, bytes: usize) -> Decoder<'p> {
        let columns = plan.layouts.iter().zip(&plan.wanted).map(|(layout, &want)| {
            want.then(|| {
                let first = match layout {
                    Layout::Bool => memory::take(rows.div_ceil(8)),
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
                    Layout::Bytes | Layout::Utf8 => memory::take(bytes),
                    _ => Vec::new(),
                };
                Column { nulls: 0, validity: None, first, second, high: 0 }
            })
        }).collect();
        let mut mask = vec![0u8; plan.fields.div_ceil(8)];
        for i in 0..plan.layouts.len() {
            mask[i >> 3] |= 1 << (i & 7);
        }
        Decoder { plan, columns, rows: 0, mask }
    }

    /// Decode `checked`'s rows after those before. After an error the decoder is not used
    /// again.
    fn add(&mut self, checked: &Checked) -> Result<()> {
        let Checked { data, starts, ends, .. } = *checked;
        let Plan { skip, schema_id, ref layouts, .. } = *self.plan;
        let header = self.plan.fields.div_ceil(8);
        let n = starts.len();
        // The bitmaps cover the new rows: valid, and false.
        let bytes = (self.rows + n).div_ceil(8);
        let rows = Rows { data, starts, ends, skip, base: self.rows, bits: bytes };
        for (c, layout) in self.columns.iter_mut().zip(layouts) {
            let Some(c) = c else { continue };
            if let Some(validity) = &mut c.validity {
                validity.resize(bytes, 0xFF);
            }
            if *layout == Layout::Bool {
                c.first.resize(bytes, 0);
            }
        }
        let mut at = [0usize; CHUNK];
        for r0 in (0..n).step_by(CHUNK) {
            let at = &mut at[..CHUNK.min(n - r0)];
            let mut nulls = false;
            for (k, pos) in at.iter_mut().enumerate() {
                let row = rows.row(r0 + k);
                if row.len() < skip + header {
                    return truncated(self.rows + r0 + k);
                }
                if skip == 2 && i16::from_le_bytes([row[0], row[1]]) != schema_id {
                    return Err(Error(format!("row {}: another schema id", self.rows + r0 + k)));
                }
                nulls |= row[skip..skip + header].iter().zip(&self.mask).any(|(b, m)| b & m != 0);
                *pos = skip + header;
            }
            for (i, (&layout, column)) in layouts.iter().zip(self.columns.iter_mut()).enumerate() {
                let column = column.as_mut();
                if nulls {
                    field::<true>(&rows, r0, at, i, layout, column)?;
                } else {
                    field::<false>(&rows, r0, at, i, layout, column)?;
                }
            }
        }
        self.rows += n;
        Ok(())
    }

    /// The columns of the fields wanted, in field order; an error if a string is not UTF-8.
    fn finish(self) -> Result<Vec<Column>> {
        let n = self.rows;
        let layouts = self.plan.layouts.iter().zip(&self.plan.wanted).filter(|(_, &w)| w);
        let columns: Vec<Column> = self.columns.into_iter().flatten().collect();
        columns.into_iter().zip(layouts).map(|(mut c, (layout, _))| {
            if *layout == Layout::Utf8 && !utf8(&c) {
                return Err(Error("a string is not valid UTF-8".into()));
            }
            // The bits past the last row are clear.
            if let (Some(validity), true) = (&mut c.validity, !n.is_multiple_of(8)) {
                validity[n / 8] &= (1u8 << (n % 8)) - 1;
            }
            Ok(c)
        }).collect()
    }
}

/// Rows are decoded a field at a time, this many rows at once: each field's loop knows its
/// layout (no dispatch on it per value, which cost a mispredicted jump a field) and walks rows
/// the loop before brought into the cache.
const CHUNK: usize = 256;

/// The rows being decoded: row `r` is `data[starts[r]..ends[r]]`, its null bits at `skip`;
/// its columns' row `base + r`, of bitmaps of `bits` bytes.
struct Rows<'a> {
    data: &'a [u8],
    starts: &'a [i64],
    ends: &'a [i64],
    skip: usize,
    base: usize,
    bits: usize,
}

impl Rows<'_> {
    #[inline(always)]
    fn row(&self, r: usize) -> &[u8] {
        let (start, end) = (self.starts[r] as usize, self.ends[r] as usize);
        // SAFETY: `Checked::new` checked every row to lie inside `data`, starting before it
        // ends (checking each field's slice again cost 4% of the decode).
        unsafe { self.data.get_unchecked(start..end) }
    }
}

/// Field `i` (of `layout`) of rows `r0..r0 + at.len()`, each read from `at[k]` (its row's
/// offset, moved past the field); into `column` when it is wanted. `NULLS`: some row of
/// these may have the field null.
fn field<const NULLS: bool>(rows: &Rows, r0: usize, at: &mut [usize], i: usize, layout: Layout,
                            column: Option<&mut Column>) -> Result<()> {
    match layout {
        Layout::Bool => each::<NULLS, _>(rows, r0, at, i, layout, column, |c, r, row, pos| {
            let Some(&b) = row.get(*pos) else { return truncated(r) };
            if let Some(c) = c {
                if b != 0 {
                    c.first[r >> 3] |= 1 << (r & 7);
                }
            }
            *pos += 1;
            Ok(())
        }),
        Layout::Fixed(1) => fixed::<NULLS, 1>(rows, r0, at, i, layout, column),
        Layout::Fixed(2) => fixed::<NULLS, 2>(rows, r0, at, i, layout, column),
        Layout::Fixed(4) => fixed::<NULLS, 4>(rows, r0, at, i, layout, column),
        Layout::Fixed(_) => fixed::<NULLS, 8>(rows, r0, at, i, layout, column),
        Layout::Int => each::<NULLS, _>(rows, r0, at, i, layout, column, |c, r, row, pos| {
            let v = varint(row, pos, 5, r)? as u32;
            if let Some(c) = c {
                c.first.extend_from_slice(&v.to_le_bytes());
            }
            Ok(())
        }),
        Layout::Long => each::<NULLS, _>(rows, r0, at, i, layout, column, |c, r, row, pos| {
            let v = varint(row, pos, 10, r)?;
            if let Some(c) = c {
                c.first.extend_from_slice(&v.to_le_bytes());
            }
            Ok(())
        }),
        Layout::LongNanos => each::<NULLS, _>(rows, r0, at, i, layout, column, |c, r, row, pos| {
            let v = varint(row, pos, 10, r)?;
            let nanos = varint(row, pos, 5, r)? as u32 as i32;
            if !(0..1_000_000).contains(&nanos) {
                return Err(Error(format!("compacted row {r}: nanos of millisecond out of \
                                          range")));
            }
            if let Some(c) = c {
                c.first.extend_from_slice(&v.to_le_bytes());
                c.second.extend_from_slice(&nanos.to_le_bytes());
            }
            Ok(())
        }),
        Layout::Bytes | Layout::Utf8 => each::<NULLS, _>(rows, r0, at, i, layout, column,
                                                          |c, r, row, pos| {
            let length = varint(row, pos, 5, r)? as u32 as i32;
            let Some(bytes) = usize::try_from(length).ok()
                .and_then(|length| row.get(*pos..*pos + length)) else {
                return truncated(r);
            };
            *pos += bytes.len();
            if let Some(c) = c {
                c.high |= memory::append(&mut c.second, bytes);
                let offset = i32::try_from(c.second.len()).map_err(|_| {
                    Error("rows: a column's bytes pass 2 GiB".into())
                })?;
                c.first.extend_from_slice(&offset.to_le_bytes());
            }
            Ok(())
        }),
    }
}

/// A field of `W` bytes copied as it is.
fn fixed<const NULLS: bool, const W: usize>(rows: &Rows, r0: usize, at: &mut [usize], i: usize,
                                            layout: Layout, column: Option<&mut Column>)
                                            -> Result<()> {
    each::<NULLS, _>(rows, r0, at, i, layout, column, |c, r, row, pos| {
        let Some(bytes) = row.get(*pos..*pos + W) else { return truncated(r) };
        if let Some(c) = c {
            // A constant size: a move, not a call to copy `W` bytes.
            c.first.extend_from_slice(&<[u8; W]>::try_from(bytes).expect("W bytes"));
        }
        *pos += W;
        Ok(())
    })
}

/// `value(column, the row's number in the columns, row, offset)` for each row whose field `i`
/// is not null; a null one gets a null value.
#[inline(always)]
fn each<const NULLS: bool, F>(rows: &Rows, r0: usize, at: &mut [usize], i: usize, layout: Layout,
                              mut column: Option<&mut Column>, mut value: F) -> Result<()>
where
    F: FnMut(Option<&mut Column>, usize, &[u8], &mut usize) -> Result<()>,
{
    let (byte, bit) = (rows.skip + (i >> 3), 1u8 << (i & 7));
    for (k, pos) in at.iter_mut().enumerate() {
        let row = rows.row(r0 + k);
        let r = rows.base + r0 + k;
        // Inside the row: its header was checked to fit.
        if NULLS && row[byte] & bit != 0 {
            if let Some(c) = column.as_deref_mut() {
                null_value(c, layout, r, rows.bits);
            }
            continue;
        }
        value(column.as_deref_mut(), r, row, pos)?;
    }
    Ok(())
}

/// Whether every string of a column is UTF-8: its bytes all together are, and no string starts
/// inside a character (one pass over the bytes, not a call per string).
fn utf8(c: &Column) -> bool {
    // Bytes all ASCII (the usual strings) are UTF-8 and start a character each: known from
    // their high bits, gathered as they were copied (a pass over them took a tenth of the
    // decode of short strings).
    if c.high & 0x8080_8080_8080_8080 == 0 {
        return true;
    }
    if std::str::from_utf8(&c.second).is_err() {
        return false;
    }
    c.first.chunks_exact(4).all(|o| {
        let at = i32::from_le_bytes([o[0], o[1], o[2], o[3]]) as usize;
        at >= c.second.len() || (c.second[at] as i8) >= -0x40
    })
}

/// Row `r` of column `c` is null: a zero value (or an empty range) and a clear validity bit
/// (in a bitmap of `bits` bytes, made at the column's first null).
fn null_value(c: &mut Column, layout: Layout, r: usize, bits: usize) {
    // Every row is valid until it is found null: a valid value sets no bit.
    let validity = c.validity.get_or_insert_with(|| vec![0xFFu8; bits]);
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
    Ok(Column { nulls: a.nulls + b.nulls, validity, first: a.first, second: a.second,
                high: a.high | b.high })
}
