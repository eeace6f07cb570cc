//! Several emulated devices (`HIP_ON_CPU_DEVICES`): per-device memory,
//! peer access and peer copies, `HIP_VISIBLE_DEVICES`, and the CPU RCCL
//! through hip-safe's [`Comm`]: every collective with every data type and
//! reduction against a host computation, send/receive rings, the
//! communicators of one thread in a group, and errors that come back
//! instead of hanging.
//!
//! This process emulates 2 devices. A configuration that needs another
//! environment (3 devices, a visibility list, no device, a short RCCL
//! timeout) runs in a child process: the parent runs this executable again
//! with one ignored `child_*` test selected and the variables set.

mod child;

use std::ffi::{CStr, c_int, c_void};
use std::fmt::Debug;
use std::sync::Once;
use std::time::{Duration, Instant};

use half::{bf16, f16};
use hip_safe::{
    Comm, CommError, CommType, Device, DevicePtr, DevicePtrMut, Error, ReduceOp, Stream, UniqueId,
    ValidAsZeroBits,
};
use hip_sys::{hipDeviceAttribute_t, hipError_t};
use rccl_sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};

/// Set in a child process; its value is the child's configuration.
const CHILD_VAR: &str = "HIP_ON_CPU_MULTI_DEVICE_CHILD";

/// Points this process at the built shim with 2 devices (a child keeps the
/// parent's layout and the variables it was given). Must run before
/// anything loads the HIP runtime.
fn use_platform() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os(CHILD_VAR).is_some() {
            return;
        }
        // Cargo builds the shim next to the test executables (`deps/`).
        let exe = std::env::current_exe().expect("test executable path");
        let shim = exe.with_file_name("libhip_on_cpu.so");
        let root = std::env::temp_dir().join(format!("hip-on-cpu-multi-{}", std::process::id()));
        hip_on_cpu::layout::make_layout(&shim, &root).expect("layout of the built shim");
        // SAFETY: called once, before any thread of this process reads the
        // environment through the HIP loader.
        unsafe {
            std::env::set_var("ROCM_PATH", &root);
            std::env::set_var("HIP_SAFE_CACHE_DIR", root.join("cache"));
            std::env::set_var("HIP_ON_CPU_DEVICES", "2");
            std::env::remove_var("HIP_VISIBLE_DEVICES");
            std::env::remove_var("HIP_ON_CPU_RCCL_TIMEOUT_S");
        }
    });
}

/// Runs the ignored test `test` in a child process with `vars` set, and
/// checks that it ran and passed.
fn run_child(test: &str, vars: &[(&str, &str)]) {
    use_platform();
    child::run(CHILD_VAR, test, vars);
}

/// Whether this process is the child running `test`.
fn is_child(test: &str) -> bool {
    child::is(CHILD_VAR, test)
}

/// The `ncclResult_t` of a failed RCCL call, if `result` is one.
fn comm_code<T>(result: &hip_safe::Result<T>) -> Option<u32> {
    match result {
        Err(Error::Comm(CommError::Failed { code, .. })) => Some(*code),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Devices, memory and peers
// ---------------------------------------------------------------------------

/// Runs `f` on a fresh thread, so that raw `hipSetDevice` calls do not
/// change the current device of a test thread hip-safe has bound.
fn on_fresh_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| s.spawn(f).join().expect("helper thread"))
}

#[test]
fn devices_are_distinct_with_their_own_memory() {
    use_platform();
    assert_eq!(Device::count().unwrap(), 2);
    let (d0, d1) = (Device::new(0).unwrap(), Device::new(1).unwrap());
    assert!(d0.name().ends_with("#0"), "{}", d0.name());
    assert!(d1.name().ends_with("#1"), "{}", d1.name());
    assert_eq!((d0.wave_size(), d1.wave_size()), (64, 64));
    let api = hip_sys::hip().unwrap();
    on_fresh_thread(|| {
        let bus = |d: c_int| {
            let mut v = -1;
            // SAFETY: valid out-pointer.
            let status = unsafe {
                api.hipDeviceGetAttribute(
                    &mut v,
                    hipDeviceAttribute_t::hipDeviceAttributePciBusId,
                    d,
                )
            };
            assert_eq!(status, Ok(hipError_t::hipSuccess));
            v
        };
        assert_ne!(bus(0), bus(1));
        // The current device is per thread, 0 until set.
        let mut current = -1;
        // SAFETY: valid out-pointer.
        unsafe { api.hipGetDevice(&mut current) }.unwrap();
        assert_eq!(current, 0);
        // SAFETY: a plain call.
        assert_eq!(
            unsafe { api.hipSetDevice(2) },
            Ok(hipError_t::hipErrorInvalidDevice)
        );
    });
    // Memory counted per device, in a process of its own: tests running
    // beside it here would allocate and free meanwhile.
    run_child("child_memory_is_counted_per_device", &[]);
}

