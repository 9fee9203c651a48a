//! The assignment epoch kept in Valkey next to each destination's pod set.

use std::time::Duration;

use coordinator::strategy::RoundRobin;
use coordinator::{Resolution, ResolveOptions};

use crate::common::*;

fn epoch(r: &Resolution) -> u64 {
    r.route().expect("routed").epoch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn every_change_of_a_pod_set_bumps_its_epoch_and_it_only_grows() {
    let p = prefix();
    let mut a = TestPod::start(&p, "a", PodOptions::default()).await;
    let b = TestPod::start(&p, "b", PodOptions::default()).await;
    let reg = registry(&p, None, std::sync::Arc::new(RoundRobin::new())).await;
    let d = dest("e1");
    let key = reg.keys().epoch(&d);
    let valkey = valkey().await;

    // first touch claims and bumps; a read does not
    let claimed = epoch(&reg.route(&d, ResolveOptions::default()).await.unwrap());
    assert!(claimed >= 1);
    let stored: u64 = fred::prelude::KeysInterface::get(&valkey, &key)
        .await
        .unwrap();
    assert_eq!(stored, claimed, "kept at P:epoch:<dest>");
    assert_eq!(
        epoch(&reg.route(&d, ResolveOptions::default()).await.unwrap()),
        claimed
    );

    // adding a pod bumps, adding it again does not
    let owner = reg.route(&d, ResolveOptions::default()).await.unwrap();
    let owner = owner.route().unwrap().member.id.clone();
    let other = if owner == *a.id() { b.id() } else { a.id() };
    let added = reg.add_pod_to_destination(&d, other).await.unwrap();
    assert_eq!(added, claimed + 1);
    assert_eq!(reg.add_pod_to_destination(&d, other).await.unwrap(), added);
    let routed = epoch(&reg.route(&d, ResolveOptions::default()).await.unwrap());
    assert_eq!(routed, added, "resolution returns the epoch with the route");

    // a member leaving bumps
    let left = b.member.remove_from_destination(&d).await.unwrap();
    assert_eq!(left, added + 1);

    // failover: the only pod dies, another is assigned, the epoch grows
    let d2 = dest("e2");
    let first = a.member.add_to_destination(&d2).await.unwrap();
    a.stop_heartbeat().await;
    assert!(member_record_expires(&valkey, &a, Duration::from_secs(5)).await);
    let moved = reg.route(&d2, ResolveOptions::default()).await.unwrap();
    assert_eq!(moved.route().unwrap().member.id, *b.id());
    let reassigned = epoch(&moved);
    assert!(reassigned > first, "{first} -> {reassigned}");

    // deleting the set bumps and keeps the epoch: a new binding is newer
    let deleted = reg
        .deregister_destination(&d2, Some((b.id(), reassigned)))
        .await
        .unwrap();
    assert!(
        matches!(deleted, coordinator::Deregistration::Deleted { .. }),
        "{deleted:?}"
    );
    assert!(exists(&valkey, &reg.keys().epoch(&d2)).await);
    let rebound = epoch(&reg.route(&d2, ResolveOptions::default()).await.unwrap());
    assert!(rebound > reassigned + 1, "{reassigned} -> {rebound}");
}

/// A deregistration applied late (the pod left by itself at the `DELETE`,
/// then a claim bound it again at a newer epoch before the coordinator's
/// `UNBIND` ran) never removes the pod from its new binding: the pod serves
/// the newer epoch and would keep admitting it while another pod is bound
/// (coordinator chaos found two pods serving one destination that way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_late_deregistration_never_unbinds_a_pod_bound_again_since() {
    let p = prefix();
    let a = TestPod::start(&p, "a", PodOptions::default()).await;
    let reg = registry(&p, None, std::sync::Arc::new(RoundRobin::new())).await;
    let d = dest("relisted");
    let routed = a.member.add_to_destination(&d).await.unwrap();
    // the DELETE routed at `routed`: the pod leaves by itself
    let left = a.member.remove_from_destination(&d).await.unwrap();
    assert!(left > routed);
    // a claim binds it again before the coordinator's UNBIND runs
    let again = a.member.add_to_destination(&d).await.unwrap();
    assert!(again > left);
    let late = reg
        .deregister_destination(&d, Some((a.id(), routed)))
        .await
        .unwrap();
    assert!(
        matches!(late, coordinator::Deregistration::LiveMembersLeft { .. }),
        "{late:?}"
    );
    assert_eq!(a.member.destination_members(&d).await.unwrap(), ["a"]);
    // at the epoch it was routed at, the leaver is removed (an unfenced pod
    // that did not leave by itself)
    let now = epoch(&reg.route(&d, ResolveOptions::default()).await.unwrap());
    let done = reg
        .deregister_destination(&d, Some((a.id(), now)))
        .await
        .unwrap();
    assert!(
        matches!(done, coordinator::Deregistration::Deleted { .. }),
        "{done:?}"
    );
}
