//! Collectives: their description, the per-operation rendezvous of the
//! ranks, and their execution.
//!
//! A rank's n-th collective on a communicator meets the other ranks' n-th
//! in slot n of the clique. Issuing is split in two so that one thread can
//! take part as several ranks (a group on communicators of
//! `ncclCommInitAll`):
//!
//! - [`post`] never blocks: it leaves the rank's description in the slot,
//!   and the rank that completes the slot runs the whole collective for all
//!   ranks at once (every buffer is host memory), first checking that the
//!   ranks agree on operation, count, type, reduction and root;
//! - [`finish`] waits until the slot has run and returns its result (the
//!   same for every rank). It waits at most the timeout of [`super::wait`]
//!   for missing ranks; it then abandons the slot, so that ranks arriving
//!   later fail at once instead of waiting in turn.

use std::panic::{AssertUnwindSafe, catch_unwind};

use rccl_sys::ncclResult_t;

use super::buffer;
use super::comm::Comm;
use super::dtype::{DataType, RedOp, reduce};
use super::status::{Failure, NcclResult};
use super::wait::{deadline, lock, timeout, wait_until};

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
}

impl Kind {
    /// The C function's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "ncclAllReduce",
            Kind::Broadcast => "ncclBroadcast",
            Kind::Reduce => "ncclReduce",
            Kind::AllGather => "ncclAllGather",
            Kind::ReduceScatter => "ncclReduceScatter",
        }
    }
}

/// One rank's call of a collective, with checked arguments.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Collective {
    pub(crate) kind: Kind,
    /// The C argument `count` (`sendcount` of all-gather, `recvcount` of
    /// reduce-scatter).
    pub(crate) count: usize,
    pub(crate) dtype: DataType,
    /// The reduction, for the reducing collectives.
    pub(crate) op: Option<RedOp>,
    /// The root rank, for broadcast and reduce.
    pub(crate) root: Option<usize>,
    /// Send buffer address (unused on non-root ranks of a broadcast).
    pub(crate) send: usize,
    /// Receive buffer address (unused on non-root ranks of a reduce).
    pub(crate) recv: usize,
}

impl Collective {
    /// Checks the buffers of this call on `comm`: both must lie inside
    /// buffers of the communicator's device, with the sizes `kind` implies
    /// (`nranks * count` for the gathered or scattered side).
    pub(crate) fn check(&self, comm: &Comm) -> NcclResult {
        let total = self
            .count
            .checked_mul(comm.nranks())
            .ok_or_else(|| Failure::argument("the element count overflows"))?;
        let is_root = self.root == Some(comm.rank);
        let (send, recv) = match self.kind {
            Kind::AllReduce => (Some(self.count), Some(self.count)),
            Kind::Broadcast => (is_root.then_some(self.count), Some(self.count)),
            Kind::Reduce => (Some(self.count), is_root.then_some(self.count)),
            Kind::AllGather => (Some(self.count), Some(total)),
            Kind::ReduceScatter => (Some(total), Some(self.count)),
        };
        if let Some(elems) = send {
            buffer::check(comm, "sendbuff", self.send, elems, self.dtype)?;
        }
        if let Some(elems) = recv {
            buffer::check(comm, "recvbuff", self.recv, elems, self.dtype)?;
        }
        Ok(())
    }

    /// What the ranks must agree on.
    fn signature(&self) -> (Kind, usize, DataType, Option<RedOp>, Option<usize>) {
        (self.kind, self.count, self.dtype, self.op, self.root)
    }

    /// A description for messages.
    fn describe(&self) -> String {
        let mut text = format!("{} of {} x {:?}", self.kind.name(), self.count, self.dtype);
        if let Some(op) = self.op {
            text += &format!(" ({op:?})");
        }
        if let Some(root) = self.root {
            text += &format!(" with root {root}");
        }
        text
    }
}

/// Where a slot is.
enum Phase {
    /// Ranks are arriving.
    Gathering,
    /// The last rank to arrive is running the collective.
    Computing,
    /// Run; the result every rank returns.
    Done(NcclResult),
    /// A rank gave up waiting (the message says why): every rank fails.
    Abandoned(String),
}

/// One collective of a clique, from the first rank's arrival until the
/// last rank has left.
pub(crate) struct Slot {
    posted: Vec<Option<Collective>>,
    arrived: usize,
    left: usize,
    phase: Phase,
}

/// Posts `call` as `comm`'s rank in slot `seq`; the rank that completes
/// the slot runs the collective before returning.
pub(crate) fn post(comm: &Comm, seq: u64, call: Collective) -> NcclResult {
    let clique = &comm.clique;
    let n = clique.nranks();
    let mut state = lock(&clique.state);
    let slot = state.slots.entry(seq).or_insert_with(|| Slot {
        posted: vec![None; n],
        arrived: 0,
        left: 0,
        phase: Phase::Gathering,
    });
    if let Phase::Abandoned(why) = &slot.phase {
        let why = why.clone();
        slot.left += 1;
        if slot.left == n {
            state.slots.remove(&seq);
        }
        return Err(Failure::remote(why));
    }
    let Some(place @ None) = slot.posted.get_mut(comm.rank) else {
        return Err(Failure::new(
            ncclResult_t::ncclInternalError,
            format_args!("rank {} posted collective #{seq} twice", comm.rank),
        ));
    };
    *place = Some(call);
    slot.arrived += 1;
    if slot.arrived < n {
        return Ok(());
    }
    slot.phase = Phase::Computing;
    let calls: Vec<Collective> = slot.posted.iter().flatten().copied().collect();
    drop(state);
    // A panic must not leave the slot computing forever.
    let result = catch_unwind(AssertUnwindSafe(|| execute(&calls))).unwrap_or_else(|_| {
        Err(Failure::new(
            ncclResult_t::ncclInternalError,
            "panic while running a collective",
        ))
    });
    if let Err(failure) = &result {
        eprintln!("hip-on-cpu rccl: {}", failure.message);
    }
    let mut state = lock(&clique.state);
    if let Some(slot) = state.slots.get_mut(&seq) {
        slot.phase = Phase::Done(result);
    }
    clique.changed.notify_all();
    Ok(())
}

