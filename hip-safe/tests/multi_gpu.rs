//! Several devices: RCCL collectives against a host computation for every
//! element type and reduction, point-to-point transfers, communicators of
//! one thread, peer copies and `HIP_VISIBLE_DEVICES`. Needs two HIP devices
//! (ignored otherwise: run with `--include-ignored` on a machine with two).

use std::fmt::Debug;

use half::{bf16, f16};
use hip_safe::{Comm, CommType, Device, ReduceOp, Result, Stream, UniqueId, ValidAsZeroBits};

/// Ranks of every test.
const WORLD: usize = 2;
/// Elements per rank: not a multiple of any vector width.
const COUNT: usize = 4099;

/// An element type of the collectives, with exact conversions for the small
/// integers the tests use.
trait Element: CommType + ValidAsZeroBits + PartialEq + Debug {
    fn of(v: f64) -> Self;
    fn value(self) -> f64;
}

macro_rules! element {
    ($($t:ty: $of:expr, $value:expr;)*) => {$(
        impl Element for $t {
            fn of(v: f64) -> Self {
                $of(v)
            }
            fn value(self) -> f64 {
                $value(self)
            }
        }
    )*};
}

element! {
    i8: |v| v as i8, |x| x as f64;
    u8: |v| v as u8, |x| x as f64;
    i32: |v| v as i32, |x| x as f64;
    u32: |v| v as u32, |x| x as f64;
    i64: |v| v as i64, |x| x as f64;
    u64: |v| v as u64, |x| x as f64;
    f16: f16::from_f64, f16::to_f64;
    bf16: bf16::from_f64, bf16::to_f64;
    f32: |v| v as f32, |x| x as f64;
    f64: |v| v, |x| x;
}

/// Rank `rank`'s input: small positive integers, so sums, products and
/// means over two ranks are exact in every type.
fn input<T: Element>(rank: usize) -> Vec<T> {
    (0..COUNT)
        .map(|i| T::of(((rank * 7 + i * 3) % 5 + 1) as f64))
        .collect()
}

/// The host reduction over all ranks of every element.
fn reduced<T: Element>(op: ReduceOp) -> Vec<T> {
    let inputs: Vec<Vec<T>> = (0..WORLD).map(input::<T>).collect();
    let integer = T::of(0.5) == T::of(0.0);
    (0..COUNT)
        .map(|i| {
            let values = inputs.iter().map(|x| x[i].value());
            let v = match op {
                ReduceOp::Sum => values.sum(),
                ReduceOp::Prod => values.product(),
                ReduceOp::Max => values.fold(f64::MIN, f64::max),
                ReduceOp::Min => values.fold(f64::MAX, f64::min),
                // Integers: the sum divided by the rank count, truncated, as NCCL.
                ReduceOp::Avg => values.sum::<f64>() / WORLD as f64,
            };
            T::of(if integer { v.trunc() } else { v })
        })
        .collect()
}

/// The devices of the test, or a failure saying how many there are.
fn two_devices() -> Vec<Device> {
    let count = Device::count().expect("HIP runtime");
    assert!(count >= WORLD, "needs {WORLD} HIP devices, found {count}");
    (0..WORLD)
        .map(|o| Device::new(o).expect("device opens"))
        .collect()
}

/// Runs `body` on one thread per rank with a communicator of its own
/// (`ncclCommInitRank`) and returns the ranks' results in rank order.
fn on_ranks<R: Send>(body: impl Fn(&Comm, &Stream) -> Result<R> + Sync) -> Vec<R> {
    let devices = two_devices();
    let id = UniqueId::new().expect("unique id");
    std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                let body = &body;
                scope.spawn(move || -> Result<R> {
                    let stream = device.new_stream()?;
                    let comm = Comm::from_rank(&stream, rank, WORLD, &id)?;
                    let out = body(&comm, &stream)?;
                    stream.synchronize()?;
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread").expect("rank succeeds"))
            .collect()
    })
}

