//! Read-only buffers handed to Python, their memory kept for the next read when they go.
//!
//! A read of a snapshot bucket fills some tens of MB of fresh buffers; from the C heap each
//! large one is a new mapping whose every page faults in on first touch, which cost more than
//! decoding into it. Buffers of 64 KiB or more come back here when Python drops them, and the
//! next read takes the smallest that fits: a worker reading split after split touches memory
//! it already has.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// Buffers smaller than this are not kept (the heap reuses small ones by itself). A 4 MiB page
/// of short rows has columns and value offsets of a few hundred KiB, which the heap maps
/// afresh each time: keeping them made a page's decode 15-20% faster (BENCHMARKS.md, "Index
/// blocks and kept buffers").
const KEEP_FROM: usize = 1 << 16;
/// The most buffers, and bytes, kept for reuse at once.
const KEEP_BUFFERS: usize = 32;
const KEEP_BYTES: usize = 128 << 20;

static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty vector with room for at least `n` bytes: a kept one where one fits.
pub fn take(n: usize) -> Vec<u8> {
    if n >= KEEP_FROM {
        let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
        let best = free.iter().enumerate().filter(|(_, v)| v.capacity() >= n)
            .min_by_key(|(_, v)| v.capacity()).map(|(i, _)| i);
        if let Some(i) = best {
            let mut v = free.swap_remove(i);
            v.clear();
            return v;
        }
    }
    Vec::with_capacity(n)
}

fn give(v: Vec<u8>) {
    if v.capacity() < KEEP_FROM {
        return;
    }
    let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
    free.push(v);
    // Over the limits, the smallest go first.
    free.sort_by_key(|v| std::cmp::Reverse(v.capacity()));
    while free.len() > KEEP_BUFFERS || free.iter().map(|v| v.capacity()).sum::<usize>() > KEEP_BYTES {
        free.pop();
    }
}

/// Append `src` to `out`: a short slice (a decoded string) with a few unaligned moves instead
/// of a call to `memcpy`, whose call and size dispatch cost more than moving some tens of
/// bytes; a longer one, or one near `out`'s capacity, by `extend_from_slice`. (The SST walk's
/// keys and values measured 5% slower this way: they lie inside their block, from which
/// `append_within` moves each in one move.) Returns the bytes ORed together in words (`0x80`
/// bits set: some byte is not ASCII), taken from the moves' own loads.
#[inline(always)]
pub fn append(out: &mut Vec<u8>, src: &[u8]) -> u64 {
    let (n, len) = (src.len(), out.len());
    if n > 32 || out.capacity() - len < 32 {
        out.extend_from_slice(src);
        return if src.is_ascii() { 0 } else { 0x80 };
    }
    // SAFETY: `out` has room for 32 bytes past its length (checked above), so every write
    // below lands in its allocation, inside `[len, len + n)`; every read is inside `src` (two
    // moves of `k` bytes, at the start and at the end of `k..=2k` bytes, may overlap); the
    // first `n` bytes past `len` are then written, and `set_len` covers no more.
    unsafe {
        let (from, to) = (src.as_ptr(), out.as_mut_ptr().add(len));
        let high = match n {
            16..=32 => {
                let (head, tail) = both_ends::<16>(from, to, n);
                let word = u128::from_ne_bytes(head) | u128::from_ne_bytes(tail);
                word as u64 | (word >> 64) as u64
            }
            8..=15 => {
                let (head, tail) = both_ends::<8>(from, to, n);
                u64::from_ne_bytes(head) | u64::from_ne_bytes(tail)
            }
            4..=7 => {
                let (head, tail) = both_ends::<4>(from, to, n);
                (u32::from_ne_bytes(head) | u32::from_ne_bytes(tail)) as u64
            }
            _ => {
                let mut high = 0;
                for i in 0..n {
                    *to.add(i) = *from.add(i);
                    high |= *from.add(i);
                }
                high as u64
            }
        };
        out.set_len(len + n);
        high
    }
}