/// Allocating on device 1 takes free memory of device 1 only.
#[test]
#[ignore = "run by devices_are_distinct_with_their_own_memory in a child process"]
fn child_memory_is_counted_per_device() {
    if !is_child("child_memory_is_counted_per_device") {
        return;
    }
    let api = hip_sys::hip().unwrap();
    // SAFETY: plain calls with valid out-pointers; the buffer is freed.
    unsafe {
        let info = |d: c_int| {
            assert_eq!(api.hipSetDevice(d), Ok(hipError_t::hipSuccess));
            let (mut free, mut total) = (0, 0);
            let status = api.hipMemGetInfo(&mut free, &mut total);
            assert_eq!(status, Ok(hipError_t::hipSuccess));
            free
        };
        let (free0, free1) = (info(0), info(1));
        // 1 GiB on device 1 (mapped without reserving memory).
        assert_eq!(api.hipSetDevice(1), Ok(hipError_t::hipSuccess));
        let mut p = std::ptr::null_mut();
        assert_eq!(api.hipMalloc(&mut p, 1 << 30), Ok(hipError_t::hipSuccess));
        let slack = 64 << 20;
        let (after0, after1) = (info(0), info(1));
        assert!(free1 - after1 >= 1 << 30 && free1 - after1 < (1 << 30) + slack);
        assert!(free0.abs_diff(after0) < slack);
        assert_eq!(api.hipFree(p), Ok(hipError_t::hipSuccess));
    }
}

#[test]
fn events_record_on_streams_of_their_device() {
    use_platform();
    let api = hip_sys::hip().unwrap();
    let success = Ok(hipError_t::hipSuccess);
    let invalid = Ok(hipError_t::hipErrorInvalidHandle);
    on_fresh_thread(|| {
        // SAFETY: valid out-pointers; every handle is destroyed.
        unsafe {
            let (mut e0, mut e1) = (std::ptr::null_mut(), std::ptr::null_mut());
            let mut s1 = std::ptr::null_mut();
            assert_eq!(api.hipEventCreateWithFlags(&mut e0, 0), success);
            assert_eq!(api.hipSetDevice(1), success);
            assert_eq!(api.hipEventCreateWithFlags(&mut e1, 0), success);
            assert_eq!(api.hipStreamCreateWithFlags(&mut s1, 0), success);
            assert_eq!(api.hipEventRecord(e0, s1), invalid);
            // The null stream is the current device's (1).
            assert_eq!(api.hipEventRecord(e0, std::ptr::null_mut()), invalid);
            assert_eq!(api.hipEventRecord(e1, s1), success);
            assert_eq!(api.hipSetDevice(0), success);
            assert_eq!(api.hipEventRecord(e0, std::ptr::null_mut()), success);
            let mut ms = 0.0;
            assert_eq!(api.hipEventElapsedTime(&mut ms, e0, e1), invalid);
            assert_eq!(api.hipStreamDestroy(s1), success);
            assert_eq!(api.hipEventDestroy(e0), success);
            assert_eq!(api.hipEventDestroy(e1), success);
        }
    });
}

