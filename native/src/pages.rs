//! A stream's pages with their rows decoded on the thread that walks them.

use std::sync::Arc;

use crate::rows::{Column, Plan};
use crate::sst::{Error, Page, Stream};

/// A page, and its rows decoded by the plan it names when they all decode by it.
pub type Decoded = (Page, Option<(Arc<Plan>, Vec<Column>)>);

/// The next page of `stream` (as `Stream::page`), its rows decoded by `plan` if there is one
/// and every row decodes by it (the reader decodes the others, and names what is wrong).
pub fn fill<const RANGE: bool>(stream: &mut Stream<'_, RANGE>, max_rows: usize,
                               max_bytes: usize, overhead: usize, plan: Option<Arc<Plan>>)
                               -> Result<Decoded, Error> {
    let page = stream.page(max_rows, max_bytes, overhead)?;
    let columns = match (&plan, offsets(&page.begin), offsets(&page.end)) {
        (Some(plan), Some(begin), Some(end)) if !begin.is_empty() => {
            plan.decode(&page.data, begin, end, 1).ok()
        }
        _ => None,
    };
    Ok((page, plan.zip(columns)))
}

/// A page's value offsets as int64s (bytes the heap allocated, aligned for any scalar).
fn offsets(bytes: &[u8]) -> Option<&[i64]> {
    // SAFETY: any 8 bytes are an i64; bytes before or after the aligned middle leave the
    // decode to the reader.
    match unsafe { bytes.align_to::<i64>() } {
        (&[], offsets, &[]) => Some(offsets),
        _ => None,
    }
}
