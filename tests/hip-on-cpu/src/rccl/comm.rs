//! Communicators: the state the ranks of one communicator share (a
//! [`Clique`]), each rank's handle, and how ranks join.
//!
//! A handle (`ncclComm_t`) is an opaque token, never dereferenced: it names
//! an entry of a registry, so a stale or foreign handle is an
//! `ncclInvalidArgument` instead of undefined behaviour, and tokens are
//! never reused. `ncclCommInitRank` is a rendezvous keyed by the unique id:
//! each rank registers its device and waits (bounded, see [`super::wait`])
//! until all ranks have joined; the last one creates the clique.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rccl_sys::ncclComm_t;

use super::collective::Slot;
use super::status::{Failure, NcclResult};
use super::wait::{deadline, lock, timeout, wait_until};

/// What the ranks of one communicator share.
pub(crate) struct Clique {
    /// The device of each rank.
    pub(crate) devices: Vec<c_int>,
    /// Collectives in progress and messages in flight.
    pub(crate) state: Mutex<CliqueState>,
    /// Signalled whenever `state` changes.
    pub(crate) changed: Condvar,
}

/// The mutable part of a [`Clique`].
#[derive(Default)]
pub(crate) struct CliqueState {
    /// Collectives by sequence number, while some rank still needs them.
    pub(crate) slots: HashMap<u64, Slot>,
    /// Sent and not yet received messages by `(sender, receiver)`, in
    /// sending order.
    pub(crate) mailboxes: HashMap<(usize, usize), VecDeque<Vec<u8>>>,
}

impl Clique {
    fn new(devices: Vec<c_int>) -> Arc<Clique> {
        Arc::new(Clique {
            devices,
            state: Mutex::new(CliqueState::default()),
            changed: Condvar::new(),
        })
    }

    /// The number of ranks.
    pub(crate) fn nranks(&self) -> usize {
        self.devices.len()
    }
}

/// One rank's communicator.
pub(crate) struct Comm {
    /// The shared state.
    pub(crate) clique: Arc<Clique>,
    /// This rank, `0..nranks`.
    pub(crate) rank: usize,
    /// Sequence number of this rank's next collective; the ranks' n-th
    /// collectives meet in slot n.
    next_seq: AtomicU64,
}

impl Comm {
    fn new(clique: Arc<Clique>, rank: usize) -> Comm {
        Comm {
            clique,
            rank,
            next_seq: AtomicU64::new(0),
        }
    }

    /// This rank's device.
    pub(crate) fn device(&self) -> c_int {
        self.clique.devices.get(self.rank).copied().unwrap_or(0)
    }

    /// The number of ranks.
    pub(crate) fn nranks(&self) -> usize {
        self.clique.nranks()
    }

    /// Takes the sequence number of this rank's next collective.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }
}

/// Live communicators by handle value.
static COMMS: Mutex<BTreeMap<usize, Arc<Comm>>> = Mutex::new(BTreeMap::new());

/// Index of the next handle token.
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(1);

/// Spacing of handle tokens (they look like aligned addresses).
const HANDLE_STRIDE: usize = 64;

/// Registers `comm` under a fresh token.
fn register(comm: Comm) -> ncclComm_t {
    let token = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed) * HANDLE_STRIDE;
    lock(&COMMS).insert(token, Arc::new(comm));
    std::ptr::without_provenance_mut(token)
}

/// The live communicator behind `handle`.
pub(crate) fn lookup(handle: ncclComm_t) -> NcclResult<Arc<Comm>> {
    if handle.is_null() {
        return Err(Failure::argument("the communicator is null"));
    }
    lock(&COMMS)
        .get(&handle.addr())
        .cloned()
        .ok_or_else(|| Failure::argument("not a live communicator (destroyed?)"))
}

/// Frees `handle` (`ncclCommDestroy`, `ncclCommAbort`). Operations already
/// queued in a group keep the shared state alive until they are done.
pub(crate) fn destroy(handle: ncclComm_t) -> NcclResult {
    if handle.is_null() {
        return Err(Failure::argument("the communicator is null"));
    }
    lock(&COMMS)
        .remove(&handle.addr())
        .map(drop)
        .ok_or_else(|| Failure::argument("not a live communicator (destroyed twice?)"))
}

/// Fails when two ranks share a device (NCCL's "duplicate GPU").
fn check_distinct(devices: &[c_int]) -> NcclResult {
    for (rank, d) in devices.iter().enumerate() {
        if let Some(other) = devices[..rank].iter().position(|e| e == d) {
            return Err(Failure::usage(format_args!(
                "ranks {other} and {rank} are both on device {d}"
            )));
        }
    }
    Ok(())
}

/// Ranks joining one communicator.
struct Joining {
    /// The communicator's size, as the first rank to join gave it.
    nranks: usize,
    /// The device of each rank that has joined.
    devices: Vec<Option<c_int>>,
    /// Set once every rank has joined: the clique, or why it was refused.
    outcome: Option<NcclResult<Arc<Clique>>>,
    /// Ranks that have taken the outcome.
    taken: usize,
}

