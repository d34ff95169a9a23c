//! `fluss_spark.protocol.apache_fluss._native`: the compiled decode of Apache Fluss KV snapshots.
//!
//! A stream of SST files' live values and a row decode, each the whole of a chain of numpy
//! passes of `fluss_spark/protocol/apache_fluss/` (`rocksdb_sst.py`, `compacted_row.py`) done in
//! one walk with the GIL released. An error here is a ValueError. The Python modules decide
//! what it means: a stream or a decode refused before any value goes to numpy (or RocksDB),
//! whose code gives the user's message; a block found damaged mid-stream is the snapshot's
//! corruption, named by the caller.

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

mod memory;
mod rows;
mod sst;

use memory::Memory;

/// The bytes of a C-contiguous buffer (a numpy array).
fn slice<T: Element>(b: &PyBuffer<T>) -> PyResult<&[T]> {
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err("a buffer is not contiguous"));
    }
    // SAFETY: the buffer is contiguous and holds item_count items of T (checked by
    // PyBuffer::get); it stays alive and unchanged while `b` is borrowed.
    Ok(unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const T, b.item_count()) })
}

/// Data blocks' (offsets, sizes) as int64 arrays: a numpy array each, not a Python int per
/// block (a large bucket's files have some hundred thousand blocks).
type Handles = (PyBuffer<i64>, PyBuffer<i64>);

/// SST files as `sst::Table`s: `files[i]` is a file's bytes (uint8), `blocks[i]` its data
/// blocks' (offsets, sizes), `entries[i]` its entry count, `checksums[i]` its footer's checksum
/// type and `mapped[i]` whether its bytes are a read-only mapping of the file.
fn tables<'a>(files: &'a [PyBuffer<u8>], blocks: Vec<Handles>, entries: Vec<u64>,
              checksums: Vec<u8>, mapped: Vec<bool>) -> PyResult<Vec<sst::Table<'a>>> {
    let n = files.len();
    if blocks.len() != n || entries.len() != n || checksums.len() != n || mapped.len() != n {
        return Err(PyValueError::new_err("SST files: mismatched arguments"));
    }
    let mut tables = Vec::with_capacity(n);
    for ((((file, (offsets, sizes)), count), checksum), mapped) in
        files.iter().zip(blocks).zip(entries).zip(checksums).zip(mapped) {
        let (offsets, sizes) = (slice(&offsets)?, slice(&sizes)?);
        if offsets.len() != sizes.len() {
            return Err(PyValueError::new_err("SST files: mismatched block handles"));
        }
        // A negative handle becomes one past any file's end, which `sst::plan` refuses.
        let blocks = offsets.iter().zip(sizes).map(|(&o, &s)| (o as u64, s as u64)).collect();
        tables.push(sst::Table { file: slice(file)?, blocks, entries: count, checksum, mapped });
    }
    Ok(tables)
}

fn sst_error(e: sst::Error) -> PyErr {
    PyValueError::new_err(e.0)
}

