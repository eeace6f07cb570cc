//! `ncclGroupStart` / `ncclGroupEnd`: a per-thread nesting depth and queue.
//!
//! Outside a group an operation runs at its call. Inside one it is queued
//! (its arguments already checked) and the outermost `ncclGroupEnd` runs
//! the queue in an order that cannot deadlock, whichever ranks and
//! communicators the thread issued on:
//!
//! 1. every send (copying into a mailbox never blocks);
//! 2. every collective is posted (never blocks; the rank completing a
//!    collective runs it);
//! 3. the thread waits for its collectives, then for its receives, in
//!    issue order.
//!
//! Everything other threads could be waiting for from this one (messages,
//! posted collectives) is thus provided before the thread blocks. An
//! operation refused at its call inside a group is not queued; its error is
//! also returned by `ncclGroupEnd`, which still runs the rest of the queue
//! so that the other ranks are not left waiting.

use std::cell::RefCell;
use std::sync::Arc;

use super::collective::{self, Collective};
use super::comm::Comm;
use super::p2p;
use super::status::{Failure, NcclResult};

/// An operation with checked arguments.
pub(crate) enum Task {
    /// A collective, as the `seq`-th of its rank.
    Collective {
        comm: Arc<Comm>,
        seq: u64,
        call: Collective,
    },
    /// `bytes` bytes at `ptr` to rank `peer`.
    Send {
        comm: Arc<Comm>,
        peer: usize,
        ptr: usize,
        bytes: usize,
    },
    /// `bytes` bytes from rank `peer` into `ptr`.
    Recv {
        comm: Arc<Comm>,
        peer: usize,
        ptr: usize,
        bytes: usize,
    },
}

/// A thread's group state.
#[derive(Default)]
struct Group {
    depth: usize,
    queue: Vec<Task>,
    /// The first error of a call refused inside the group.
    error: Option<Failure>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::default();
}

/// Whether the calling thread is inside a group.
pub(crate) fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// `ncclGroupStart`.
pub(crate) fn start() {
    GROUP.with(|g| g.borrow_mut().depth += 1);
}

/// `ncclGroupEnd`: at the outermost level, runs the queued operations.
pub(crate) fn end() -> NcclResult {
    let (queue, error) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Failure::usage("ncclGroupEnd without ncclGroupStart"));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok((Vec::new(), None));
        }
        Ok((std::mem::take(&mut g.queue), g.error.take()))
    })?;
    let result = run(queue);
    error.map_or(result, Err)
}

/// Runs `task` now, or queues it inside a group.
pub(crate) fn submit(task: Task) -> NcclResult {
    let queued = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Some(task);
        }
        g.queue.push(task);
        None
    });
    queued.map_or(Ok(()), |task| run(vec![task]))
}

/// Notes a call refused inside a group, for `ncclGroupEnd` to return.
pub(crate) fn refused(failure: &Failure) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.error.is_none() {
            g.error = Some(failure.clone());
        }
    });
}

/// Runs `tasks` in the deadlock-free order of the module documentation;
/// returns the first error, after running all of them.
fn run(tasks: Vec<Task>) -> NcclResult {
    let mut first_error = None;
    let mut note = |result: NcclResult| {
        if let Err(failure) = result {
            first_error.get_or_insert(failure);
        }
    };
    for task in &tasks {
        if let Task::Send {
            comm,
            peer,
            ptr,
            bytes,
        } = task
        {
            note(p2p::send(comm, *peer, *ptr, *bytes));
        }
    }
    let mut posted = Vec::new();
    for task in &tasks {
        if let Task::Collective { comm, seq, call } = task {
            match collective::post(comm, *seq, *call) {
                Ok(()) => posted.push((comm, *seq)),
                Err(failure) => note(Err(failure)),
            }
        }
    }
    for (comm, seq) in posted {
        note(collective::finish(comm, seq));
    }
    for task in &tasks {
        if let Task::Recv {
            comm,
            peer,
            ptr,
            bytes,
        } = task
        {
            note(p2p::recv(comm, *peer, *ptr, *bytes));
        }
    }
    first_error.map_or(Ok(()), Err)
}
