//! A stream's key space cut into ranges (`sst::pivots`), each walked by a thread of its own,
//! their pages handed over in key order: the values of one stream, walked on several CPUs.
//!
//! A range's thread hands over one page at a time and waits until it is taken, so memory is
//! a page per running range (at most `workers` of them) and the page being taken apart. Once
//! the reader says how its rows decode (`decode_as`), each thread also decodes its pages, so
//! that the decode runs on as many CPUs as the walk.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::memory;
use crate::pages::{self, Decoded};
use crate::rows::Plan;
use crate::sst::{self, File, Page, Stream};

type Result<T> = std::result::Result<T, sst::Error>;

/// How the pages' rows decode, once the reader said (shared with the ranges' threads).
type Shared = Arc<Mutex<Option<Arc<Plan>>>>;

/// What a range's thread hands over: its pages, then each file's entries it read (with its
/// last page when it knows the page is its last, so that the reader knows at once).
enum Piece {
    Page(Decoded, Option<Vec<u64>>),
    End(Vec<u64>),
    Failed(sst::Error),
}

/// A range of keys: its first (the files' first, when None) and the first after it (none).
type Range = (Option<Vec<u8>>, Option<Vec<u8>>);

struct Running {
    /// Taken by one thread at a time (the stream's user); the lock lets Python share it.
    pieces: Mutex<Receiver<Piece>>,
    thread: JoinHandle<()>,
}

pub struct Ranges {
    files: Vec<File<'static>>,
    /// Each file's entries read: by the stream these ranges continue, then by ranges ended.
    counted: Vec<u64>,
    /// The ranges not started yet.
    waiting: VecDeque<Range>,
    running: VecDeque<Running>,
    workers: usize,
    page_bytes: usize,
    overhead: usize,
    /// A page handed over in part: it and the first of its values not handed over yet.
    rest: Option<(Decoded, usize)>,
    plan: Shared,
    done: bool,
}

impl Ranges {
    /// The values `stream` (of every key of `files`) has not read yet, in ranges of about
    /// `page_bytes` of blocks, walked by `workers` threads into pages of `page_bytes` (with
    /// `overhead` bytes a value). The files' bytes must outlive the ranges (their threads end
    /// when the ranges go).
    pub fn after(stream: &Stream<'static>, files: &[File<'static>], workers: usize,
                 page_bytes: usize, overhead: usize) -> Result<Ranges> {
        let from = stream.next_key();
        let mut keys = sst::pivots(files, page_bytes)?;
        if let Some(first) = &from {
            keys.retain(|k| k > first);
        }
        let starts: Vec<_> = std::iter::once(from).chain(keys.iter().cloned().map(Some)).collect();
        let ends = keys.into_iter().map(Some).chain(std::iter::once(None));
        let done = stream.done();
        let mut ranges = Ranges {
            files: files.to_vec(), counted: stream.counted(),
            waiting: if done { VecDeque::new() } else { starts.into_iter().zip(ends).collect() },
            running: VecDeque::new(), workers: workers.max(1), page_bytes, overhead, rest: None,
            plan: Shared::default(), done,
        };
        ranges.start();
        Ok(ranges)
    }

    /// Start ranges until `workers` of them run.
    fn start(&mut self) {
        while self.running.len() < self.workers {
            let Some((from, upto)) = self.waiting.pop_front() else { return };
            let (files, bytes, overhead) = (self.files.clone(), self.page_bytes, self.overhead);
            let plan = self.plan.clone();
            // A rendezvous: the thread waits with its page until it is taken.
            let (give, pieces) = sync_channel(0);
            let thread = std::thread::spawn(move || {
                let mut stream = Stream::range(&files, from, upto);
                loop {
                    let plan = plan.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    match pages::fill(&mut stream, usize::MAX, bytes, overhead, plan) {
                        Ok((page, _)) if page.rows() == 0 => break,
                        Ok(page) => {
                            let end = stream.done().then(|| stream.counted());
                            let last = end.is_some();
                            // An error: the ranges were dropped.
                            if give.send(Piece::Page(page, end)).is_err() || last {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = give.send(Piece::Failed(e));
                            return;
                        }
                    }
                }
                let _ = give.send(Piece::End(stream.counted()));
            });
            self.running.push_back(Running { pieces: Mutex::new(pieces), thread });
        }
    }

    /// The first running range's next piece; `wait`: until it comes (else None when none is
    /// ready).
    fn take(&mut self, wait: bool) -> Result<Option<Piece>> {
        let Some(range) = self.running.front() else { return Ok(None) };
        let pieces = range.pieces.lock().unwrap_or_else(|e| e.into_inner());
        let piece = if wait { pieces.recv().ok() } else {
            match pieces.try_recv() {
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

    /// The first running range ended with these counts: the next one starts; after the last,
    /// the files' entry counts are checked.
    fn ended(&mut self, counted: Vec<u64>) -> Result<()> {
        for (total, n) in self.counted.iter_mut().zip(counted) {
            *total += n;
        }
        if let Some(range) = self.running.pop_front() {
            let _ = range.thread.join();
        }
        self.start();
        if self.running.is_empty() {
            sst::verify(self.counted.iter().copied(), &self.files)?;
            self.done = true;
        }
        Ok(())
    }

    /// Decode the rows of the pages walked from now on by `plan` (until another replaces it).
    pub fn decode_as(&self, plan: Arc<Plan>) {
        *self.plan.lock().unwrap_or_else(|e| e.into_inner()) = Some(plan);
    }

    /// The next values, up to `max_rows` of them: a range's page, or what is left of one.
    pub fn page(&mut self, max_rows: usize) -> Result<Decoded> {
        loop {
            if let Some((page, at)) = self.rest.take() {
                let out = self.hand_over(page, at, max_rows);
                self.settle()?;
                return Ok(out);
            }
            if self.done || self.running.is_empty() {
                return Ok((Page { data: Vec::new(), begin: Vec::new(), end: Vec::new() }, None));
            }
            match self.take(true)? {
                Some(Piece::Page(page, end)) => self.taken(page, end)?,
                Some(Piece::End(counted)) => self.ended(counted)?,
                _ => unreachable!("a wait gives a piece or an error"),
            }
        }
    }

    /// A page taken from the first running range, with its counts when it was the range's last.
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

impl Drop for Ranges {
    fn drop(&mut self) {
        // A thread waiting to hand over a page learns that nobody will take it; each ends
        // before the files' buffers can go.
        self.waiting.clear();
        for range in self.running.drain(..) {
            drop(range.pieces);
            let _ = range.thread.join();
        }
    }
}