#[test]
fn peer_access_and_peer_copies() {
    use_platform();
    let (d0, d1) = (Device::new(0).unwrap(), Device::new(1).unwrap());
    assert!(d0.can_access_peer(&d1).unwrap());
    assert!(d1.can_access_peer(&d0).unwrap());
    assert!(!d0.can_access_peer(&d0).unwrap());
    // hip-safe treats "already enabled" as success.
    d0.enable_peer_access(&d1).unwrap();
    d0.enable_peer_access(&d1).unwrap();

    let api = hip_sys::hip().unwrap();
    on_fresh_thread(|| {
        let mut can = -1;
        // SAFETY: valid out-pointers, plain ordinals.
        unsafe {
            assert_eq!(
                api.hipDeviceCanAccessPeer(&mut can, 0, 0),
                Ok(hipError_t::hipSuccess)
            );
            assert_eq!(can, 0);
            assert_eq!(
                api.hipDeviceCanAccessPeer(&mut can, 0, 2),
                Ok(hipError_t::hipErrorInvalidDevice)
            );
            // Device 1 enabling access to device 0 (the pair hip-safe does
            // not touch above).
            assert_eq!(api.hipSetDevice(1), Ok(hipError_t::hipSuccess));
            let enable = |peer, flags| api.hipDeviceEnablePeerAccess(peer, flags);
            assert_eq!(enable(0, 1), Ok(hipError_t::hipErrorInvalidValue));
            assert_eq!(enable(1, 0), Ok(hipError_t::hipErrorInvalidDevice));
            assert_eq!(enable(5, 0), Ok(hipError_t::hipErrorInvalidDevice));
            assert_eq!(enable(0, 0), Ok(hipError_t::hipSuccess));
            assert_eq!(
                enable(0, 0),
                Ok(hipError_t::hipErrorPeerAccessAlreadyEnabled)
            );
        }
    });

    // Copies both ways through hipMemcpyPeerAsync.
    let (s0, s1) = (d0.new_stream().unwrap(), d1.new_stream().unwrap());
    let data: Vec<u32> = (0..1000).map(|i| i * 7 + 3).collect();
    let a = s0.clone_htod(&data).unwrap();
    let mut b = s1.alloc_zeros::<u32>(1000).unwrap();
    s1.memcpy_dtod(&a, &mut b).unwrap();
    assert_eq!(s1.clone_dtoh(&b).unwrap(), data);
    let mut c = s0.alloc_zeros::<u32>(1000).unwrap();
    s0.memcpy_dtod(&b.slice(500..).unwrap(), &mut c).unwrap();
    assert_eq!(s0.clone_dtoh(&c).unwrap()[..500], data[500..]);

    // Pointers are checked against the devices named for them, and copies
    // must end inside their buffers.
    // Addresses cross to the helper thread as numbers.
    let (pa, pb) = (a.device_ptr() as usize, b.device_ptr() as usize);
    on_fresh_thread(|| {
        let (pa, pb) = (pa as *const c_void, pb as *mut c_void);
        // SAFETY: every call is refused before any memory is touched.
        unsafe {
            let copy = |dst: *mut c_void, dd, src: *const c_void, sd, bytes| {
                api.hipMemcpyPeerAsync(dst, dd, src, sd, bytes, std::ptr::null_mut())
            };
            assert_eq!(copy(pb, 0, pa, 0, 64), Ok(hipError_t::hipErrorInvalidValue));
            assert_eq!(copy(pb, 1, pa, 1, 64), Ok(hipError_t::hipErrorInvalidValue));
            assert_eq!(
                copy(pb, 1, pa, 0, 4001),
                Ok(hipError_t::hipErrorInvalidValue)
            );
            assert_eq!(
                copy(pb, 3, pa, 0, 64),
                Ok(hipError_t::hipErrorInvalidDevice)
            );
            assert_eq!(
                copy(pb, 1, pa, -1, 64),
                Ok(hipError_t::hipErrorInvalidDevice)
            );
            assert_eq!(copy(pb, 1, pa, 0, 4000), Ok(hipError_t::hipSuccess));
        }
    });
}

#[test]
fn visible_devices_select_physical_ones() {
    run_child(
        "child_visible_device",
        &[("HIP_ON_CPU_DEVICES", "2"), ("HIP_VISIBLE_DEVICES", "1")],
    );
    // An invalid entry hides itself and the rest.
    run_child(
        "child_visible_device",
        &[
            ("HIP_ON_CPU_DEVICES", "2"),
            ("HIP_VISIBLE_DEVICES", "1,7,0"),
        ],
    );
}

/// With `HIP_VISIBLE_DEVICES` listing physical device 1 first: one visible
/// device, physical device 1.
#[test]
#[ignore = "run by visible_devices_select_physical_ones in a child process"]
fn child_visible_device() {
    if !is_child("child_visible_device") {
        return;
    }
    assert_eq!(Device::count().unwrap(), 1);
    let d = Device::new(0).unwrap();
    assert!(d.name().ends_with("#1"), "{}", d.name());
    assert!(Device::new(1).is_err());
    let api = hip_sys::hip().unwrap();
    let mut bus = -1;
    // SAFETY: valid out-pointer.
    let status = unsafe {
        api.hipDeviceGetAttribute(
            &mut bus,
            hipDeviceAttribute_t::hipDeviceAttributePciBusId,
            0,
        )
    };
    assert_eq!((status, bus), (Ok(hipError_t::hipSuccess), 1));
}

#[test]
fn bad_device_settings_leave_no_device() {
    for vars in [
        [("HIP_ON_CPU_DEVICES", "0"), ("HIP_VISIBLE_DEVICES", "0")],
        [("HIP_ON_CPU_DEVICES", "many"), ("HIP_VISIBLE_DEVICES", "0")],
        [("HIP_ON_CPU_DEVICES", "2"), ("HIP_VISIBLE_DEVICES", "2,0")],
    ] {
        run_child("child_no_device", &vars);
    }
}