/// The page a stream reads ahead, on a thread of its own, while its caller decodes the last.
type Ahead = std::thread::JoinHandle<(sst::Stream<'static>, Result<sst::Page, sst::Error>)>;

/// The live values of SST files, in key order, a page at a time (the arguments as `tables`).
///
/// A stream holds the files' buffers until it goes; it is used by one thread at a time.
#[pyclass(module = "fluss_spark.protocol.apache_fluss._native")]
struct SstStream {
    /// The next page being read, with the (max_rows, max_bytes, overhead) it was asked with.
    ahead: Option<(Ahead, (usize, usize, usize))>,
    /// The stream, while no page is being read ahead.
    stream: Option<sst::Stream<'static>>,
    done: bool,
    // Last: the stream's slices borrow these buffers.
    _files: Vec<PyBuffer<u8>>,
}

impl Drop for SstStream {
    fn drop(&mut self) {
        // A page read ahead reads the buffers: it ends before they go.
        if let Some((ahead, _)) = self.ahead.take() {
            let _ = ahead.join();
        }
    }
}

#[pymethods]
impl SstStream {
    #[new]
    fn new(files: Vec<PyBuffer<u8>>, blocks: Vec<Handles>, entries: Vec<u64>,
           checksums: Vec<u8>, mapped: Vec<bool>) -> PyResult<SstStream> {
        let tables = tables(&files, blocks, entries, checksums, mapped)?;
        let stream = sst::Stream::new(&tables).map_err(sst_error)?;
        // SAFETY: the slices point into the buffers of `files`, which the struct owns and which
        // stay alive and unchanged (PyBuffer holds them read-only) until after the stream and
        // any thread reading it are gone (Drop, then the field order).
        let stream = unsafe { std::mem::transmute::<sst::Stream<'_>, sst::Stream<'static>>(stream) };
        Ok(SstStream { ahead: None, stream: Some(stream), done: false, _files: files })
    }

    /// The next live values (data, int64 begins, int64 ends): up to `max_rows`, fewer once
    /// their bytes and `overhead` bytes a value reach `max_bytes`; none at the end. With
    /// `ahead`, when the page stopped short of `max_rows` the next one (up to the rows still
    /// wanted, same bytes) is read on another thread meanwhile: the next call must ask for
    /// just that.
    fn page(&mut self, py: Python<'_>, max_rows: usize, max_bytes: usize, overhead: usize,
            ahead: bool) -> PyResult<(Memory, Memory, Memory)> {
        let asked = (max_rows, max_bytes, overhead);
        let (pending, mut stream) = (self.ahead.take(), self.stream.take());
        let (stream, page) = py.detach(|| match pending {
            Some((thread, was)) => {
                let (stream, page) = thread.join().expect("a stream's reading thread panicked");
                let page = if was == asked { page } else {
                    Err(sst::Error(format!("a page read ahead for {was:?} was asked for as \
                                            {asked:?}")))
                };
                (stream, page)
            }
            None => {
                let mut stream = stream.take().expect("a stream is here or reading ahead");
                let page = stream.page(max_rows, max_bytes, overhead);
                (stream, page)
            }
        });
        let page = match page {
            Ok(page) => page,
            Err(e) => {
                self.stream = Some(stream);
                return Err(sst_error(e));
            }
        };
        let rows = page.begin.len() / 8;
        self.done = stream.done();
        if ahead && !self.done && rows > 0 && rows < max_rows {
            let next = (max_rows - rows, max_bytes, overhead);
            let mut stream = stream;
            let thread = std::thread::spawn(move || {
                let page = stream.page(next.0, next.1, next.2);
                (stream, page)
            });
            self.ahead = Some((thread, next));
        } else {
            self.stream = Some(stream);
        }
        Ok((Memory::new(page.data), Memory::new(page.begin), Memory::new(page.end)))
    }

    /// Whether every value was read (and the files held the entries their tables say).
    #[getter]
    fn done(&self) -> bool {
        self.done
    }

    /// Step over the next `n` live values: how many there were. Not after a page read ahead.
    fn skip(&mut self, py: Python<'_>, n: u64) -> PyResult<u64> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(PyValueError::new_err("a stream reading a page ahead cannot skip"));
        };
        let skipped = py.detach(|| stream.skip(n)).map_err(sst_error)?;
        self.done = stream.done();
        Ok(skipped)
    }
}

/// The data blocks' (offsets, sizes) of an SST file's index block (see `sst::index_handles`),
/// as two int64 buffers.
#[pyfunction]
fn index_handles(py: Python<'_>, file: PyBuffer<u8>, offset: u64, size: u64, checksum: u8,
                 delta: bool) -> PyResult<(Memory, Memory)> {
    let file = slice(&file)?;
    let (offsets, sizes) = py.detach(|| sst::index_handles(file, offset, size, checksum, delta))
        .map_err(sst_error)?;
    let bytes = |v: Vec<i64>| v.into_iter().flat_map(i64::to_le_bytes).collect::<Vec<u8>>();
    Ok((Memory::new(bytes(offsets)), Memory::new(bytes(sizes))))
}

/// One decoded column: (null count, validity bitmap or None, first buffer, second buffer).
type ColumnBytes<'py> = (usize, Option<Bound<'py, PyBytes>>, Memory, Memory);

/// Fields `0..len(layouts)` of the compacted rows `data[starts[r]:ends[r]]`, each row starting
/// with `skip` bytes (0, or 2: a KV value's schema id, which must be `schema_id`) and then the
/// null bits of `fields` fields; the buffers of the fields `wanted`, in field order (layout
/// codes: see `rows::Layout::from_code`). At most `threads` threads do the work.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn decode_rows<'py>(py: Python<'py>, data: PyBuffer<u8>, starts: PyBuffer<i64>,
                    ends: PyBuffer<i64>, skip: usize, schema_id: i16, fields: usize,
                    layouts: Vec<i64>, wanted: Vec<bool>, threads: usize)
                    -> PyResult<Vec<ColumnBytes<'py>>> {
    let layouts = layouts.into_iter().map(rows::Layout::from_code).collect::<Option<Vec<_>>>()
        .ok_or_else(|| PyValueError::new_err("decode_rows: unknown layout"))?;
    let (data, starts, ends) = (slice(&data)?, slice(&starts)?, slice(&ends)?);
    let columns = py.detach(|| rows::decode_parallel(data, starts, ends, skip, schema_id, fields,
                                                     &layouts, &wanted, threads))
        .map_err(|e| PyValueError::new_err(e.0))?;
    Ok(columns.into_iter().map(|c| {
        (c.nulls, c.validity.map(|v| PyBytes::new(py, &v)), Memory::new(c.first),
         Memory::new(c.second))
    }).collect())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Memory>()?;
    m.add_class::<SstStream>()?;
    m.add_function(wrap_pyfunction!(decode_rows, m)?)?;
    m.add_function(wrap_pyfunction!(index_handles, m)?)?;
    Ok(())
}