/// Communicators being joined, by unique id.
static JOINING: Mutex<BTreeMap<[u8; 128], Joining>> = Mutex::new(BTreeMap::new());

/// Signalled when a communicator's last rank joins.
static JOINED: Condvar = Condvar::new();

/// Checks a communicator size given as a C `int`.
pub(crate) fn check_nranks(nranks: c_int) -> NcclResult<usize> {
    usize::try_from(nranks)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| Failure::argument(format_args!("nranks {nranks} is below 1")))
}

/// `ncclCommInitRank`: joins communicator `id` as `rank` of `nranks` on
/// `device`, waiting until every rank has joined.
pub(crate) fn init_rank(
    nranks: c_int,
    id: [u8; 128],
    rank: c_int,
    device: c_int,
) -> NcclResult<ncclComm_t> {
    let n = check_nranks(nranks)?;
    let r = usize::try_from(rank)
        .ok()
        .filter(|r| *r < n)
        .ok_or_else(|| Failure::argument(format_args!("rank {rank} is not in 0..{n}")))?;
    let mut joining = lock(&JOINING);
    let entry = joining.entry(id).or_insert_with(|| Joining {
        nranks: n,
        devices: vec![None; n],
        outcome: None,
        taken: 0,
    });
    if entry.nranks != n {
        return Err(Failure::usage(format_args!(
            "rank {r} joins with nranks {n}, earlier ranks of this id with {}",
            entry.nranks
        )));
    }
    if entry.outcome.is_some() || entry.devices[r].is_some() {
        return Err(Failure::usage(format_args!(
            "rank {r} has already joined this communicator"
        )));
    }
    entry.devices[r] = Some(device);
    if entry.devices.iter().all(Option::is_some) {
        let devices: Vec<c_int> = entry.devices.iter().flatten().copied().collect();
        entry.outcome = Some(check_distinct(&devices).map(|()| Clique::new(devices)));
        JOINED.notify_all();
    }
    let (mut joining, outcome) = wait_until(joining, &JOINED, deadline(), |j| {
        j.get(&id).and_then(|e| e.outcome.clone())
    });
    let Some(entry) = joining.get_mut(&id) else {
        return Err(Failure::new(
            rccl_sys::ncclResult_t::ncclInternalError,
            "the rendezvous of ncclCommInitRank vanished",
        ));
    };
    let Some(outcome) = outcome else {
        // Timed out: withdraw, so that a later attempt starts afresh.
        entry.devices[r] = None;
        let joined = entry.devices.iter().flatten().count();
        if joined == 0 {
            joining.remove(&id);
        }
        let why = format!(
            "ncclCommInitRank: rank {r} waited {} s, but only {} of {n} ranks joined",
            timeout().as_secs_f64(),
            joined + 1
        );
        eprintln!("hip-on-cpu rccl: {why}");
        return Err(Failure::remote(why));
    };
    entry.taken += 1;
    if entry.taken == n {
        joining.remove(&id);
    }
    drop(joining);
    Ok(register(Comm::new(outcome?, r)))
}

/// `ncclCommInitAll`: the communicators of `devices` (checked by the
/// caller), rank `i` on `devices[i]`, created at once.
pub(crate) fn init_all(devices: Vec<c_int>) -> NcclResult<Vec<ncclComm_t>> {
    check_distinct(&devices)?;
    let n = devices.len();
    let clique = Clique::new(devices);
    Ok((0..n)
        .map(|r| register(Comm::new(clique.clone(), r)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_checked() {
        let comms = init_all(vec![0, 1]).unwrap();
        assert_eq!(lookup(comms[1]).unwrap().rank, 1);
        destroy(comms[0]).unwrap();
        assert!(lookup(comms[0]).is_err());
        assert!(destroy(comms[0]).is_err());
        assert!(lookup(std::ptr::null_mut()).is_err());
        destroy(comms[1]).unwrap();
        assert!(init_all(vec![1, 1]).is_err());
    }

    #[test]
    fn ranks_meet_and_bad_joins_are_refused() {
        let id = [7; 128];
        // Handles travel between threads as plain numbers.
        let other = std::thread::spawn(move || init_rank(2, id, 1, 1).map(|h| h.addr()));
        let mine = init_rank(2, id, 0, 0).unwrap();
        let theirs: ncclComm_t = std::ptr::without_provenance_mut(other.join().unwrap().unwrap());
        assert_eq!(lookup(mine).unwrap().nranks(), 2);
        assert_eq!(lookup(theirs).unwrap().device(), 1);
        assert!(init_rank(2, id, 2, 0).is_err());
        assert!(init_rank(0, id, 0, 0).is_err());
        destroy(mine).unwrap();
        destroy(theirs).unwrap();
    }
}