/// An invalid configuration: no device, as with an invalid target.
#[test]
#[ignore = "run by bad_device_settings_leave_no_device in a child process"]
fn child_no_device() {
    if !is_child("child_no_device") {
        return;
    }
    assert_eq!(Device::count().unwrap(), 0);
    let api = hip_sys::hip().unwrap();
    let mut n = -1;
    // SAFETY: valid out-pointer.
    let status = unsafe { api.hipGetDeviceCount(&mut n) };
    assert_eq!((status, n), (Ok(hipError_t::hipErrorNoDevice), 0));
}

// ---------------------------------------------------------------------------
// Collectives against host computations
// ---------------------------------------------------------------------------

/// An element type with the host computation of each reduction, in rank
/// order (see `src/rccl/dtype.rs` for the model).
trait Elem: CommType + ValidAsZeroBits + PartialEq + Debug {
    /// The element for a small integer.
    fn of(v: i64) -> Self;
    /// `values` (one per rank, in rank order) reduced with `op`.
    fn host_reduce(values: &[Self], op: ReduceOp) -> Self;
}

macro_rules! int_elems {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn of(v: i64) -> Self {
                v as $t
            }
            fn host_reduce(values: &[Self], op: ReduceOp) -> Self {
                let sum = values.iter().fold(0 as $t, |a, b| a.wrapping_add(*b));
                match op {
                    ReduceOp::Sum => sum,
                    ReduceOp::Prod => values.iter().fold(1 as $t, |a, b| a.wrapping_mul(*b)),
                    ReduceOp::Max => *values.iter().max().unwrap(),
                    ReduceOp::Min => *values.iter().min().unwrap(),
                    ReduceOp::Avg => (sum as i128 / values.len() as i128) as $t,
                }
            }
        }
    )*};
}

int_elems!(i8, u8, i32, u32, i64, u64);

macro_rules! float_elems {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn of(v: i64) -> Self {
                v as $t
            }
            fn host_reduce(values: &[Self], op: ReduceOp) -> Self {
                let (first, rest) = values.split_first().unwrap();
                let inv = 1.0 / values.len() as $t;
                let mut acc = if op == ReduceOp::Avg { first * inv } else { *first };
                for v in rest {
                    acc = match op {
                        ReduceOp::Sum => acc + v,
                        ReduceOp::Prod => acc * v,
                        ReduceOp::Max => acc.max(*v),
                        ReduceOp::Min => acc.min(*v),
                        ReduceOp::Avg => acc + v * inv,
                    };
                }
                acc
            }
        }
    )*};
}

float_elems!(f32, f64);

macro_rules! half_elems {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn of(v: i64) -> Self {
                <$t>::from_f32(v as f32)
            }
            fn host_reduce(values: &[Self], op: ReduceOp) -> Self {
                let wide: Vec<f32> = values.iter().map(|v| v.to_f32()).collect();
                <$t>::from_f32(f32::host_reduce(&wide, op))
            }
        }
    )*};
}

half_elems!(f16, bf16);

/// Rank `rank`'s input: `len` small integers (some negative), different
/// per rank, position and `salt`.
fn input<T: Elem>(rank: usize, len: usize, salt: usize) -> Vec<T> {
    (0..len)
        .map(|i| T::of(((rank * 37 + i * 11 + salt * 5) % 19) as i64 - 9))
        .collect()
}

/// Element-wise host reduction of every rank's [`input`].
fn host<T: Elem>(world: usize, len: usize, salt: usize, op: ReduceOp) -> Vec<T> {
    let inputs: Vec<Vec<T>> = (0..world).map(|r| input(r, len, salt)).collect();
    (0..len)
        .map(|i| {
            let column: Vec<T> = inputs.iter().map(|v| v[i]).collect();
            T::host_reduce(&column, op)
        })
        .collect()
}

