//! `--cluster-size` is agreed between nodes: a node started with another
//! size than the running leaders refuses to lead (exit 125, a clear error),
//! so never more commands run than the smallest size. Real vvm-host
//! processes on one shared redb file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{process::Child, sync::mpsc};

use common::*;
use nix::sys::signal::Signal;

struct Node {
    child: Child,
    out: mpsc::Receiver<String>,
    log: std::thread::JoinHandle<String>,
}

fn node(store: &std::path::Path, size: &str, name: &str) -> Node {
    let url = format!("redb://{}", store.join("leases.redb").display());
    let script = format!("echo leading {name}; exec sleep 1000");
    let (child, out, log) = spawn_piped(&mut vvm_host(&[
        "--storage",
        &url,
        "--cluster-size",
        size,
        "--retry-pause",
        "200ms",
        "--",
        "sh",
        "-c",
        &script,
    ]));
    Node { child, out, log }
}

#[test]
fn nodes_started_with_another_cluster_size_refuse_to_lead() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = node(dir.path(), "2", "a");
    wait_for_line(&a.out, "leading a");
    let mut b = node(dir.path(), "2", "b");
    wait_for_line(&b.out, "leading b");
    // Two leaders of a 2-node cluster run; a node of size 3 would be a third.
    let mut c = node(dir.path(), "3", "c");
    let status = wait_with_limit(&mut c.child);
    let log = c.log.join().unwrap();
    assert_eq!(status.code(), Some(125), "{log}");
    assert!(log.contains("same cluster size"), "{log}");
    assert!(c.out.try_recv().is_err(), "c led");
    for node in [&mut a, &mut b] {
        signal(&node.child, Signal::SIGTERM);
        assert_eq!(wait_with_limit(&mut node.child).code(), Some(0));
    }
}

#[test]
fn a_larger_cluster_running_keeps_smaller_ones_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = node(dir.path(), "3", "c");
    wait_for_line(&c.out, "leading c");
    for name in ["a", "b"] {
        let mut n = node(dir.path(), "2", name);
        let status = wait_with_limit(&mut n.child);
        let log = n.log.join().unwrap();
        assert_eq!(status.code(), Some(125), "{log}");
        assert!(n.out.try_recv().is_err(), "{name} led");
    }
    signal(&c.child, Signal::SIGTERM);
    assert_eq!(wait_with_limit(&mut c.child).code(), Some(0));
}
