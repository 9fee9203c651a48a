//! `vvm-host run --storage kube://default` on a real kube-apiserver: the
//! manual failover scenario of `tests/failover.rs` (three graceful
//! handovers, then SIGKILL of the leader and a takeover once its 4 s lease
//! can have run out), with the nodes finding the API server through the
//! kubeconfig in `KUBECONFIG`, as `kubectl` does.
//!
//! `cargo xtask test-drivers --engine kube` starts the API server and sets
//! `KUBECONFIG`. In a pod, the same URL uses the pod's service account
//! (`vvm-host`'s README has the Deployment and the Role).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::failover::scenario;

#[test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
fn manual_failover_on_kubernetes_leases() {
    let kubeconfig = std::env::var("KUBECONFIG").expect(
        "KUBECONFIG is not set: `cargo xtask test-drivers --engine kube` sets it to its API server's",
    );
    assert!(
        std::path::Path::new(&kubeconfig).is_file(),
        "KUBECONFIG={kubeconfig} is not a file"
    );
    scenario(
        Some("kube://default".to_owned()),
        Duration::from_secs(4),
        &["--leadership-duration", "4s"],
    );
}