/// Append `src[at..at + n]` to `out`: as one move of `N` bytes where `src` has `N` bytes from
/// `at` and `out` room for `N` past its length (the bytes moved past `n` are left beyond the
/// length), else by `extend_from_slice`. For the SST walk's keys and values, which lie inside
/// their decompressed block: a move of a variable length was a call each.
#[inline(always)]
pub fn append_within<const N: usize>(out: &mut Vec<u8>, src: &[u8], at: usize, n: usize) {
    let len = out.len();
    if n <= N && at.checked_add(N).is_some_and(|end| end <= src.len())
        && out.capacity() - len >= N {
        // SAFETY: `N` bytes from `at` lie in `src`, and `out` has room for `N` past its length;
        // its first `len + n` bytes are then set (`n <= N`).
        unsafe {
            let bytes = src.as_ptr().add(at).cast::<[u8; N]>().read_unaligned();
            out.as_mut_ptr().add(len).cast::<[u8; N]>().write_unaligned(bytes);
            out.set_len(len + n);
        }
    } else {
        out.extend_from_slice(&src[at..at + n]);
    }
}

/// The first and last `K` bytes of `from[..n]` (`K <= n <= 2K`) copied to `to`, and returned.
///
/// # Safety
/// `from` must be readable and `to` writable for `n` bytes.
#[inline(always)]
unsafe fn both_ends<const K: usize>(from: *const u8, to: *mut u8, n: usize)
                                    -> ([u8; K], [u8; K]) {
    // SAFETY: the caller's: both moves lie inside the first `n` bytes.
    unsafe {
        let head = from.cast::<[u8; K]>().read_unaligned();
        let tail = from.add(n - K).cast::<[u8; K]>().read_unaligned();
        to.cast::<[u8; K]>().write_unaligned(head);
        to.add(n - K).cast::<[u8; K]>().write_unaligned(tail);
        (head, tail)
    }
}

/// Give back to the system the pages of `file[from..to]` (whole pages inside it): `file` must be
/// a read-only mapping of a file, whose pages a later read faults in again from the file (the
/// memory of the process's own would read back as zeros). Returns how far it was given back.
pub fn give_back(file: &[u8], from: usize, to: usize) -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => return from,
    };
    let base = file.as_ptr() as usize;
    let start = (base + from).next_multiple_of(page);
    let end = (base + to.min(file.len())) / page * page;
    if end > start {
        // SAFETY: [start, end) lies inside the mapping `file` borrows; MADV_DONTNEED on a file
        // mapping only drops resident pages, and no reference into them is used again before
        // a read faults them back in.
        unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_DONTNEED) };
    }
    to
}

/// Bytes Python reads through the buffer protocol (numpy.frombuffer, pyarrow.py_buffer).
#[pyclass(frozen, module = "fluss_spark.protocol.apache_fluss._native")]
pub struct Memory {
    bytes: Vec<u8>,
}

impl Memory {
    pub fn new(bytes: Vec<u8>) -> Memory {
        Memory { bytes }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.bytes));
    }
}

#[pymethods]
impl Memory {
    fn __len__(&self) -> usize {
        self.bytes.len()
    }

    /// # Safety
    /// Called by Python with a view to fill; the bytes never change while the object lives,
    /// and the view holds a reference to it.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int)
                            -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE != 0 {
            return Err(PyBufferError::new_err("the decoded bytes are read-only"));
        }
        let bytes = &slf.get().bytes;
        // SAFETY: `view` is Python's to fill; the pointer and length are the vector's.
        let filled = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), bytes.as_ptr() as *mut c_void,
                                   bytes.len() as ffi::Py_ssize_t, 1, flags)
        };
        if filled == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// # Safety
    /// Nothing to release: the view's reference keeps the object, and so the bytes, alive.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
