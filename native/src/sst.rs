//! The live values of RocksDB block-based table files: blocks verified, decompressed, walked
//! and the files merged, newest version of each key first (on two threads for large reads).
//!
//! The same reading as `fluss_spark/protocol/apache_fluss/rocksdb_sst.py` (`read_tables`, then
//! `live_values`), which stays the reference: that module reads each file's footer, properties
//! and index and hands the data blocks' positions here. Every read is bounds-checked; anything
//! this code does not take is an `Error`, and the caller then reads the files the numpy way,
//! which says precisely what is wrong.

use std::cmp::Ordering;

use crate::memory;

/// Why the files were not read here (the caller falls back to the numpy reader).
pub struct Error(pub String);

type Result<T> = std::result::Result<T, Error>;

fn fail<T>(what: impl Into<String>) -> Result<T> {
    Err(Error(what.into()))
}

/// One SST file: its bytes, its data blocks (offset, size) and its entry count.
pub struct Table<'a> {
    pub file: &'a [u8],
    pub blocks: Vec<(u64, u64)>,
    pub entries: u64,
    /// The footer's checksum type: 0 none, 1 CRC32C (others are not read here).
    pub checksum: u8,
}

/// Each block is followed by its compression type (1 byte) and its checksum (4 bytes).
const BLOCK_TRAILER: usize = 5;
const CRC_MASK_DELTA: u32 = 0xA282_EAD8;
const NO_COMPRESSION: u8 = 0;
const LZ4: u8 = 4;
const LZ4HC: u8 = 5;
/// LZ4 turns one byte into at most 255: a block saying it holds more is refused unread.
const LZ4_MAX_RATIO: u64 = 255;
const DELETION: u8 = 0;
const VALUE: u8 = 1;
const SINGLE_DELETION: u8 = 7;
/// An internal key ends with 8 bytes: sequence number << 8 | value type.
const TRAILER: usize = 8;

fn u32_at(data: &[u8], at: usize) -> Result<u32> {
    match data.get(at..at + 4) {
        Some(b) => Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        None => fail("SST: a block's footer points outside it"),
    }
}

/// A varint of at most 5 bytes before `stop`: (value, end).
#[inline]
fn varint32(data: &[u8], mut pos: usize, stop: usize) -> Result<(u32, usize)> {
    let mut value: u32 = 0;
    for i in 0..5 {
        if pos >= stop {
            break;
        }
        let b = data[pos];
        pos += 1;
        value |= ((b & 0x7F) as u32) << (7 * i);
        if b < 0x80 {
            return Ok((value, pos));
        }
    }
    fail("SST: a varint runs past its block")
}

/// Where a block's contents go in the joined buffer, and how they are stored in the file.
struct Slot {
    /// The table, and the block's bytes in its file (with its trailer, for the checksum).
    table: usize,
    offset: usize,
    size: usize,
    src: usize,
    kind: u8,
    length: usize,
}

/// Check every block's bounds and read its uncompressed size: the slots of the blocks of
/// every file and the joined buffer's size. The size is read before the block's checksum is
/// verified (that is done as it is decompressed, on the threads that do it): a wrong one is
/// bounded by what LZ4 can hold, and then fails the checksum or the decompression.
fn plan(tables: &[Table], max_bytes: u64) -> Result<(Vec<Slot>, u64)> {
    let mut slots = Vec::new();
    let mut total: u64 = 0;
    for (table, t) in tables.iter().enumerate() {
        let file = t.file;
        for &(offset, size) in &t.blocks {
            let end = offset.checked_add(size).and_then(|e| e.checked_add(BLOCK_TRAILER as u64));
            if end.is_none_or(|e| e > file.len() as u64) {
                return fail(format!("SST: a block handle points past the file's end ({} bytes)",
                                    file.len()));
            }
            let (offset, size) = (offset as usize, size as usize);
            let kind = file[offset + size];
            if t.checksum > 1 {
                return fail(format!("SST: block checksum type {} is not read here", t.checksum));
            }
            let (src, length) = match kind {
                NO_COMPRESSION => (offset, size),
                LZ4 | LZ4HC => {
                    let (n, start) = varint32(file, offset, offset + size)?;
                    let packed = (offset + size - start) as u64;
                    if n as u64 > packed * LZ4_MAX_RATIO + 16 {
                        return fail(format!("SST: a block of {packed} compressed bytes says it \
                                             holds {n}"));
                    }
                    (start, n as usize)
                }
                other => return fail(format!("SST: compression type {other} is not read here")),
            };
            total += length as u64;
            if total > max_bytes {
                return fail(format!("SST: the blocks hold more than {max_bytes} bytes"));
            }
            slots.push(Slot { table, offset, size, src, kind, length });
        }
    }
    Ok((slots, total))
}

