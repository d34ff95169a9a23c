//! A stream's key space cut into ranges (`sst::pivots`), walked by a few threads, each taking
//! the next range as it finishes one, their pages handed over in key order: the values of one
//! stream, walked on several CPUs.
//!
//! A thread hands over its pages without waiting for them to be taken, so that a thread done
//! with its range walks the next while the reader takes the pages of an earlier one; memory is
//! bounded by the ranges walked ahead of the reader (`workers` + 1 of them, each about a page)
//! and the page being taken apart. Once the reader says how its rows decode (`decode_as`), each
//! thread also decodes its pages, so that the decode runs on as many CPUs as the walk.

use std::collections::VecDeque;
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::memory;
use crate::pages::{self, Decoded};
use crate::rows::Plan;
use crate::sst::{self, File, Page, Stream};

type Result<T> = std::result::Result<T, sst::Error>;

/// What a range's thread hands over: its pages, the last with each file's entries it read
/// (or, when it learns only after a page that there is no more, those counts alone).
enum Piece {
    Page(Decoded, Option<Vec<u64>>),
    End(Vec<u64>),
    Failed(sst::Error),
}

/// A range of keys: its first (the files' first, when None) and the first after it (none).
type Range = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The ranges no thread took yet, and how far ahead of the reader the threads may be.
struct Claims {
    /// Each range with where its pieces go, in key order.
    waiting: VecDeque<(Range, Sender<Piece>)>,
    /// Ranges taken by threads, and ranges whose last piece the reader took.
    claimed: usize,
    read: usize,
    /// The most ranges taken by threads and not read yet.
    ahead: usize,
    /// The reader went: the threads end.
    closed: bool,
}

/// What the reader and the threads share.
struct Shared {
    claims: Mutex<Claims>,
    /// Signalled when the reader finishes a range or goes.
    moved: Condvar,
    /// How the pages' rows decode, once the reader said.
    plan: Mutex<Option<Arc<Plan>>>,
}

impl Shared {
    fn claims(&self) -> MutexGuard<'_, Claims> {
        self.claims.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next range to walk, once the reader is close enough behind; None when there is
    /// none left or the reader went.
    fn next(&self) -> Option<(Range, Sender<Piece>)> {
        let mut claims = self.claims();
        loop {
            if claims.closed {
                return None;
            }
            if claims.claimed < claims.read + claims.ahead {
                let range = claims.waiting.pop_front()?;
                claims.claimed += 1;
                return Some(range);
            }
            claims = self.moved.wait(claims).unwrap_or_else(|e| e.into_inner());
        }
    }
}

pub struct Ranges {
    files: Vec<File<'static>>,
    /// Each file's entries read: by the stream these ranges continue, then by ranges ended.
    counted: Vec<u64>,
    /// Each range's pieces, in key order, the first being read. Taken by one thread at a
    /// time (the stream's user); the lock lets Python share them.
    pieces: Mutex<VecDeque<Receiver<Piece>>>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// A page handed over in part: it and the first of its values not handed over yet.
    rest: Option<(Decoded, usize)>,
    done: bool,
}