/// Every collective of `T` with every reduction on `comm`, checked against
/// the host.
fn check_collectives<T: Elem>(comm: &Comm, stream: &Stream) {
    let (rank, world) = (comm.rank(), comm.world_size());
    let what = |name: &str, op: ReduceOp| format!("{name} {} {op:?} rank {rank}", T::NAME);
    const N: usize = 5;
    for (k, op) in ReduceOp::ALL.into_iter().enumerate() {
        let send = stream.clone_htod(&input::<T>(rank, N, k)).unwrap();
        let mut recv = stream.alloc_zeros::<T>(N).unwrap();
        comm.all_reduce(&send, &mut recv, op).unwrap();
        let want = host::<T>(world, N, k, op);
        assert_eq!(
            stream.clone_dtoh(&recv).unwrap(),
            want,
            "{}",
            what("all_reduce", op)
        );

        let mut buf = stream.clone_htod(&input::<T>(rank, N, k)).unwrap();
        comm.all_reduce_in_place(&mut buf, op).unwrap();
        assert_eq!(
            stream.clone_dtoh(&buf).unwrap(),
            want,
            "{}",
            what("in place", op)
        );

        let root = k % world;
        let mut out = stream.alloc_zeros::<T>(N).unwrap();
        comm.reduce(&send, &mut out, op, root).unwrap();
        let got = stream.clone_dtoh(&out).unwrap();
        if rank == root {
            assert_eq!(got, want, "{}", what("reduce", op));
        } else {
            assert_eq!(got, vec![T::of(0); N], "{}", what("reduce (not root)", op));
        }

        const M: usize = 3;
        let send = stream.clone_htod(&input::<T>(rank, M * world, k)).unwrap();
        let mut recv = stream.alloc_zeros::<T>(M).unwrap();
        comm.reduce_scatter(&send, &mut recv, op).unwrap();
        let all = host::<T>(world, M * world, k, op);
        assert_eq!(
            stream.clone_dtoh(&recv).unwrap(),
            all[rank * M..(rank + 1) * M],
            "{}",
            what("reduce_scatter", op)
        );
    }

    let root = world - 1;
    let mut buf = stream.clone_htod(&input::<T>(rank, N, 9)).unwrap();
    comm.broadcast(&mut buf, root).unwrap();
    assert_eq!(stream.clone_dtoh(&buf).unwrap(), input::<T>(root, N, 9));

    let send = stream.clone_htod(&input::<T>(rank, N, 10)).unwrap();
    let mut recv = stream.alloc_zeros::<T>(N * world).unwrap();
    comm.all_gather(&send, &mut recv).unwrap();
    let want: Vec<T> = (0..world).flat_map(|r| input::<T>(r, N, 10)).collect();
    assert_eq!(
        stream.clone_dtoh(&recv).unwrap(),
        want,
        "all_gather {}",
        T::NAME
    );
}

/// Every collective, type and reduction, on `world` ranks that are
/// threads, one device each.
fn collectives_on_threads(world: usize) {
    let id = UniqueId::new().unwrap();
    std::thread::scope(|s| {
        for rank in 0..world {
            s.spawn(move || {
                let stream = Device::new(rank).unwrap().new_stream().unwrap();
                let comm = Comm::from_rank(&stream, rank, world, &id).unwrap();
                check_collectives::<i8>(&comm, &stream);
                check_collectives::<u8>(&comm, &stream);
                check_collectives::<i32>(&comm, &stream);
                check_collectives::<u32>(&comm, &stream);
                check_collectives::<i64>(&comm, &stream);
                check_collectives::<u64>(&comm, &stream);
                check_collectives::<f16>(&comm, &stream);
                check_collectives::<f32>(&comm, &stream);
                check_collectives::<f64>(&comm, &stream);
                check_collectives::<bf16>(&comm, &stream);
            });
        }
    });
}

#[test]
fn collectives_match_host_computations() {
    use_platform();
    collectives_on_threads(2);
}

#[test]
fn three_devices() {
    run_child("child_three_devices", &[("HIP_ON_CPU_DEVICES", "3")]);
}

/// Three ranks: the whole matrix (an odd world: inexact float averages,
/// truncating integer ones), a ring, and the communicators of one thread.
#[test]
#[ignore = "run by three_devices in a child process"]
fn child_three_devices() {
    if !is_child("child_three_devices") {
        return;
    }
    assert_eq!(Device::count().unwrap(), 3);
    collectives_on_threads(3);
    ring_on_threads(3);
    streams_comms_in_one_thread(3);
}

// ---------------------------------------------------------------------------
// Send and receive, groups of one thread
// ---------------------------------------------------------------------------

/// Each rank sends to the next and receives from the previous one: in a
/// group, and outside one (a send does not wait for its receiver).
fn ring_on_threads(world: usize) {
    let id = UniqueId::new().unwrap();
    std::thread::scope(|s| {
        for rank in 0..world {
            s.spawn(move || {
                let stream = Device::new(rank).unwrap().new_stream().unwrap();
                let comm = Comm::from_rank(&stream, rank, world, &id).unwrap();
                let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
                let mine = stream.clone_htod(&input::<f32>(rank, 33, 1)).unwrap();
                let mut got = stream.alloc_zeros::<f32>(33).unwrap();
                Comm::group(|| {
                    comm.recv(&mut got, prev)?;
                    comm.send(&mine, next)
                })
                .unwrap();
                assert_eq!(stream.clone_dtoh(&got).unwrap(), input::<f32>(prev, 33, 1));

                let mine = stream.clone_htod(&input::<i64>(rank, 7, 2)).unwrap();
                let mut got = stream.alloc_zeros::<i64>(7).unwrap();
                comm.send(&mine, next).unwrap();
                comm.recv(&mut got, prev).unwrap();
                assert_eq!(stream.clone_dtoh(&got).unwrap(), input::<i64>(prev, 7, 2));
            });
        }
    });
}