/// Verify and decompress (or copy) the blocks of `slots` into `out`, one after another.
fn join(tables: &[Table], slots: &[Slot], out: &mut [u8]) -> Result<()> {
    let mut at = 0;
    for s in slots {
        let file = tables[s.table].file;
        if tables[s.table].checksum == 1 {
            let crc = crc32c::crc32c(&file[s.offset..s.offset + s.size + 1]);
            let masked = crc.rotate_right(15).wrapping_add(CRC_MASK_DELTA);
            if masked != u32_at(file, s.offset + s.size + 1)? {
                return fail(format!("SST: the block at byte {} does not match its checksum",
                                    s.offset));
            }
        }
        let src = &file[s.src..s.offset + s.size];
        let dst = &mut out[at..at + s.length];
        if s.kind == NO_COMPRESSION {
            dst.copy_from_slice(src);
        } else {
            match lz4_flex::block::decompress_into(src, dst) {
                Ok(n) if n == s.length => {}
                _ => return fail("SST: a compressed data block does not decompress"),
            }
        }
        at += s.length;
    }
    Ok(())
}

/// One file's entries, one at a time, in its order: the current entry's user key, sequence
/// number, value type and value range in the joined buffer.
struct Cursor<'a> {
    buffer: &'a [u8],
    /// The file's blocks in the joined buffer: (base, size), and the next one to read.
    blocks: Vec<(usize, usize)>,
    next_block: usize,
    /// Where the block being read starts, its entries end, its restart array starts and how
    /// many restart points it has and were passed.
    base: usize,
    pos: usize,
    data_end: usize,
    restarts: usize,
    next_restart: usize,
    /// The current internal key (user key, then the 8-byte trailer).
    key: Vec<u8>,
    /// The current user key's first 8 bytes, big-endian and zero-padded: one comparison
    /// orders most keys (the whole keys settle ties).
    prefix: u64,
    sequence: u64,
    kind: u8,
    begin: usize,
    end: usize,
    /// Entries walked (the order check starts at the second), and those inside the range.
    entries: u64,
    counted: u64,
    /// The user keys this cursor yields: at or after `from`, before `until`.
    from: Option<Bound>,
    until: Option<Bound>,
}

/// A user key that bounds a cursor's range, with its prefix.
#[derive(Clone)]
struct Bound {
    prefix: u64,
    key: Vec<u8>,
}

#[inline]
fn prefix_of(key: &[u8]) -> u64 {
    // A load, not a copy, for the keys of eight bytes or more.
    if let Some(head) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*head);
    }
    let mut prefix = [0u8; 8];
    let head = key.len().min(8);
    prefix[..head].copy_from_slice(&key[..head]);
    u64::from_be_bytes(prefix)
}