/// Every collective of one element type against the host.
fn check_collectives<T: Element>() {
    let name = T::NAME;
    for op in ReduceOp::ALL {
        let out = on_ranks(|comm, stream| {
            let send = stream.clone_htod(&input::<T>(comm.rank()))?;
            let mut all = stream.alloc_zeros::<T>(COUNT)?;
            comm.all_reduce(&send, &mut all, op)?;
            let mut root = stream.alloc_zeros::<T>(COUNT)?;
            comm.reduce(&send, &mut root, op, 1)?;
            let mut in_place = stream.clone_htod(&input::<T>(comm.rank()))?;
            comm.all_reduce_in_place(&mut in_place, op)?;
            Ok((
                stream.clone_dtoh(&all)?,
                stream.clone_dtoh(&root)?,
                stream.clone_dtoh(&in_place)?,
            ))
        });
        let want = reduced::<T>(op);
        for (rank, (all, root, in_place)) in out.into_iter().enumerate() {
            assert_eq!(all, want, "all_reduce {op:?} {name} rank {rank}");
            assert_eq!(
                in_place, want,
                "in-place all_reduce {op:?} {name} rank {rank}"
            );
            if rank == 1 {
                assert_eq!(root, want, "reduce {op:?} {name} at the root");
            }
        }
    }
    let out = on_ranks(|comm, stream| {
        let rank = comm.rank();
        let send = stream.clone_htod(&input::<T>(rank))?;
        let mut gathered = stream.alloc_zeros::<T>(COUNT * WORLD)?;
        comm.all_gather(&send, &mut gathered)?;
        let long: Vec<T> = (0..WORLD).flat_map(|r| input::<T>(r + rank)).collect();
        let long = stream.clone_htod(&long)?;
        let mut scattered = stream.alloc_zeros::<T>(COUNT)?;
        comm.reduce_scatter(&long, &mut scattered, ReduceOp::Sum)?;
        let mut cast = stream.clone_htod(&input::<T>(rank))?;
        comm.broadcast(&mut cast, 1)?;
        let mut received = stream.alloc_zeros::<T>(COUNT)?;
        let peer = (rank + 1) % WORLD;
        Comm::group(|| {
            comm.send(&send, peer)?;
            comm.recv(&mut received, peer)
        })?;
        Ok((
            stream.clone_dtoh(&gathered)?,
            stream.clone_dtoh(&scattered)?,
            stream.clone_dtoh(&cast)?,
            stream.clone_dtoh(&received)?,
        ))
    });
    let gathered: Vec<T> = (0..WORLD).flat_map(input::<T>).collect();
    for (rank, (all, scattered, cast, received)) in out.into_iter().enumerate() {
        assert_eq!(all, gathered, "all_gather {name} rank {rank}");
        // Block `rank` of rank r's long input is input(rank + r).
        let blocks: Vec<Vec<T>> = (0..WORLD).map(|r| input::<T>(rank + r)).collect();
        let want: Vec<T> = (0..COUNT)
            .map(|i| T::of(blocks.iter().map(|b| b[i].value()).sum()))
            .collect();
        assert_eq!(scattered, want, "reduce_scatter {name} rank {rank}");
        assert_eq!(cast, input::<T>(1), "broadcast {name} rank {rank}");
        assert_eq!(
            received,
            input::<T>((rank + 1) % WORLD),
            "send/recv {name} rank {rank}"
        );
    }
}

#[test]
#[ignore = "needs two HIP devices"]
fn gpu_collectives_match_the_host_for_every_type_and_reduction() {
    check_collectives::<i8>();
    check_collectives::<u8>();
    check_collectives::<i32>();
    check_collectives::<u32>();
    check_collectives::<i64>();
    check_collectives::<u64>();
    check_collectives::<f16>();
    check_collectives::<bf16>();
    check_collectives::<f32>();
    check_collectives::<f64>();
}

#[test]
#[ignore = "needs two HIP devices"]
fn gpu_one_thread_drives_both_communicators_in_a_group() {
    let devices = two_devices();
    let streams: Vec<Stream> = devices.iter().map(|d| d.new_stream().unwrap()).collect();
    let comms = Comm::from_devices(&streams).expect("ncclCommInitAll");
    assert_eq!(comms.iter().map(Comm::rank).collect::<Vec<_>>(), [0, 1]);
    let mut bufs: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(r, s)| s.clone_htod(&input::<f32>(r)).unwrap())
        .collect();
    Comm::group(|| {
        for (comm, buf) in comms.iter().zip(bufs.iter_mut()) {
            comm.all_reduce_in_place(buf, ReduceOp::Sum)?;
        }
        Ok(())
    })
    .expect("grouped all-reduce");
    let want = reduced::<f32>(ReduceOp::Sum);
    for (stream, buf) in streams.iter().zip(&bufs) {
        assert_eq!(stream.clone_dtoh(buf).unwrap(), want);
    }
}

