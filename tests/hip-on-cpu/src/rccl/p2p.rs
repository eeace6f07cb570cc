//! Point-to-point transfers through mailboxes: one FIFO of messages per
//! `(sender, receiver)` pair of a clique. A send copies its buffer into the
//! mailbox and returns at once (it never waits for its receiver, so no
//! pairing of sends and receives can deadlock on the sending side); a
//! receive takes the oldest message of its pair, waiting for it at most the
//! timeout of [`super::wait`], and fails when its size differs from the
//! receive buffer's.

use std::collections::VecDeque;

use super::buffer;
use super::comm::Comm;
use super::status::{Failure, NcclResult};
use super::wait::{deadline, lock, timeout, wait_until};

/// Sends the `bytes` bytes at `ptr` (checked at issue) from `comm`'s rank
/// to `peer`.
pub(crate) fn send(comm: &Comm, peer: usize, ptr: usize, bytes: usize) -> NcclResult {
    // SAFETY: the range was checked at issue and the issuing thread keeps
    // it alive until this call returns (it is blocked in ncclSend or
    // ncclGroupEnd).
    let data = unsafe { buffer::read(ptr, bytes) };
    let clique = &comm.clique;
    lock(&clique.state)
        .mailboxes
        .entry((comm.rank, peer))
        .or_default()
        .push_back(data);
    clique.changed.notify_all();
    Ok(())
}

/// Receives the oldest message from `peer` to `comm`'s rank into the
/// `bytes` bytes at `ptr` (checked at issue).
pub(crate) fn recv(comm: &Comm, peer: usize, ptr: usize, bytes: usize) -> NcclResult {
    let clique = &comm.clique;
    let key = (peer, comm.rank);
    let (state, message) = wait_until(lock(&clique.state), &clique.changed, deadline(), |s| {
        s.mailboxes.get_mut(&key).and_then(VecDeque::pop_front)
    });
    drop(state);
    let Some(message) = message else {
        let why = format!(
            "rank {} waited {} s for a message from rank {peer}, which sent none",
            comm.rank,
            timeout().as_secs_f64()
        );
        eprintln!("hip-on-cpu rccl: ncclRecv: {why}");
        return Err(Failure::remote(why));
    };
    if message.len() != bytes {
        return Err(Failure::usage(format_args!(
            "rank {} expects {bytes} bytes from rank {peer}, which sent {}",
            comm.rank,
            message.len()
        )));
    }
    // SAFETY: as in `send`; `message` is a separate copy.
    unsafe { buffer::write(ptr, &message) };
    Ok(())
}