impl<'a> Cursor<'a> {
    fn new(buffer: &'a [u8], blocks: Vec<(usize, usize)>, from: Option<Bound>,
           until: Option<Bound>) -> Cursor<'a> {
        Cursor { buffer, blocks, next_block: 0, base: 0, pos: 0, data_end: 0, restarts: 0,
                 next_restart: 0, key: Vec::new(), prefix: 0, sequence: 0, kind: 0, begin: 0,
                 end: 0, entries: 0, counted: 0, from, until }
    }

    /// The current user key against `bound`.
    fn against(&self, bound: &Bound) -> Ordering {
        self.prefix.cmp(&bound.prefix).then_with(|| self.user_key().cmp(&bound.key))
    }

    /// Move to the next entry in the range: false past the range's (or the file's) end.
    fn advance(&mut self) -> Result<bool> {
        loop {
            if !self.step()? {
                return Ok(false);
            }
            if self.from.as_ref().is_some_and(|b| self.against(b) == Ordering::Less) {
                continue;
            }
            if self.until.as_ref().is_some_and(|b| self.against(b) != Ordering::Less) {
                return Ok(false);
            }
            self.counted += 1;
            return Ok(true);
        }
    }

    fn user_key(&self) -> &[u8] {
        &self.key[..self.key.len() - TRAILER]
    }

    fn user_len(&self) -> usize {
        self.key.len() - TRAILER
    }

    /// Whether the current user key is the one of `len` bytes whose prefix is `prefix`: `key`
    /// holds its bytes when it is longer than its prefix.
    #[inline]
    fn is(&self, prefix: u64, len: usize, key: &[u8]) -> bool {
        // Keys of up to 8 bytes are all in their prefix: equal prefixes leave their lengths.
        self.prefix == prefix && self.user_len() == len && (len <= 8 || self.user_key() == key)
    }

    fn cmp(&self, other: &Cursor) -> Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| {
            if self.user_len() <= 8 && other.user_len() <= 8 {
                self.user_len().cmp(&other.user_len())
            } else {
                self.user_key().cmp(other.user_key())
            }
        })
    }

    /// Start the next block: false when the file has no more.
    fn open_block(&mut self) -> Result<bool> {
        let Some(&(base, size)) = self.blocks.get(self.next_block) else { return Ok(false) };
        self.next_block += 1;
        let block = &self.buffer[base..base + size];
        if size < 4 {
            return fail("SST: a block is shorter than its footer");
        }
        let footer = u32_at(block, size - 4)?;
        if footer >> 31 != 0 {
            return fail("SST: blocks with a hash index are not read here");
        }
        let restarts = footer as usize;
        if restarts < 1 || 4 * restarts + 4 > size {
            return fail("SST: a block's restart count does not fit it");
        }
        (self.base, self.pos, self.data_end) = (base, 0, size - 4 - 4 * restarts);
        (self.restarts, self.next_restart) = (restarts, 0);
        Ok(true)
    }

    /// Move to the next entry: false past the file's last. A block's restart points must be
    /// the entries that share no key bytes, in order, the first at its start.
    fn step(&mut self) -> Result<bool> {
        while self.pos >= self.data_end {
            if self.next_block > 0 && self.next_restart != self.restarts {
                return fail("SST: a block's restart points are out of order");
            }
            if !self.open_block()? {
                return Ok(false);
            }
        }
        let block = &self.buffer[self.base..self.base + self.data_end + 4 * self.restarts];
        let (pos, data_end) = (self.pos, self.data_end);
        let restart = self.next_restart < self.restarts
            && u32_at(block, data_end + 4 * self.next_restart)? as usize == pos;
        if restart {
            self.next_restart += 1;
        } else if pos == 0 {
            return fail("SST: a block's first entry is not a restart point");
        }
        // Entries of short keys and values hold three one-byte varints: read them at once.
        let (shared, unshared, length, p) = match block[..data_end].get(pos..pos + 3) {
            Some(&[a, b, c]) if (a | b | c) < 0x80 => (a as usize, b as usize, c as usize, pos + 3),
            _ => {
                let (shared, p) = varint32(block, pos, data_end)?;
                let (unshared, p) = varint32(block, p, data_end)?;
                let (length, p) = varint32(block, p, data_end)?;
                (shared as usize, unshared as usize, length as usize, p)
            }
        };
        if restart && shared != 0 {
            return fail("SST: a restart point's key shares bytes with the one before");
        }
        if shared > self.key.len() {
            return fail("SST: a key shares more bytes than the key before it has");
        }
        let value = p + unshared;
        let next = value + length;
        if next > data_end {
            return fail("SST: a block entry runs past its restart interval");
        }
        if shared + unshared < TRAILER {
            return fail("SST: an internal key is shorter than its sequence number");
        }
        let user = shared + unshared - TRAILER;
        // A file is sorted by user key, then newest first: the merge counts on it, and a file
        // out of that order is damaged. The keys agree on their first `shared` bytes; the rest
        // of the old one is still in `key`.
        let order = if self.entries == 0 { Ordering::Less } else {
            let old = self.key.len() - TRAILER;
            let common = old.min(user);
            let tail = if shared >= common { Ordering::Equal }
                       else if self.key[shared] != block[p] { self.key[shared].cmp(&block[p]) }
                       else { self.key[shared..common].cmp(&block[p..p + common - shared]) };
            tail.then(old.cmp(&user))
        };
        self.key.truncate(shared);
        self.key.extend_from_slice(&block[p..value]);
        let mut trailer = [0u8; 8];
        trailer.copy_from_slice(&self.key[user..]);
        let trailer = u64::from_le_bytes(trailer);
        let kind = (trailer & 0xFF) as u8;
        if kind != VALUE && kind != DELETION && kind != SINGLE_DELETION {
            return fail(format!("SST: entries of value type {kind} are not read here"));
        }
        if order == Ordering::Greater
            || (order == Ordering::Equal && trailer >> 8 >= self.sequence) {
            return fail("SST: a file's keys are out of order");
        }
        self.prefix = prefix_of(&self.key[..user]);
        (self.sequence, self.kind) = (trailer >> 8, kind);
        (self.begin, self.end) = (self.base + value, self.base + next);
        self.pos = next;
        self.entries += 1;
        Ok(true)
    }
}