#[test]
fn send_recv_rings() {
    use_platform();
    ring_on_threads(2);
}

/// One thread drives the communicators of every device in groups.
fn streams_comms_in_one_thread(world: usize) {
    let streams: Vec<Stream> = (0..world)
        .map(|d| Device::new(d).unwrap().new_stream().unwrap())
        .collect();
    let comms = Comm::from_devices(&streams).unwrap();
    assert_eq!(Comm::version().unwrap(), 22_203);
    for (rank, c) in comms.iter().enumerate() {
        assert_eq!((c.rank(), c.world_size()), (rank, world));
        assert_eq!(c.stream().device().ordinal(), rank);
    }
    let mut bufs: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(r, s)| s.clone_htod(&input::<i32>(r, 9, 3)).unwrap())
        .collect();
    let mut gathered: Vec<_> = streams
        .iter()
        .map(|s| s.alloc_zeros::<u64>(2 * world).unwrap())
        .collect();
    let parts: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(r, s)| s.clone_htod(&[r as u64, 100 + r as u64]).unwrap())
        .collect();
    Comm::group(|| {
        for ((c, b), (g, p)) in comms
            .iter()
            .zip(&mut bufs)
            .zip(gathered.iter_mut().zip(&parts))
        {
            c.all_reduce_in_place(b, ReduceOp::Max)?;
            c.all_gather(p, g)?;
        }
        Ok(())
    })
    .unwrap();
    let want = host::<i32>(world, 9, 3, ReduceOp::Max);
    let all: Vec<u64> = (0..world as u64).flat_map(|r| [r, 100 + r]).collect();
    for (r, s) in streams.iter().enumerate() {
        assert_eq!(s.clone_dtoh(&bufs[r]).unwrap(), want, "rank {r}");
        assert_eq!(s.clone_dtoh(&gathered[r]).unwrap(), all, "rank {r}");
    }

    // A ring of sends and receives issued by this one thread.
    let mut got: Vec<_> = streams
        .iter()
        .map(|s| s.alloc_zeros::<bf16>(4).unwrap())
        .collect();
    let mine: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(r, s)| s.clone_htod(&input::<bf16>(r, 4, 4)).unwrap())
        .collect();
    Comm::group(|| {
        for (r, (c, g)) in comms.iter().zip(&mut got).enumerate() {
            c.recv(g, (r + world - 1) % world)?;
            c.send(&mine[r], (r + 1) % world)?;
        }
        Ok(())
    })
    .unwrap();
    for (r, s) in streams.iter().enumerate() {
        let prev = (r + world - 1) % world;
        assert_eq!(s.clone_dtoh(&got[r]).unwrap(), input::<bf16>(prev, 4, 4));
    }
}

