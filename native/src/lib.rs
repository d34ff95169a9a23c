//! `fluss_spark.protocol.apache_fluss._native`: the compiled decode of Apache Fluss KV snapshots.
//!
//! Two calls, each the whole of a chain of numpy passes of `fluss_spark/protocol/apache_fluss/`
//! (`rocksdb_sst.py`, `compacted_row.py`) done in one walk with the GIL released. The Python
//! modules decide when to call them and fall back to numpy on any error, so an error here is
//! a ValueError and the numpy code gives the user's message.

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

/// The live values of SST files: (joined blocks, int64 begins, int64 ends) as `Memory`.
///
/// `files[i]` is a file's bytes (uint8), `blocks[i]` its data blocks' (offsets, sizes),
/// `entries[i]` its entry count and `checksums[i]` its footer's checksum type; the joined
/// blocks may hold at most `max_bytes`. At most `threads` threads do the work.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn sst_live_values(py: Python<'_>, files: Vec<PyBuffer<u8>>, blocks: Vec<(Vec<u64>, Vec<u64>)>,
                   entries: Vec<u64>, checksums: Vec<u8>, max_bytes: u64, threads: usize)
                   -> PyResult<(Memory, Memory, Memory)> {
    if blocks.len() != files.len() || entries.len() != files.len()
        || checksums.len() != files.len() {
        return Err(PyValueError::new_err("sst_live_values: mismatched arguments"));
    }
    let mut tables = Vec::with_capacity(files.len());
    for (((file, (offsets, sizes)), count), checksum) in
        files.iter().zip(blocks).zip(entries).zip(checksums) {
        if offsets.len() != sizes.len() {
            return Err(PyValueError::new_err("sst_live_values: mismatched block handles"));
        }
        tables.push(sst::Table { file: slice(file)?, blocks: offsets.into_iter().zip(sizes).collect(),
                                 entries: count, checksum });
    }
    let (total, reader) = sst::read(&tables, max_bytes).map_err(|e| PyValueError::new_err(e.0))?;
    let mut joined = memory::take(total as usize);
    // Every byte is written by a block; zeroed first all the same (a kept buffer is resident,
    // so this is a memset, not page faults).
    joined.resize(total as usize, 0);
    let (begin, end) = py.detach(|| reader.fill(&mut joined, threads))
        .map_err(|e| PyValueError::new_err(e.0))?;
    Ok((Memory::new(joined), Memory::new(begin), Memory::new(end)))
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
    m.add_function(wrap_pyfunction!(sst_live_values, m)?)?;
    m.add_function(wrap_pyfunction!(decode_rows, m)?)?;
    Ok(())
}