/// The blocks of each file in the joined buffer: (base, size).
fn file_blocks(tables: &[Table], slots: &[Slot]) -> Vec<Vec<(usize, usize)>> {
    let mut files = vec![Vec::new(); tables.len()];
    let mut base = 0;
    for s in slots {
        files[s.table].push((base, s.length));
        base += s.length;
    }
    files
}

/// The user key of a block's first entry (a restart point: all its key bytes are there).
fn first_key(buffer: &[u8], (base, size): (usize, usize)) -> Option<&[u8]> {
    let block = buffer.get(base..base + size)?;
    let (shared, p) = varint32(block, 0, size).ok()?;
    let (unshared, p) = varint32(block, p, size).ok()?;
    let (_, p) = varint32(block, p, size).ok()?;
    let key = block.get(p..p + unshared as usize)?;
    (shared == 0 && key.len() >= TRAILER).then(|| &key[..key.len() - TRAILER])
}

/// The ranges of the values a read of the files sees, in key order, of the user keys in
/// `[from, until)`: of a key's entries the newest (highest sequence number) wins, and a
/// deletion there hides the key. The files are merged as they are walked (a cursor each, the
/// smallest key next), so no entry is kept. Also each file's count of entries in the range.
fn live(files: &[Vec<(usize, usize)>], buffer: &[u8], from: Option<Bound>,
        until: Option<Bound>, capacity: usize) -> Result<(Vec<u8>, Vec<u8>, Vec<u64>)> {
    let mut cursors: Vec<Cursor> = Vec::with_capacity(files.len());
    for blocks in files {
        // A cursor that starts at `from` skips the blocks that begin before the last one
        // whose first key is under it.
        let mut skip = 0;
        if let Some(bound) = &from {
            skip = blocks.partition_point(|&b| first_key(buffer, b)
                .is_some_and(|k| k < bound.key.as_slice())).saturating_sub(1);
        }
        cursors.push(Cursor::new(buffer, blocks[skip..].to_vec(), from.clone(), until.clone()));
    }
    // The values' ranges, little-endian int64 each, as Python reads them.
    let (mut begin, mut end) = (memory::take(capacity * 8), memory::take(capacity * 8));
    let mut going: Vec<usize> = Vec::with_capacity(cursors.len());
    for (i, c) in cursors.iter_mut().enumerate() {
        if c.advance()? {
            going.push(i);
        }
    }
    let mut key: Vec<u8> = Vec::new();
    while !going.is_empty() {
        let mut smallest = going[0];
        for &i in &going[1..] {
            if cursors[i].cmp(&cursors[smallest]) == Ordering::Less {
                smallest = i;
            }
        }
        let (prefix, len) = (cursors[smallest].prefix, cursors[smallest].user_len());
        key.clear();
        if len > 8 {
            key.extend_from_slice(cursors[smallest].user_key());
        }
        let (mut newest, mut range) = (None::<(u64, u8)>, (0, 0));
        let mut k = 0;
        while k < going.len() {
            let c = &mut cursors[going[k]];
            let mut more = true;
            while c.is(prefix, len, &key) {
                if newest.is_none_or(|(sequence, _)| c.sequence > sequence) {
                    newest = Some((c.sequence, c.kind));
                    range = (c.begin, c.end);
                }
                more = c.advance()?;
                if !more {
                    break;
                }
            }
            if more { k += 1 } else { going.remove(k); }
        }
        if let Some((_, VALUE)) = newest {
            begin.extend_from_slice(&(range.0 as i64).to_le_bytes());
            end.extend_from_slice(&(range.1 as i64).to_le_bytes());
        }
    }
    Ok((begin, end, cursors.iter().map(|c| c.counted).collect()))
}