#[test]
fn communicators_of_one_thread_run_in_a_group() {
    use_platform();
    streams_comms_in_one_thread(2);
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

#[test]
fn disagreeing_ranks_get_errors() {
    use_platform();
    let stream = Device::new(0).unwrap().new_stream().unwrap();
    assert!(Comm::from_rank(&stream, 2, 2, &UniqueId::new().unwrap()).is_err());

    let id = UniqueId::new().unwrap();
    let started = Instant::now();
    std::thread::scope(|s| {
        for rank in 0..2 {
            s.spawn(move || {
                let stream = Device::new(rank).unwrap().new_stream().unwrap();
                let comm = Comm::from_rank(&stream, rank, 2, &id).unwrap();
                let usage = Some(ncclResult_t::ncclInvalidUsage.0);
                // Different lengths, then different reductions: both ranks
                // fail, and the communicator stays usable.
                let mut buf = stream.alloc_zeros::<f32>(4 + 4 * rank).unwrap();
                let r = comm.all_reduce_in_place(&mut buf, ReduceOp::Sum);
                assert_eq!(comm_code(&r), usage, "{r:?}");
                let mut buf = stream.clone_htod(&[1.0_f32; 4]).unwrap();
                let op = [ReduceOp::Sum, ReduceOp::Max][rank];
                let r = comm.all_reduce_in_place(&mut buf, op);
                assert_eq!(comm_code(&r), usage, "{r:?}");
                let root = comm.broadcast(&mut buf, rank);
                assert_eq!(comm_code(&root), usage, "{root:?}");
                comm.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap();
                assert_eq!(stream.clone_dtoh(&buf).unwrap(), [2.0; 4]);
                // A receive of another size than what was sent.
                if rank == 0 {
                    comm.send(&buf, 1).unwrap();
                } else {
                    let mut big = stream.alloc_zeros::<f32>(8).unwrap();
                    let r = comm.recv(&mut big, 0);
                    assert_eq!(comm_code(&r), usage, "{r:?}");
                }
            });
        }
    });
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// The raw API's argument checks, queries and strings.
#[test]
fn rccl_arguments_are_checked() {
    use_platform();
    let api = rccl_sys::rccl().unwrap();
    let ok = Ok(ncclResult_t::ncclSuccess);
    let invalid = Ok(ncclResult_t::ncclInvalidArgument);
    // One stream per device, made current on this thread by hip-safe.
    let streams: Vec<Stream> = (0..2)
        .map(|d| Device::new(d).unwrap().new_stream().unwrap())
        .collect();
    let mut b0 = streams[0].alloc_zeros::<f32>(16).unwrap();
    let mut b1 = streams[1].alloc_zeros::<f32>(16).unwrap();
    let (p0, p1) = (b0.device_ptr_mut(), b1.device_ptr_mut());
    let host = [0.0_f32; 16];
    let stream = streams[0].raw();
    let null: *mut c_void = std::ptr::null_mut();
    let no_comm: ncclComm_t = std::ptr::null_mut();
    let last_error = || {
        // SAFETY: a NUL-terminated per-thread buffer.
        unsafe { CStr::from_ptr(api.ncclGetLastError(no_comm).unwrap()) }
            .to_string_lossy()
            .into_owned()
    };
    // SAFETY: every pointer is valid or deliberately refused before use;
    // the communicators are destroyed at the end.
    unsafe {
        let mut v = 0;
        assert_eq!(api.ncclGetVersion(&mut v), ok);
        assert_eq!(v, 22_203);
        for code in 0..8 {
            let text = CStr::from_ptr(api.ncclGetErrorString(ncclResult_t(code)).unwrap());
            assert!(!text.is_empty());
        }
        let (mut a, mut b) = Default::default();
        assert_eq!(api.ncclGetUniqueId(&mut a), ok);
        assert_eq!(api.ncclGetUniqueId(&mut b), ok);
        assert_ne!(a, b);

        let mut comm = no_comm;
        assert_eq!(api.ncclCommInitRank(&mut comm, 2, a, 2), invalid);
        assert_eq!(api.ncclCommInitRank(&mut comm, 0, a, 0), invalid);
        assert_eq!(api.ncclCommInitRank(std::ptr::null_mut(), 1, a, 0), invalid);
        assert_eq!(api.ncclCommInitAll(&mut comm, 1, [5].as_ptr()), invalid);
        assert_eq!(
            api.ncclCommInitAll([no_comm; 2].as_mut_ptr(), 2, [1, 1].as_ptr()),
            Ok(ncclResult_t::ncclInvalidUsage)
        );
        let mut comms = [no_comm; 2];
        assert_eq!(
            api.ncclCommInitAll(comms.as_mut_ptr(), 2, std::ptr::null()),
            ok
        );
        let c0 = comms[0];
        let (mut n, mut d, mut r) = (0, -1, -1);
        assert_eq!(api.ncclCommCount(c0, &mut n), ok);
        assert_eq!(api.ncclCommCuDevice(comms[1], &mut d), ok);
        assert_eq!(api.ncclCommUserRank(comms[1], &mut r), ok);
        assert_eq!((n, d, r), (2, 1, 1));
        let mut async_error = ncclResult_t::ncclInternalError;
        assert_eq!(api.ncclCommGetAsyncError(c0, &mut async_error), ok);
        assert_eq!(async_error, ncclResult_t::ncclSuccess);
        assert_eq!(api.ncclCommCount(c0, std::ptr::null_mut()), invalid);

        let f32_ = ncclDataType_t::ncclFloat32;
        let sum = ncclRedOp_t::ncclSum;
        let all_reduce = |buf: *mut c_void, count, dtype, op, comm| {
            api.ncclAllReduce(buf, buf, count, dtype, op, comm, stream)
        };
        // Refused calls: nothing is issued, so no rank waits for them.
        assert_eq!(
            all_reduce(p0, 16, ncclDataType_t::ncclFloat8e4m3, sum, c0),
            invalid
        );
        assert!(last_error().contains("fp8"), "{}", last_error());
        assert_eq!(all_reduce(p0, 16, f32_, ncclRedOp_t(9), c0), invalid);
        assert_eq!(all_reduce(p0, 16, f32_, sum, no_comm), invalid);
        assert_eq!(all_reduce(p1, 16, f32_, sum, c0), invalid);
        assert!(last_error().contains("device 0"), "{}", last_error());
        assert_eq!(all_reduce(p0, 17, f32_, sum, c0), invalid);
        assert_eq!(all_reduce(null, 4, f32_, sum, c0), invalid);
        let h = host.as_ptr().cast_mut().cast();
        assert_eq!(all_reduce(h, 4, f32_, sum, c0), invalid);
        assert_eq!(all_reduce(null, 0, f32_, sum, c0), ok);
        assert_eq!(api.ncclBroadcast(p0, p0, 4, f32_, 2, c0, stream), invalid);
        assert_eq!(
            api.ncclReduce(p0, p0, 4, f32_, sum, -1, c0, stream),
            invalid
        );
        assert_eq!(api.ncclAllGather(p0, p0, 9, f32_, c0, stream), invalid);
        assert_eq!(
            api.ncclReduceScatter(p0, p0, 9, f32_, sum, c0, stream),
            invalid
        );
        assert_eq!(api.ncclSend(p0, 4, f32_, 2, c0, stream), invalid);
        assert_eq!(api.ncclRecv(p0, 17, f32_, 1, c0, stream), invalid);

        // Groups: an unmatched end is an error; a group refuses nothing
        // it should run, and its end reports a refused call.
        assert_eq!(api.ncclGroupEnd(), Ok(ncclResult_t::ncclInvalidUsage));
        assert_eq!(api.ncclGroupStart(), ok);
        assert_eq!(api.ncclGroupStart(), ok);
        assert_eq!(all_reduce(p0, 16, f32_, sum, c0), ok);
        assert_eq!(api.ncclGroupEnd(), ok);
        assert_eq!(all_reduce(p1, 16, f32_, sum, comms[1]), ok);
        assert_eq!(all_reduce(p1, 16, f32_, sum, c0), invalid);
        assert_eq!(api.ncclGroupEnd(), invalid);

        assert_eq!(api.ncclCommDestroy(c0), ok);
        assert_eq!(api.ncclCommDestroy(c0), invalid);
        assert_eq!(api.ncclCommAbort(comms[1]), ok);
        assert_eq!(api.ncclCommCount(c0, &mut n), invalid);
    }
}

#[test]
fn missing_ranks_time_out() {
    run_child("child_timeouts", &[("HIP_ON_CPU_RCCL_TIMEOUT_S", "0.5")]);
}

/// With a half-second timeout: a rank that never joins, a collective one
/// rank never calls, a receive nothing is sent for: errors, not hangs.
#[test]
#[ignore = "run by missing_ranks_time_out in a child process"]
fn child_timeouts() {
    if !is_child("child_timeouts") {
        return;
    }
    let remote = Some(ncclResult_t::ncclRemoteError.0);
    let started = Instant::now();
    let s0 = Device::new(0).unwrap().new_stream().unwrap();
    let s1 = Device::new(1).unwrap().new_stream().unwrap();
    let alone = Comm::from_rank(&s0, 0, 2, &UniqueId::new().unwrap());
    assert_eq!(comm_code(&alone), remote, "{alone:?}");

    let comms = Comm::from_devices(&[s0.clone(), s1.clone()]).unwrap();
    let mut b0 = s0.clone_htod(&[1_i32, 2]).unwrap();
    let mut b1 = s1.clone_htod(&[10_i32, 20]).unwrap();
    // Rank 1 does not take part in time: rank 0 gives up, and rank 1's
    // late call of the same collective fails at once.
    let r = comms[0].all_reduce_in_place(&mut b0, ReduceOp::Sum);
    assert_eq!(comm_code(&r), remote, "{r:?}");
    let late = Instant::now();
    let r = comms[1].all_reduce_in_place(&mut b1, ReduceOp::Sum);
    assert_eq!(comm_code(&r), remote, "{r:?}");
    assert!(late.elapsed() < Duration::from_millis(400));
    // Both ranks are in step again.
    Comm::group(|| {
        comms[0].all_reduce_in_place(&mut b0, ReduceOp::Sum)?;
        comms[1].all_reduce_in_place(&mut b1, ReduceOp::Sum)
    })
    .unwrap();
    assert_eq!(s1.clone_dtoh(&b1).unwrap(), [11, 22]);

    let r = comms[0].recv(&mut b0, 1);
    assert_eq!(comm_code(&r), remote, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}
