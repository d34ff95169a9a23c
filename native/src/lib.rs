//! `fluss_spark.protocol.apache_fluss._native`: the compiled decode of Apache Fluss KV snapshots.
//!
//! A stream of SST files' live values and a row decode, each the whole of a chain of numpy
//! passes of `fluss_spark/protocol/apache_fluss/` (`rocksdb_sst.py`, `compacted_row.py`) done in
//! one walk with the GIL released. An error here is a ValueError. The Python modules decide
//! what it means: a stream or a decode refused before any value goes to numpy (or RocksDB),
//! whose code gives the user's message; a block found damaged mid-stream is the snapshot's
//! corruption, named by the caller.

use std::sync::Arc;

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

mod memory;
mod pages;
mod ranges;
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

/// The live values of SST files, in key order, a page at a time (the arguments as `tables`).
///
/// A stream holds the files' buffers until it goes; it is used by one thread at a time.
/// `parallel` hands what is left of it to threads that walk ranges of its keys.
#[pyclass(module = "fluss_spark.protocol.apache_fluss._native")]
struct SstStream {
    /// Read on the calling thread, until `parallel`.
    stream: sst::Stream<'static>,
    ranges: Option<ranges::Ranges>,
    /// How the rows of the pages read on the calling thread decode (`decode_as`).
    plan: Option<Arc<rows::Plan>>,
    files: Vec<sst::File<'static>>,
    done: bool,
    // Last: the streams' slices borrow these buffers, and the ranges' threads end first.
    _buffers: Vec<PyBuffer<u8>>,
}

#[pymethods]
impl SstStream {
    #[new]
    fn new(files: Vec<PyBuffer<u8>>, blocks: Vec<Handles>, entries: Vec<u64>,
           checksums: Vec<u8>, mapped: Vec<bool>) -> PyResult<SstStream> {
        let planned = tables(&files, blocks, entries, checksums, mapped)?.iter()
            .map(sst::File::plan).collect::<Result<Vec<_>, _>>().map_err(sst_error)?;
        // SAFETY: the slices point into the buffers of `files`, which the struct owns and which
        // stay alive and unchanged (PyBuffer holds them read-only) until after the streams and
        // any thread reading them are gone (the field order).
        let planned = unsafe {
            std::mem::transmute::<Vec<sst::File<'_>>, Vec<sst::File<'static>>>(planned)
        };
        Ok(SstStream { stream: sst::Stream::new(&planned), ranges: None, plan: None,
                       files: planned, done: false, _buffers: files })
    }