#[test]
#[ignore = "needs two HIP devices"]
fn gpu_peer_copies_move_data_between_devices() {
    let devices = two_devices();
    let (a, b) = (&devices[0], &devices[1]);
    let data: Vec<u32> = (0..(16u32 << 20) / 4)
        .map(|i| i.wrapping_mul(2654435761))
        .collect();
    let (sa, sb) = (a.new_stream().unwrap(), b.new_stream().unwrap());
    let src = sa.clone_htod(&data).unwrap();
    // Without peer access the runtime stages the copy; with it, direct.
    let staged = sb.clone_dtod(&src).unwrap();
    assert_eq!(sb.clone_dtoh(&staged).unwrap(), data);
    if b.can_access_peer(a).unwrap() {
        b.enable_peer_access(a).unwrap();
        b.enable_peer_access(a)
            .expect("enabling twice is not an error");
        // Another handle of the same device asks HIP again (already enabled).
        Device::new(1)
            .unwrap()
            .enable_peer_access(a)
            .expect("enabling through another handle is not an error");
        a.enable_peer_access(b).unwrap();
    }
    assert!(!a.try_enable_peer_access(a).unwrap(), "not its own peer");
    let direct = sb.clone_dtod(&src).unwrap();
    let back = sa.clone_dtod(&direct.slice(1..).unwrap()).unwrap();
    assert_eq!(sb.clone_dtoh(&direct).unwrap(), data);
    assert_eq!(sa.clone_dtoh(&back).unwrap(), data[1..]);
    assert!(
        !a.can_access_peer(a).unwrap(),
        "a device is not its own peer"
    );
}

#[test]
#[ignore = "needs two HIP devices"]
fn gpu_bad_arguments_are_errors() {
    let devices = two_devices();
    let id = UniqueId::new().unwrap();
    let stream = devices[0].new_stream().unwrap();
    let err = Comm::from_rank(&stream, 2, 2, &id).unwrap_err();
    assert!(err.to_string().contains("rank 2 of 2"), "{err}");
    let err = Comm::from_devices(&[stream.clone(), stream.clone()]).unwrap_err();
    assert!(err.to_string().contains("appears twice"), "{err}");
    let out = on_ranks(|comm, stream| {
        let other = Device::new(1 - comm.rank())?.new_stream()?;
        let a = stream.alloc_zeros::<f32>(8)?;
        let mut short = stream.alloc_zeros::<f32>(7)?;
        let foreign = other.alloc_zeros::<f32>(8)?;
        let mut gathered = stream.alloc_zeros::<f32>(8)?;
        Ok([
            comm.all_reduce(&a, &mut short, ReduceOp::Sum).unwrap_err(),
            comm.all_reduce(&foreign, &mut gathered, ReduceOp::Sum)
                .unwrap_err(),
            comm.all_gather(&a, &mut gathered).unwrap_err(),
            comm.send(&a, 5).unwrap_err(),
        ]
        .map(|e| e.to_string()))
    });
    for errors in out {
        assert!(
            errors[0].contains("7 elements, 8 are needed"),
            "{}",
            errors[0]
        );
        assert!(errors[1].contains("lives on device"), "{}", errors[1]);
        assert!(
            errors[2].contains("8 elements, 16 are needed"),
            "{}",
            errors[2]
        );
        assert!(errors[3].contains("peer 5 is not a rank"), "{}", errors[3]);
    }
}

/// The child side of [`gpu_hip_visible_devices_hides_devices`].
const CHILD_VAR: &str = "HIP_SAFE_VISIBLE_DEVICES_CHILD";

#[test]
#[ignore = "needs two HIP devices"]
fn gpu_hip_visible_devices_hides_devices() {
    if std::env::var_os(CHILD_VAR).is_some() {
        assert_eq!(Device::count().unwrap(), 1, "one device is visible");
        let stream = Device::new(0).unwrap().new_stream().unwrap();
        let x = stream.clone_htod(&[1u8, 2, 3]).unwrap();
        assert_eq!(stream.clone_dtoh(&x).unwrap(), [1, 2, 3]);
        assert!(Device::new(1).is_err());
        return;
    }
    two_devices();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "gpu_hip_visible_devices_hides_devices",
            "--include-ignored",
            "--quiet",
        ])
        .env(CHILD_VAR, "1")
        .env("HIP_VISIBLE_DEVICES", "1")
        .status()
        .expect("child test runs");
    assert!(
        status.success(),
        "the child run with HIP_VISIBLE_DEVICES=1 failed"
    );
}