impl Ranges {
    /// The values `stream` (of every key of `files`) has not read yet, in ranges of about
    /// `page_bytes` of blocks, walked by `workers` threads into pages of `page_bytes` (with
    /// `overhead` bytes a value), decoded by `plan` if there is one. The files' bytes must
    /// outlive the ranges (their threads end when the ranges go).
    pub fn after(stream: &Stream<'static>, files: &[File<'static>], workers: usize,
                 page_bytes: usize, overhead: usize, plan: Option<Arc<Plan>>)
                 -> Result<Ranges> {
        let from = stream.next_key();
        let mut keys = sst::pivots(files, page_bytes, workers)?;
        if let Some(first) = &from {
            keys.retain(|k| k > first);
        }
        let starts: Vec<_> = std::iter::once(from).chain(keys.iter().cloned().map(Some)).collect();
        let ends = keys.into_iter().map(Some).chain(std::iter::once(None));
        let done = stream.done();
        let (mut waiting, mut pieces) = (VecDeque::new(), VecDeque::new());
        for range in starts.into_iter().zip(ends).filter(|_| !done) {
            let (give, take) = channel();
            waiting.push_back((range, give));
            pieces.push_back(take);
        }
        let workers = workers.max(1).min(waiting.len());
        let shared = Arc::new(Shared {
            claims: Mutex::new(Claims { waiting, claimed: 0, read: 0, ahead: workers + 1,
                                        closed: false }),
            moved: Condvar::new(), plan: Mutex::new(plan),
        });
        let threads = (0..workers).map(|_| {
            let (files, shared) = (files.to_vec(), shared.clone());
            std::thread::spawn(move || walk(&files, &shared, page_bytes, overhead))
        }).collect();
        Ok(Ranges { files: files.to_vec(), counted: stream.counted(), pieces: Mutex::new(pieces),
                    shared, threads, rest: None, done })
    }

    /// Decode the rows of the pages walked from now on by `plan` (until another replaces it).
    pub fn decode_as(&self, plan: Arc<Plan>) {
        *self.shared.plan.lock().unwrap_or_else(|e| e.into_inner()) = Some(plan);
    }

    /// The first unread range's next piece; `wait`: until it comes (else None when none is
    /// ready, or no range is left).
    fn take(&mut self, wait: bool) -> Result<Option<Piece>> {
        let pieces = self.pieces.lock().unwrap_or_else(|e| e.into_inner());
        let Some(range) = pieces.front() else { return Ok(None) };
        let piece = if wait { range.recv().ok() } else {
            match range.try_recv() {
                Ok(piece) => Some(piece),
                Err(TryRecvError::Empty) => return Ok(None),
                Err(TryRecvError::Disconnected) => None,
            }
        };
        match piece {
            Some(Piece::Failed(e)) => Err(e),
            Some(piece) => Ok(Some(piece)),
            None => Err(sst::Error("a key range's reading thread ended early".into())),
        }
    }

    /// The first unread range ended with these counts: the threads may walk one more; after
    /// the last, the files' entry counts are checked.
    fn ended(&mut self, counted: Vec<u64>) -> Result<()> {
        for (total, n) in self.counted.iter_mut().zip(counted) {
            *total += n;
        }
        let left = {
            let mut pieces = self.pieces.lock().unwrap_or_else(|e| e.into_inner());
            pieces.pop_front();
            pieces.len()
        };
        self.shared.claims().read += 1;
        self.shared.moved.notify_all();
        if left == 0 {
            sst::verify(self.counted.iter().copied(), &self.files)?;
            self.done = true;
        }
        Ok(())
    }

    /// The next values, up to `max_rows` of them: a range's page, or what is left of one.
    pub fn page(&mut self, max_rows: usize) -> Result<Decoded> {
        loop {
            if let Some((page, at)) = self.rest.take() {
                let out = self.hand_over(page, at, max_rows);
                self.settle()?;
                return Ok(out);
            }
            match self.take(true)? {
                Some(Piece::Page(page, end)) => self.taken(page, end)?,
                Some(Piece::End(counted)) => self.ended(counted)?,
                _ => return Ok((Page { data: Vec::new(), begin: Vec::new(), end: Vec::new() },
                                None)),
            }
        }
    }

    /// A page taken from the first unread range, with its counts when it was the range's last.
    fn taken(&mut self, page: Decoded, end: Option<Vec<u64>>) -> Result<()> {
        self.rest = Some((page, 0));
        end.map_or(Ok(()), |counted| self.ended(counted))
    }

    /// Take the ranges' ends that are ready, without waiting: `done` as soon as it is known.
    fn settle(&mut self) -> Result<()> {
        while self.rest.is_none() {
            match self.take(false)? {
                Some(Piece::End(counted)) => self.ended(counted)?,
                Some(Piece::Page(page, end)) => self.taken(page, end)?,
                _ => break,
            }
        }
        Ok(())
    }

    /// Values `at..` of `page`, up to `max_rows`; what is left stays for the next call.
    fn hand_over(&mut self, (page, decoded): Decoded, at: usize, max_rows: usize) -> Decoded {
        let rows = page.rows();
        let upto = rows.min(at + max_rows.max(1));
        if at == 0 && upto == rows {
            return (page, decoded);
        }
        // Rare (a read that stops inside a page): the part handed over is copied, and its
        // rows are left to the reader to decode.
        let begin = page.begin[8 * at..8 * upto].to_vec();
        let end = page.end[8 * at..8 * upto].to_vec();
        let mut data = memory::take(page.data.len());
        data.extend_from_slice(&page.data);
        if upto < rows {
            self.rest = Some(((page, None), upto));
        }
        (Page { data, begin, end }, None)
    }

    pub fn done(&self) -> bool {
        self.done && self.rest.is_none()
    }

    /// Step over the next `n` values: how many there were.
    pub fn skip(&mut self, n: u64) -> Result<u64> {
        let mut skipped = 0;
        while skipped < n {
            let rows = self.page(usize::try_from(n - skipped).unwrap_or(usize::MAX))?.0.rows();
            if rows == 0 {
                break;
            }
            skipped += rows as u64;
        }
        Ok(skipped)
    }
}

/// A thread's work: the next range, while there is one, into pages of `bytes` (with
/// `overhead` bytes a value), handed over as they are filled.
fn walk(files: &[File<'static>], shared: &Shared, bytes: usize, overhead: usize) {
    while let Some(((from, upto), give)) = shared.next() {
        let mut stream = Stream::range(files, from, upto);
        loop {
            let plan = shared.plan.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let piece = match pages::fill(&mut stream, usize::MAX, bytes, overhead, plan) {
                Ok((page, _)) if page.rows() == 0 => Piece::End(stream.counted()),
                Ok(page) => Piece::Page(page, stream.done().then(|| stream.counted())),
                Err(e) => Piece::Failed(e),
            };
            let last = !matches!(piece, Piece::Page(_, None));
            // An error: the reader went (it closes the claims too).
            if give.send(piece).is_err() || last {
                break;
            }
        }
    }
}

impl Drop for Ranges {
    fn drop(&mut self) {
        // The threads learn that nobody will take their pages, and end before the files'
        // buffers can go.
        self.shared.claims().closed = true;
        self.shared.moved.notify_all();
        self.pieces.lock().unwrap_or_else(|e| e.into_inner()).clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