/// Waits until slot `seq`, where `comm`'s rank has posted, has run, and
/// returns its result.
pub(crate) fn finish(comm: &Comm, seq: u64) -> NcclResult {
    let clique = &comm.clique;
    let n = clique.nranks();
    let mut state = lock(&clique.state);
    loop {
        let (guard, outcome) = wait_until(state, &clique.changed, deadline(), |s| {
            match &s.slots.get(&seq)?.phase {
                Phase::Done(result) => Some(result.clone()),
                Phase::Abandoned(why) => Some(Err(Failure::remote(why))),
                Phase::Gathering | Phase::Computing => None,
            }
        });
        state = guard;
        let Some(slot) = state.slots.get_mut(&seq) else {
            return Err(Failure::new(
                ncclResult_t::ncclInternalError,
                format_args!("collective #{seq} vanished"),
            ));
        };
        let result = match outcome {
            Some(result) => result,
            // A live rank is running it: no time-out applies.
            None if matches!(slot.phase, Phase::Computing) => continue,
            None => {
                let missing: Vec<usize> = (0..n)
                    .filter(|r| *r != comm.rank && slot.posted[*r].is_none())
                    .collect();
                let what = slot.posted[comm.rank]
                    .map_or_else(|| "a collective".to_string(), |c| c.describe());
                let why = format!(
                    "{what} (#{seq}): rank {} waited {} s for rank(s) {missing:?}, which did not call it",
                    comm.rank,
                    timeout().as_secs_f64()
                );
                eprintln!("hip-on-cpu rccl: {why}");
                slot.posted[comm.rank] = None;
                slot.arrived -= 1;
                slot.phase = Phase::Abandoned(why.clone());
                clique.changed.notify_all();
                Err(Failure::remote(why))
            }
        };
        slot.left += 1;
        if slot.left == n {
            state.slots.remove(&seq);
        }
        return result;
    }
}

/// Runs one collective for all ranks (`calls` in rank order).
fn execute(calls: &[Collective]) -> NcclResult {
    let Some(first) = calls.first().copied() else {
        return Ok(());
    };
    if let Some((rank, other)) = calls
        .iter()
        .enumerate()
        .find(|(_, c)| c.signature() != first.signature())
    {
        return Err(Failure::usage(format_args!(
            "the ranks disagree: rank 0 called {}, rank {rank} {}",
            first.describe(),
            other.describe()
        )));
    }
    let n = calls.len();
    let bytes = first.count * first.dtype.size();
    // Every input is copied before any output is written, so in-place
    // operations (and any other overlap) read the original data. The ranges
    // were checked at issue with these sizes, and every issuing thread is
    // blocked in its call until this collective is done, keeping its
    // buffers alive and untouched: that is what each SAFETY below relies on.
    let read_all = |len: usize| -> Vec<Vec<u8>> {
        calls
            .iter()
            // SAFETY: a checked send buffer of `len` bytes (see above).
            .map(|c| unsafe { buffer::read(c.send, len) })
            .collect()
    };
    let write_to = |c: &Collective, data: &[u8]| {
        // SAFETY: a checked receive buffer of `data.len()` bytes (see above).
        unsafe { buffer::write(c.recv, data) }
    };
    let reduced = |inputs: &[Vec<u8>]| reduce(first.dtype, first.op.unwrap_or(RedOp::Sum), inputs);
    let root = first.root.and_then(|r| calls.get(r));
    match first.kind {
        Kind::AllReduce => {
            let out = reduced(&read_all(bytes));
            calls.iter().for_each(|c| write_to(c, &out));
        }
        Kind::Reduce => {
            let out = reduced(&read_all(bytes));
            root.iter().for_each(|c| write_to(c, &out));
        }
        Kind::Broadcast => {
            let Some(root) = root else {
                return Err(Failure::argument("broadcast without a root"));
            };
            // SAFETY: the root's checked send buffer (see above).
            let data = unsafe { buffer::read(root.send, bytes) };
            calls.iter().for_each(|c| write_to(c, &data));
        }
        Kind::AllGather => {
            let all = read_all(bytes).concat();
            calls.iter().for_each(|c| write_to(c, &all));
        }
        Kind::ReduceScatter => {
            let out = reduced(&read_all(n * bytes));
            for (c, block) in calls.iter().zip(out.chunks(bytes.max(1))) {
                write_to(c, block);
            }
        }
    }
    Ok(())
}