/// The joined buffer's size, and a function filling it and returning the live values' ranges.
pub fn read<'a>(tables: &'a [Table<'a>], max_bytes: u64) -> Result<(u64, Reader<'a>)> {
    let (slots, total) = plan(tables, max_bytes)?;
    Ok((total, Reader { tables, slots }))
}

/// The second half of a read, once the joined buffer is allocated.
pub struct Reader<'a> {
    tables: &'a [Table<'a>],
    slots: Vec<Slot>,
}

impl Reader<'_> {
    /// Fill the joined buffer and find the live values, on two threads when the read is large
    /// and may use two (`threads`): each half of the blocks is decompressed by one, then the
    /// keys below and from a pivot key are merged by one each.
    pub fn fill(&self, out: &mut [u8], threads: usize) -> Result<(Vec<u8>, Vec<u8>)> {
        let two = threads > 1 && out.len() >= PARALLEL_BYTES;
        if two {
            let (mut half, mut at) = (0, 0);
            while half < self.slots.len() && 2 * at < out.len() {
                at += self.slots[half].length;
                half += 1;
            }
            let (low, high) = out.split_at_mut(at);
            let (first, second) = self.slots.split_at(half);
            std::thread::scope(|scope| {
                let other = scope.spawn(|| join(self.tables, second, high));
                let mine = join(self.tables, first, low);
                other.join().expect("a decompressing thread panicked").and(mine)
            })?;
        } else {
            join(self.tables, &self.slots, out)?;
        }
        let out: &[u8] = out;
        let files = file_blocks(self.tables, &self.slots);
        // Sized from the tables' counts, bounded by what the blocks can hold (an entry takes
        // at least its three varints and its key's trailer).
        let claimed: u64 = self.tables.iter().map(|t| t.entries).sum();
        let capacity = claimed.min(out.len() as u64 / 11) as usize;
        // The pivot: the first key of the middle block of the file with the most blocks.
        let pivot = files.iter().max_by_key(|b| b.len())
            .and_then(|b| b.get(b.len() / 2).and_then(|&m| first_key(out, m)))
            .map(|k| Bound { prefix: prefix_of(k), key: k.to_vec() });
        let (begin, end, counts) = match pivot {
            Some(pivot) if two => {
                let (low, high) = std::thread::scope(|scope| {
                    let other = scope.spawn(|| live(&files, out, Some(pivot.clone()), None,
                                                    capacity / 2));
                    let mine = live(&files, out, None, Some(pivot.clone()), capacity / 2);
                    (mine, other.join().expect("a merging thread panicked"))
                });
                let ((mut begin, mut end, mut counts), (b, e, c)) = (low?, high?);
                begin.extend_from_slice(&b);
                end.extend_from_slice(&e);
                counts.iter_mut().zip(c).for_each(|(a, b)| *a += b);
                (begin, end, counts)
            }
            _ => live(&files, out, None, None, capacity)?,
        };
        for (t, found) in self.tables.iter().zip(counts) {
            if found != t.entries {
                return fail(format!("SST: {found} entries found, the table says {}",
                                    t.entries));
            }
        }
        Ok((begin, end))
    }
}

/// Reads whose blocks hold at least this many bytes use two threads.
const PARALLEL_BYTES: usize = 4 << 20;
