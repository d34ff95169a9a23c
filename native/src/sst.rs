//! The live values of RocksDB block-based table files, streamed: each file's blocks verified,
//! decompressed and walked one at a time, the files merged as they go (newest version of each
//! key first), and the live values copied into pages of a bounded size.
//!
//! The same reading as `fluss_spark/protocol/apache_fluss/rocksdb_sst.py` (`read_tables`, then
//! `live_values`), which stays the reference: that module reads each file's footer, properties
//! and index and hands the data blocks' positions here. Every read is bounds-checked; anything
//! this code does not take is an `Error`. What can be checked before the first value (every
//! block's place, compression and size) is, so that a caller can still read the files another
//! way; an error found later, in a block's bytes, is the files' damage.
//!
//! Memory is one decompressed block per file and the page being filled. A file mapped from
//! disk (`Table::mapped`) also gives back the pages of the blocks its cursor has passed.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::memory;

/// Why the files were not read here: before the first value, the caller reads them another
/// way; after it, they are damaged.
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
    /// Whether `file` is a read-only mapping of a file (its pages can be given back and read
    /// again from the file), not memory of the process's own.
    pub mapped: bool,
}

/// One SST file ready to read, its blocks' places checked (`plan`): cheap to clone, so that
/// the streams of several key ranges share one plan.
#[derive(Clone)]
pub struct File<'a> {
    file: &'a [u8],
    slots: Arc<[Slot]>,
    entries: u64,
    checksum: u8,
    mapped: bool,
}