    /// The next live values (data, int64 begins, int64 ends, their rows decoded or None): up
    /// to `max_rows`, fewer once their bytes and `overhead` bytes a value reach `max_bytes`
    /// (after `parallel`, pages of the size it was given); none at the end. The rows come
    /// decoded (`decode_as`) as (schema id, layout codes, wanted, columns as `decode_rows`).
    fn page<'py>(&mut self, py: Python<'py>, max_rows: usize, max_bytes: usize,
                 overhead: usize)
                 -> PyResult<(Memory, Memory, Memory, Option<DecodedBytes<'py>>)> {
        let (stream, ranges, plan) = (&mut self.stream, &mut self.ranges, self.plan.clone());
        let (page, done) = py.detach(|| match ranges {
            Some(r) => (r.page(max_rows), r.done()),
            None => (pages::fill(stream, max_rows, max_bytes, overhead, plan), stream.done()),
        });
        let (page, decoded) = page.map_err(sst_error)?;
        self.done = done;
        let decoded = decoded.map(|(plan, columns)| {
            let (schema_id, layouts, wanted) = plan.parts();
            (schema_id, layouts, wanted, column_bytes(py, columns))
        });
        Ok((Memory::new(page.data), Memory::new(page.begin), Memory::new(page.end), decoded))
    }

    /// Decode the rows of the pages walked from now on (after `parallel`, on its threads) by
    /// these arguments of `decode_rows`, each once it is filled; the pages of rows that do not
    /// all decode by them come undecoded.
    fn decode_as(&mut self, skip: usize, schema_id: i16, fields: usize, layouts: Vec<i64>,
                 wanted: Vec<bool>) -> PyResult<()> {
        let plan = Arc::new(plan(skip, schema_id, fields, layouts, wanted)?);
        if let Some(ranges) = &self.ranges {
            ranges.decode_as(plan.clone());
        }
        self.plan = Some(plan);
        Ok(())
    }

    /// Walk the values left on `workers` threads, a range of keys of about `page_bytes` each
    /// at a time, into pages of `page_bytes` (`overhead` as `page`); the pages still come in
    /// key order, decoded as `decode_as` said. Nothing changes with fewer than two workers, or
    /// once called, or when a block read to cut the ranges is damaged: the stream then meets it
    /// where it lies, after the values before it.
    fn parallel(&mut self, py: Python<'_>, workers: usize, page_bytes: usize, overhead: usize) {
        if workers < 2 || self.ranges.is_some() {
            return;
        }
        let (stream, files, plan) = (&self.stream, &self.files, self.plan.clone());
        self.ranges = py.detach(|| ranges::Ranges::after(stream, files, workers, page_bytes,
                                                         overhead, plan)).ok();
    }

    /// Whether every value was read (and the files held the entries their tables say).
    #[getter]
    fn done(&self) -> bool {
        self.done
    }

    /// Step over the next `n` live values: how many there were.
    fn skip(&mut self, py: Python<'_>, n: u64) -> PyResult<u64> {
        let (stream, ranges) = (&mut self.stream, &mut self.ranges);
        let (skipped, done) = py.detach(|| match ranges {
            Some(r) => (r.skip(n), r.done()),
            None => (stream.skip(n), stream.done()),
        });
        self.done = done;
        skipped.map_err(sst_error)
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

/// The (key, value) entries of a small block of an SST file (see `sst::block_entries`).
#[pyfunction]
fn block_entries<'py>(py: Python<'py>, file: PyBuffer<u8>, offset: u64, size: u64,
                      checksum: u8) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let file = slice(&file)?;
    let entries = py.detach(|| sst::block_entries(file, offset, size, checksum))
        .map_err(sst_error)?;
    Ok(entries.iter().map(|(k, v)| (PyBytes::new(py, k), PyBytes::new(py, v))).collect())
}

/// One decoded column: (null count, validity bitmap or None, first buffer, second buffer).
type ColumnBytes<'py> = (usize, Option<Bound<'py, PyBytes>>, Memory, Memory);

/// A page's decoded rows: (schema id, layout codes, wanted, columns).
type DecodedBytes<'py> = (i16, Vec<i64>, Vec<bool>, Vec<ColumnBytes<'py>>);

/// Decoded columns as Python takes them.
fn column_bytes(py: Python<'_>, columns: Vec<rows::Column>) -> Vec<ColumnBytes<'_>> {
    columns.into_iter().map(|c| {
        (c.nulls, c.validity.map(|v| PyBytes::new(py, &v)), Memory::new(c.first),
         Memory::new(c.second))
    }).collect()
}

/// The decode of `decode_rows`'s arguments.
fn plan(skip: usize, schema_id: i16, fields: usize, layouts: Vec<i64>, wanted: Vec<bool>)
        -> PyResult<rows::Plan> {
    let layouts = layouts.into_iter().map(rows::Layout::from_code).collect::<Option<Vec<_>>>()
        .ok_or_else(|| PyValueError::new_err("decode_rows: unknown layout"))?;
    rows::Plan::new(skip, schema_id, fields, layouts, wanted)
        .map_err(|e| PyValueError::new_err(e.0))
}

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
    let plan = plan(skip, schema_id, fields, layouts, wanted)?;
    let (data, starts, ends) = (slice(&data)?, slice(&starts)?, slice(&ends)?);
    let columns = py.detach(|| plan.decode(data, starts, ends, threads))
        .map_err(|e| PyValueError::new_err(e.0))?;
    Ok(column_bytes(py, columns))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Memory>()?;
    m.add_class::<SstStream>()?;
    m.add_function(wrap_pyfunction!(decode_rows, m)?)?;
    m.add_function(wrap_pyfunction!(index_handles, m)?)?;
    m.add_function(wrap_pyfunction!(block_entries, m)?)?;
    Ok(())
}
