//! Indices past their dimension: every indexing op stays memory safe, the
//! error reaches the host at its next synchronisation point, once, and the
//! "no index" marker is no error.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, Layout, Result};
use candle_hip::HipStorage;

use crate::common::device;

fn f32s(s: &HipStorage) -> Vec<f32> {
    match s.to_cpu_storage().unwrap() {
        CpuStorage::F32(v) => v,
        other => panic!("expected f32, got {:?}", other.dtype()),
    }
}

/// The error the next synchronisation reports, which must name `op`.
fn reported(what: &str, r: Result<()>, op: &str) {
    let err = r
        .err()
        .unwrap_or_else(|| panic!("{what}: no error reported"));
    let text = err.to_string();
    assert!(text.contains(op) && text.contains("past"), "{what}: {text}");
}

#[test]
#[ignore = "needs a HIP device"]
fn indices_past_their_dimension_are_reported() {
    let dev = device();
    let data: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let src = dev
        .storage_from_cpu_storage(&CpuStorage::F32(data.clone()))
        .unwrap();
    let l = Layout::contiguous((4, 3));
    let ids = |v: Vec<u32>| dev.storage_from_cpu_storage(&CpuStorage::U32(v)).unwrap();
    let mut cases = 0;

    // The marker selects zeros and is no error.
    let marker = ids(vec![0, 3, u32::MAX]);
    let out = src
        .index_select(&marker, &l, &Layout::contiguous(3), 0)
        .unwrap();
    assert_eq!(f32s(&out), [0., 1., 2., 9., 10., 11., 0., 0., 0.]);
    dev.synchronize().unwrap();
    cases += 1;

    // index_select: reported at to_cpu_storage, once.
    let bad = ids(vec![0, 4]);
    let out = src
        .index_select(&bad, &l, &Layout::contiguous(2), 0)
        .unwrap();
    reported(
        "index_select",
        out.to_cpu_storage().map(|_| ()),
        "index-select",
    );
    assert_eq!(f32s(&out), [0., 1., 2., 0., 0., 0.]);
    cases += 1;

    // gather along dim 1 (size 3): reported at synchronize.
    let g = ids(vec![0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 1, 0]);
    src.gather(&l, &g, &l, 1).unwrap();
    reported("gather", dev.synchronize(), "gather");
    cases += 1;

    // i64 ids: a negative index is past the dimension too.
    let neg = dev
        .storage_from_cpu_storage(&CpuStorage::I64(vec![1, -1]))
        .unwrap();
    src.index_select(&neg, &l, &Layout::contiguous(2), 0)
        .unwrap();
    reported("index_select i64", dev.synchronize(), "index-select");
    cases += 1;

    // scatter and scatter_add: the bad update is skipped, the others land.
    let upd = dev
        .storage_from_cpu_storage(&CpuStorage::F32(vec![100.0; 12]))
        .unwrap();
    let sids = ids(vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 7]);
    let mut dst = dev
        .storage_from_cpu_storage(&CpuStorage::F32(data.clone()))
        .unwrap();
    dst.scatter_set(&l, &sids, &l, &upd, &l, 1).unwrap();
    reported("scatter", dev.synchronize(), "scatter");
    let got = f32s(&dst);
    assert_eq!(&got[..11], &[100.0; 11]);
    assert_eq!(got[11], 11.0);
    cases += 1;
    let mut dst = dev
        .storage_from_cpu_storage(&CpuStorage::F32(data.clone()))
        .unwrap();
    dst.scatter_add_set(&l, &sids, &l, &upd, &l, 1).unwrap();
    reported("scatter_add", dev.synchronize(), "scatter-add");
    cases += 1;

    // index_add along dim 0 (size 4).
    let rows = Layout::contiguous((2, 3));
    let two = dev
        .storage_from_cpu_storage(&CpuStorage::F32(vec![1.0; 6]))
        .unwrap();
    let out = src
        .index_add(&l, &ids(vec![1, 9]), &Layout::contiguous(2), &two, &rows, 0)
        .unwrap();
    reported("index_add", out.to_cpu_storage().map(|_| ()), "index-add");
    let mut expect = data.clone();
    for v in &mut expect[3..6] {
        *v += 1.0;
    }
    assert_eq!(f32s(&out), expect);
    cases += 1;

    // Cleared: the device reports nothing more.
    dev.synchronize().unwrap();
    println!("conformance index faults: {cases} cases, 0 failures");
}