impl<'a> File<'a> {
    pub fn plan(t: &Table<'a>) -> Result<File<'a>> {
        Ok(File { file: t.file, slots: plan(t)?.into(), entries: t.entries,
                  checksum: t.checksum, mapped: t.mapped })
    }
}

/// The user key of the first entry of block `s` of `file` (decompressed into `scratch`).
fn first_key(file: &[u8], s: &Slot, checksum: u8, scratch: &mut Vec<u8>) -> Result<Vec<u8>> {
    read_block(file, s, checksum, scratch)?;
    let stop = scratch.len();
    let (shared, p) = varint32(scratch, 0, stop)?;
    let (unshared, p) = varint32(scratch, p, stop)?;
    let (_, p) = varint32(scratch, p, stop)?;
    let unshared = unshared as usize;
    if shared != 0 || unshared < TRAILER || p + unshared > stop {
        return fail("SST: a block's first key does not fit it");
    }
    Ok(scratch[p..p + unshared - TRAILER].to_vec())
}

/// Keys that cut the files' key space into ranges of about `target` bytes of blocks each (a
/// file's blocks sized as its first, decompressed), in order; none when the files hold less
/// than two such ranges. The ranges hold about as many entries each, but for those of the last
/// `workers` ranges' entries, which are cut in halves: `workers` threads, each taking the next
/// range as it finishes one, then end at about the same time (BENCHMARKS.md, "Ranges of even
/// size").
///
/// Each file is sampled at the first keys of blocks spread evenly over it (two a range, the
/// files' samples staggered): the entries before a key are known at a file's own samples (its
/// blocks hold about as many entries each), and estimated between two of them from where the
/// key's first 8 bytes fall between theirs. A range ends at the sample whose estimate over
/// every file is the nearest to its size. (Counting at each sample the blocks after it, as a
/// cut passed it, made the ranges of interleaved files alternate between two sizes, 100k and
/// 150k rows.)
pub fn pivots(files: &[File], target: usize, workers: usize) -> Result<Vec<Vec<u8>>> {
    let mut bytes = 0usize;
    for f in files {
        let first = match f.slots.first() { Some(s) => stored(f.file, s)?.2, None => 0 };
        bytes = bytes.saturating_add(f.slots.len().saturating_mul(first));
    }
    let ranges = bytes.div_ceil(target.max(1));
    if ranges < 2 {
        return Ok(Vec::new());
    }
    // Each file's samples, in key order: (its key's prefix, the key, the entries before it),
    // and the file's entries.
    let mut scratch = Vec::new();
    let mut samples = Vec::with_capacity(files.len());
    for (i, f) in files.iter().enumerate() {
        let (n, entries) = (f.slots.len(), f.entries as f64);
        let k = n.min(2 * ranges);
        let mut file = Vec::with_capacity(k);
        for j in 0..k {
            // Files spread over the same keys are sampled at staggered places, so that their
            // samples do not come in pairs of about the same key.
            let at = (j * files.len() + i) * n / (k * files.len());
            let key = first_key(f.file, &f.slots[at], f.checksum, &mut scratch)?;
            file.push((prefix_of(&key), key, entries * at as f64 / n as f64));
        }
        samples.push((file, entries));
    }
    // The entries of every file before `key` (of prefix `prefix`), estimated.
    let before = |key: &[u8], prefix: u64| -> f64 {
        samples.iter().map(|(file, entries)| {
            let after = file.partition_point(|(_, k, _)| k.as_slice() <= key);
            let Some((p0, _, e0)) = after.checked_sub(1).map(|i| &file[i]) else { return 0.0 };
            // Past the last sample: half of what follows it, its keys being unknown.
            let (p1, e1) = file.get(after)
                .map_or((*p0, (e0 + entries) / 2.0), |(p, _, e)| (*p, *e));
            let share = if p1 > *p0 { (prefix - p0) as f64 / (p1 - p0) as f64 } else { 0.5 };
            e0 + share.clamp(0.0, 1.0) * (e1 - e0)
        }).sum()
    };
    let mut keys: Vec<(u64, &[u8])> = samples.iter()
        .flat_map(|(file, _)| file.iter().map(|(p, k, _)| (*p, k.as_slice()))).collect();
    keys.sort_unstable_by(|a, b| a.1.cmp(b.1));
    keys.dedup_by(|a, b| a.1 == b.1);
    let total: f64 = samples.iter().map(|(_, entries)| entries).sum();
    let range = total / ranges as f64;
    // Where the halves start (a cut at most half a range before counts as there): none when
    // the threads take as many ranges each.
    let tail = if ranges.is_multiple_of(workers.max(1)) { f64::INFINITY } else {
        total - (workers as f64 + 0.5) * range
    };
    let (mut pivots, mut cut) = (Vec::<Vec<u8>>::new(), 0.0);
    // The sample before, and the entries before it.
    let mut last: Option<(f64, &[u8])> = None;
    for (prefix, key) in keys {
        let at = before(key, prefix);
        let end = cut + if cut >= tail { range / 2.0 } else { range };
        if at < end || total - at < (end - cut) / 2.0 {
            last = Some((at, key));
            continue;
        }
        match last {
            Some((was, earlier)) if was > cut && end - was < at - end => {
                pivots.push(earlier.to_vec());
                (cut, last) = (was, Some((at, key)));
            }
            _ => {
                pivots.push(key.to_vec());
                (cut, last) = (at, None);
            }
        }
    }
    Ok(pivots)
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
fn varint32(data: &[u8], pos: usize, stop: usize) -> Result<(u32, usize)> {
    // Bits past 32 are dropped, as a 32-bit varint's reader drops them.
    varint::<5>(data, pos, stop).map(|(value, end)| (value as u32, end))
}

/// A varint of at most `MOST` bytes before `stop`: (value, end).
#[inline]
fn varint<const MOST: u32>(data: &[u8], mut pos: usize, stop: usize) -> Result<(u64, usize)> {
    let mut value: u64 = 0;
    for i in 0..MOST {
        if pos >= stop {
            break;
        }
        let b = data[pos];
        pos += 1;
        value |= ((b & 0x7F) as u64) << (7 * i);
        if b < 0x80 {
            return Ok((value, pos));
        }
    }
    fail("SST: a varint runs past its block")
}

/// Where a block is in its file: its bytes (its trailer follows: compression type, checksum).
struct Slot {
    offset: usize,
    size: usize,
}

/// Check every block's bounds, and that the first block's compression is read here (a file's
/// blocks share it, or are stored uncompressed): the rest of each block is checked when it
/// is reached, so that planning touches no more of the file than its first block.
fn plan(t: &Table) -> Result<Vec<Slot>> {
    let file = t.file;
    if t.checksum > 1 {
        return fail(format!("SST: block checksum type {} is not read here", t.checksum));
    }
    let mut slots = Vec::with_capacity(t.blocks.len());
    for &(offset, size) in &t.blocks {
        let end = offset.checked_add(size).and_then(|e| e.checked_add(BLOCK_TRAILER as u64));
        if end.is_none_or(|e| e > file.len() as u64) {
            return fail(format!("SST: a block handle points past the file's end ({} bytes)",
                                file.len()));
        }
        slots.push(Slot { offset: offset as usize, size: size as usize });
    }
    if let Some(first) = slots.first() {
        stored(file, first)?;
    }
    Ok(slots)
}

/// Where a block's stored contents start, their compression and their uncompressed length
/// (read from an LZ4 block before its buffer is sized: bounded by what LZ4 can hold).
fn stored(file: &[u8], s: &Slot) -> Result<(usize, u8, usize)> {
    let kind = file[s.offset + s.size];
    match kind {
        NO_COMPRESSION => Ok((s.offset, kind, s.size)),
        LZ4 | LZ4HC => {
            let (n, start) = varint32(file, s.offset, s.offset + s.size)?;
            let packed = (s.offset + s.size - start) as u64;
            if n as u64 > packed * LZ4_MAX_RATIO + 16 {
                return fail(format!("SST: a block of {packed} compressed bytes says it holds \
                                     {n}"));
            }
            Ok((start, kind, n as usize))
        }
        other => fail(format!("SST: compression type {other} is not read here")),
    }
}

/// Verify block `s` of `file` (checksum type `checksum`) and decompress it into `out`.
fn read_block(file: &[u8], s: &Slot, checksum: u8, out: &mut Vec<u8>) -> Result<()> {
    if checksum == 1 {
        let crc = crc32c::crc32c(&file[s.offset..s.offset + s.size + 1]);
        let masked = crc.rotate_right(15).wrapping_add(CRC_MASK_DELTA);
        if masked != u32_at(file, s.offset + s.size + 1)? {
            return fail(format!("SST: the block at byte {} does not match its checksum",
                                s.offset));
        }
    } else if checksum != 0 {
        return fail(format!("SST: block checksum type {checksum} is not read here"));
    }
    let (src, kind, length) = stored(file, s)?;
    let src = &file[src..s.offset + s.size];
    // Every byte is written below: only a longer block than any before grows (and zeroes)
    // the buffer.
    out.resize(length, 0);
    if kind == NO_COMPRESSION {
        out.copy_from_slice(src);
    } else {
        match lz4_flex::block::decompress_into(src, out) {
            Ok(n) if n == length => {}
            _ => return fail("SST: a compressed data block does not decompress"),
        }
    }
    Ok(())
}

/// The block at `offset`, `size` of `file` (a handle read from the file), its place checked,
/// verified and decompressed.
fn handled_block(file: &[u8], offset: u64, size: u64, checksum: u8) -> Result<Vec<u8>> {
    let end = offset.checked_add(size).and_then(|e| e.checked_add(BLOCK_TRAILER as u64));
    if end.is_none_or(|e| e > file.len() as u64) {
        return fail("SST: a block handle points past the file's end");
    }
    let mut block = Vec::new();
    read_block(file, &Slot { offset: offset as usize, size: size as usize }, checksum,
               &mut block)?;
    Ok(block)
}

/// The data blocks' (offsets, sizes) that the index block at `offset`, `size` of `file` holds,
/// one block handle an entry: the same reading as `rocksdb_sst._data_handles`, which stays the
/// reference and names what this refuses. With `delta` (value delta encoding) every entry is
/// a restart point holding its key and a whole handle, as Fluss writes its index blocks.
pub fn index_handles(file: &[u8], offset: u64, size: u64, checksum: u8, delta: bool)
                     -> Result<(Vec<i64>, Vec<i64>)> {
    let block = handled_block(file, offset, size, checksum)?;
    let size = block.len();
    if size < 4 {
        return fail("SST: the index block is shorter than its footer");
    }
    let footer = u32_at(&block, size - 4)?;
    let restarts = footer as usize;
    if footer >> 31 != 0 || restarts < 1 || 4 * restarts + 4 > size {
        return fail("SST: the index block's restart array does not fit it");
    }
    let data_end = size - 4 - 4 * restarts;
    let restart = |i: usize| -> Result<usize> {
        if i < restarts { Ok(u32_at(&block, data_end + 4 * i)? as usize) } else { Ok(data_end) }
    };
    let (mut offsets, mut sizes) = (Vec::with_capacity(restarts), Vec::with_capacity(restarts));
    let (mut pos, mut next) = (0, 0);
    while pos < data_end {
        let at_restart = next < restarts && restart(next)? == pos;
        if at_restart {
            next += 1;
        } else if delta {
            return fail("SST: an index entry is not a restart point");
        }
        let (shared, p) = varint32(&block, pos, data_end)?;
        let (unshared, p) = varint32(&block, p, data_end)?;
        let (stop, p) = if delta {
            if shared != 0 {
                return fail("SST: an index restart point shares key bytes");
            }
            (restart(next)?, p + unshared as usize)
        } else {
            let (length, p) = varint32(&block, p, data_end)?;
            let value = p + unshared as usize;
            (value + length as usize, value)
        };
        if stop > data_end || p > stop {
            return fail("SST: an index entry runs past its block");
        }
        let (o, p) = varint::<10>(&block, p, stop)?;
        let (n, p) = varint::<10>(&block, p, stop)?;
        if p != stop {
            return fail("SST: an index entry holds more than one block handle");
        }
        offsets.push(o as i64);
        sizes.push(n as i64);
        pos = stop;
    }
    Ok((offsets, sizes))
}

/// The (key, value) entries of the small block at `offset`, `size` of `file` (a meta index
/// or properties block), in order: the same reading as `rocksdb_sst.small_block_entries`,
/// which stays the reference.
pub fn block_entries(file: &[u8], offset: u64, size: u64, checksum: u8)
                     -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let block = handled_block(file, offset, size, checksum)?;
    if block.len() < 4 {
        return fail("SST: a block is shorter than its footer");
    }
    let restarts = (u32_at(&block, block.len() - 4)? & 0x7FFF_FFFF) as usize;
    let Some(data_end) = (block.len() - 4).checked_sub(4 * restarts) else {
        return fail("SST: a block's restart count does not fit it");
    };
    let (mut pos, mut key, mut out) = (0, Vec::new(), Vec::new());
    while pos < data_end {
        let (shared, p) = varint32(&block, pos, data_end)?;
        let (unshared, p) = varint32(&block, p, data_end)?;
        let (length, p) = varint32(&block, p, data_end)?;
        let (shared, unshared, length) = (shared as usize, unshared as usize, length as usize);
        if shared > key.len() || p + unshared + length > data_end {
            return fail("SST: a block entry runs past its block");
        }
        key.truncate(shared);
        key.extend_from_slice(&block[p..p + unshared]);
        out.push((key.clone(), block[p + unshared..p + unshared + length].to_vec()));
        pos = p + unshared + length;
    }
    Ok(out)
}

/// Mapped pages are given back in steps of at least this many bytes: what each file of a
/// stream may hold at once, so a bucket of many files (a larger table's) holds little more
/// than one of few, for a call per 256 KiB read (BENCHMARKS.md, "A leaner merge and decode;
/// memory that grew with the bucket").
const GIVE_BACK_BYTES: usize = 1 << 18;

/// Room a cursor's key starts with: the new bytes of a key up to `KEY_ROOM - 16` long are one
/// move (`memory::append_within`).
const KEY_ROOM: usize = 64;

/// One file's entries, one at a time, in its order: the current entry's user key, sequence
/// number, value type and value range in the current block.
struct Cursor<'a> {
    file: &'a [u8],
    checksum: u8,
    mapped: bool,
    /// The file's blocks (shared with the other streams of the file), and the next one to read.
    slots: Arc<[Slot]>,
    next_block: usize,
    /// The block being read, decompressed: where its entries end, where its restart array
    /// starts, how many restart points it has and were passed.
    block: Vec<u8>,
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
    /// Entries walked (the order check starts at the second).
    entries: u64,
    /// Whether the current entry's user key is the one before's (an older version of it).
    again: bool,
    /// The file's bytes before this offset were given back (mapped files only).
    given_back: usize,
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
    fn new(f: &File<'a>) -> Cursor<'a> {
        Cursor { file: f.file, checksum: f.checksum, mapped: f.mapped, slots: f.slots.clone(),
                 next_block: 0, block: Vec::new(), pos: 0, data_end: 0,
                 restarts: 0, next_restart: 0, key: Vec::with_capacity(KEY_ROOM), prefix: 0,
                 sequence: 0, kind: 0, begin: 0, end: 0, entries: 0, again: false, given_back: 0 }
    }

    /// Move to the first entry whose user key is `key` or after it: false when the file has
    /// none. Its block is found by the blocks' first keys; the entries before it there are
    /// stepped over, and only the entries from it on are counted.
    fn seek(&mut self, key: &[u8]) -> Result<bool> {
        // The first block whose first key is `key` or after: the entry is in it, or in the
        // block before it (whose last keys may come before or be `key`'s newer versions).
        let (mut lo, mut hi) = (0, self.slots.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if first_key(self.file, &self.slots[mid], self.checksum, &mut self.block)?
                .as_slice() < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let start = lo.saturating_sub(1);
        self.next_block = start;
        (self.pos, self.data_end, self.restarts, self.next_restart) = (0, 0, 0, 0);
        self.given_back = self.slots.get(start).map_or(0, |s| s.offset);
        while self.step()? {
            if self.user_key() >= key {
                (self.entries, self.again) = (1, false);
                return Ok(true);
            }
        }
        self.entries = 0;
        Ok(false)
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

    /// Append the current value to `out` (a short one in one move).
    #[inline(always)]
    fn copy_value(&self, out: &mut Vec<u8>) {
        memory::append_within::<32>(out, &self.block, self.begin, self.end - self.begin);
    }

    /// Verify and decompress the next block: false when the file has no more.
    fn open_block(&mut self) -> Result<bool> {
        let Some(s) = self.slots.get(self.next_block) else { return Ok(false) };
        read_block(self.file, s, self.checksum, &mut self.block)?;
        let offset = s.offset;
        self.next_block += 1;
        if self.mapped && offset >= self.given_back + GIVE_BACK_BYTES {
            self.given_back = memory::give_back(self.file, self.given_back, offset);
        }
        let size = self.block.len();
        if size < 4 {
            return fail("SST: a block is shorter than its footer");
        }
        let footer = u32_at(&self.block, size - 4)?;
        if footer >> 31 != 0 {
            return fail("SST: blocks with a hash index are not read here");
        }
        let restarts = footer as usize;
        if restarts < 1 || 4 * restarts + 4 > size {
            return fail("SST: a block's restart count does not fit it");
        }
        (self.pos, self.data_end) = (0, size - 4 - 4 * restarts);
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
        let block = &self.block[..self.data_end + 4 * self.restarts];
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
        memory::append_within::<16>(&mut self.key, &self.block, p, unshared);
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
        // The trailer's 8 bytes follow the user key: the key's first 8 bytes are one load,
        // those past a short key masked off (a copy of a variable length is a call).
        let head = u64::from_be_bytes(*self.key.first_chunk::<8>().expect("8 trailer bytes"));
        self.prefix = if user >= 8 { head } else { head & !(u64::MAX >> (8 * user)) };
        (self.sequence, self.kind) = (trailer >> 8, kind);
        (self.begin, self.end) = (value, next);
        self.pos = next;
        self.entries += 1;
        self.again = order == Ordering::Equal;
        Ok(true)
    }

    /// Move to the next key's first (newest) entry, past the current key's older versions:
    /// false past the file's last.
    fn next_key(&mut self) -> Result<bool> {
        let mut more = self.step()?;
        while more && self.again {
            more = self.step()?;
        }
        Ok(more)
    }
}

/// Every file, read to its end, held the entries its table says.
pub fn verify(counted: impl Iterator<Item = u64>, files: &[File]) -> Result<()> {
    for (found, f) in counted.zip(files) {
        if found != f.entries {
            return fail(format!("SST: {found} entries found, the table says {}", f.entries));
        }
    }
    Ok(())
}

/// A page of live values: value `i` is `data[begin[i]..end[i]]` (little-endian int64 each, as
/// Python reads them).
pub struct Page {
    pub data: Vec<u8>,
    pub begin: Vec<u8>,
    pub end: Vec<u8>,
}

impl Page {
    pub fn rows(&self) -> usize {
        self.begin.len() / 8
    }
}

/// The end of a key range: the first user key not in it.
struct Upto {
    key: Vec<u8>,
    prefix: u64,
}

impl Upto {
    /// Whether the cursor's user key is this one or after it.
    #[inline]
    fn reached_by(&self, c: &Cursor) -> bool {
        match c.prefix.cmp(&self.prefix) {
            Ordering::Less => false,
            Ordering::Greater => true,
            Ordering::Equal => c.user_key() >= self.key.as_slice(),
        }
    }
}

/// The live values of a set of files in key order, or (`RANGE`) of the keys of a range of
/// them: of a key's entries the newest (highest sequence number) wins, and a deletion there
/// hides the key. The files are merged as they are walked (a cursor each, the smallest key
/// next). A stream of every key checks the files' entry counts at its end; a range's checks
/// and bounds cost a stream of every key nothing.
pub struct Stream<'a, const RANGE: bool = false> {
    files: Vec<File<'a>>,
    cursors: Vec<Cursor<'a>>,
    /// The cursors not at their file's end; None before the first value.
    going: Option<Vec<usize>>,
    /// The key being merged, when longer than its prefix.
    key: Vec<u8>,
    /// A range's first key (its cursors seek it) and the first key after it.
    from: Option<Vec<u8>>,
    upto: Option<Upto>,
    /// Whether the range's end was reached: the going cursors stand on entries after it.
    stopped: bool,
    /// The cursor (its place in `going`) whose key was the only smallest, and the smallest
    /// prefix of the others: while its keys' prefixes stay below that, they are the next
    /// keys, with no other cursor to look at (files of interleaved keys take turns in runs).
    run: Option<(usize, u64)>,
}

impl<'a> Stream<'a> {
    /// A stream of every key of `files`.
    pub fn new(files: &[File<'a>]) -> Stream<'a> {
        Stream::bounded(files, None, None)
    }
}

impl<'a> Stream<'a, true> {
    /// A stream of the keys from `from` (the first, by default) up to and without `upto` (to
    /// the last).
    pub fn range(files: &[File<'a>], from: Option<Vec<u8>>, upto: Option<Vec<u8>>)
                 -> Stream<'a, true> {
        Stream::bounded(files, from, upto)
    }
}

impl<'a, const RANGE: bool> Stream<'a, RANGE> {
    fn bounded(files: &[File<'a>], from: Option<Vec<u8>>, upto: Option<Vec<u8>>)
               -> Stream<'a, RANGE> {
        let upto = upto.map(|key| Upto { prefix: prefix_of(&key), key });
        Stream { files: files.to_vec(), cursors: files.iter().map(Cursor::new).collect(),
                 going: None, key: Vec::new(), from, upto, stopped: false, run: None }
    }

    /// Move to the next live value, appending it to `out` (None: step over it): false at
    /// the end (of a stream of every key, once every file was found to hold the entries its
    /// table says).
    fn next(&mut self, mut out: Option<&mut Vec<u8>>) -> Result<bool> {
        if RANGE && self.stopped {
            return Ok(false);
        }
        if self.going.is_none() {
            let mut going = Vec::with_capacity(self.cursors.len());
            for (i, c) in self.cursors.iter_mut().enumerate() {
                let more = match &self.from {
                    Some(key) if RANGE => c.seek(key)?,
                    _ => c.step()?,
                };
                if more {
                    going.push(i);
                }
            }
            if going.is_empty() && !RANGE {
                verify(self.cursors.iter().map(|c| c.entries), &self.files)?;
            }
            self.going = Some(going);
        }
        let Some(going) = self.going.as_mut() else { unreachable!() };
        let cursors = &mut self.cursors;
        while !going.is_empty() {
            // Usually one file's key has the smallest prefix: it is the smallest key, no other
            // file holds it, and it needs no more comparing. Its older versions follow it.
            let at = match self.run {
                Some((at, bound)) if cursors[going[at]].prefix < bound => Some(at),
                _ => {
                    let (mut at, mut low, mut second) = (0, cursors[going[0]].prefix, u64::MAX);
                    for (k, &i) in going.iter().enumerate().skip(1) {
                        let prefix = cursors[i].prefix;
                        if prefix < low {
                            (at, second, low) = (k, low, prefix);
                        } else if prefix < second {
                            second = prefix;
                        }
                    }
                    self.run = (low < second).then_some((at, second));
                    self.run.map(|(at, _)| at)
                }
            };
            if let Some(at) = at {
                let c = &mut cursors[going[at]];
                if RANGE && self.upto.as_ref().is_some_and(|u| u.reached_by(c)) {
                    self.stopped = true;
                    return Ok(false);
                }
                let live = c.kind == VALUE;
                if let (true, Some(o)) = (live, out.as_mut()) {
                    c.copy_value(o);
                }
                if !c.next_key()? {
                    going.remove(at);
                    self.run = None;
                    if going.is_empty() && !RANGE {
                        verify(cursors.iter().map(|c| c.entries), &self.files)?;
                    }
                }
                if live {
                    return Ok(true);
                }
                continue;
            }
            let mut smallest = going[0];
            for &i in &going[1..] {
                if cursors[i].cmp(&cursors[smallest]) == Ordering::Less {
                    smallest = i;
                }
            }
            if RANGE && self.upto.as_ref().is_some_and(|u| u.reached_by(&cursors[smallest])) {
                self.stopped = true;
                return Ok(false);
            }
            let (prefix, len) = (cursors[smallest].prefix, cursors[smallest].user_len());
            self.key.clear();
            if len > 8 {
                self.key.extend_from_slice(cursors[smallest].user_key());
            }
            // Each file's first entry of the key is its newest; the newest of those wins. Its
            // value is copied before its cursor moves on (and replaced by a newer one's).
            let mark = out.as_ref().map_or(0, |o| o.len());
            let (mut newest, mut live) = (None::<u64>, false);
            let mut k = 0;
            while k < going.len() {
                let c = &mut cursors[going[k]];
                let mut more = true;
                if c.is(prefix, len, &self.key) {
                    if newest.is_none_or(|sequence| c.sequence > sequence) {
                        (newest, live) = (Some(c.sequence), c.kind == VALUE);
                        if let Some(o) = out.as_mut() {
                            o.truncate(mark);
                            if live {
                                c.copy_value(o);
                            }
                        }
                    }
                    more = c.next_key()?;
                }
                if more { k += 1 } else { going.remove(k); }
            }
            if going.is_empty() && !RANGE {
                verify(cursors.iter().map(|c| c.entries), &self.files)?;
            }
            if live {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The key of the next value's entries (None before the first value, or at the end).
    pub fn next_key(&self) -> Option<Vec<u8>> {
        let going = self.going.as_ref()?;
        let smallest = going.iter().map(|&i| &self.cursors[i]).min_by(|a, b| a.cmp(b))?;
        (!(RANGE && self.stopped)).then(|| smallest.user_key().to_vec())
    }

    /// Each file's entries of the keys read so far (the entries the cursors stand on are of
    /// keys not read yet).
    pub fn counted(&self) -> Vec<u64> {
        let going = self.going.as_deref().unwrap_or(&[]);
        self.cursors.iter().enumerate()
            .map(|(i, c)| c.entries - going.contains(&i) as u64).collect()
    }

    /// Whether every file was read to its end (and held the entries its table says).
    pub fn done(&self) -> bool {
        (RANGE && self.stopped) || self.going.as_ref().is_some_and(|g| g.is_empty())
    }

    /// The next live values, up to `max_rows` of them, and fewer once their bytes and
    /// `overhead` bytes a value reach `max_bytes` (at least one value, when there is one).
    // Not inlined into its callers: inlined, the walk of a 4-file bucket measured 3% slower
    // (the merge's code laid out worse around it).
    #[inline(never)]
    pub fn page(&mut self, max_rows: usize, max_bytes: usize, overhead: usize) -> Result<Page> {
        let rows = max_rows.min(max_bytes / overhead.max(1) + 1);
        let mut page = Page { data: memory::take(max_bytes.min(64 << 20)),
                              begin: memory::take(rows.min(1 << 20) * 8),
                              end: memory::take(rows.min(1 << 20) * 8) };
        let mut n = 0;
        while n < max_rows && page.data.len() + n * overhead < max_bytes {
            let at = page.data.len() as i64;
            if !self.next(Some(&mut page.data))? {
                break;
            }
            page.begin.extend_from_slice(&at.to_le_bytes());
            page.end.extend_from_slice(&(page.data.len() as i64).to_le_bytes());
            n += 1;
        }
        Ok(page)
    }

    /// Step over the next `n` live values: how many there were.
    pub fn skip(&mut self, n: u64) -> Result<u64> {
        let mut skipped = 0;
        while skipped < n && self.next(None)? {
            skipped += 1;
        }
        Ok(skipped)
    }
}
