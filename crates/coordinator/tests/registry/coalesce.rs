//! Singleflight: concurrent cache misses of one destination share one
//! Valkey lookup; hostile member records never become routes.

use std::sync::Arc;

use coordinator::strategy::RoundRobin;
use coordinator::{AddressPolicy, Registry, RegistryConfig, Resolution, ResolveOptions};
use fred::prelude::*;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn concurrent_misses_of_one_destination_make_one_valkey_lookup() {
    let (mut pod, reg) = pod_and_a_cold_destination(&prefix()).await;

    let before = reg.metrics().valkey_round_trips;
    let n = 40;
    for answer in resolve_at_once(&reg, &dest("hot"), n).await {
        match answer.unwrap() {
            Resolution::Routed(r) => assert_eq!(r.member.id.as_str(), "pod-a"),
            other => panic!("not routed: {other:?}"),
        }
    }
    assert_eq!(
        reg.metrics().valkey_round_trips - before,
        1,
        "{n} concurrent misses, one lookup"
    );
    pod.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn hostile_member_records_are_never_routed_to() {
    let p = prefix();
    let v = valkey().await;
    let mut pod = TestPod::start(&p, "node:pod:1", PodOptions::default()).await;
    // records forged by whoever can write Valkey
    for (id, address) in [
        ("evil-userinfo", "http://admin:pw@127.0.0.1:6379"),
        ("evil-scheme", "gopher://127.0.0.1:6379"),
        ("evil-path", "http://127.0.0.1:6379/admin"),
        ("evil-metadata", "http://169.254.169.254:80"),
        ("evil-port", "http://127.0.0.1:6379"),
    ] {
        let _: () = v
            .hset(
                format!("{p}:member:{id}"),
                [("address", address), ("load", "0")],
            )
            .await
            .unwrap();
        let _: () = v.sadd(format!("{p}:members"), id).await.unwrap();
        let _: () = v.sadd(format!("{p}:destination:d-{id}"), id).await.unwrap();
    }
    let pod_port = pod.addr.port();
    let policy = AddressPolicy::default()
        .allow_cidr("127.0.0.0/8")
        .unwrap()
        .allow_ports(pod_port..=pod_port);
    let reg = Registry::new(
        valkey().await,
        RegistryConfig {
            prefix: p.clone(),
            cache: None,
            member_addresses: policy,
        },
        Arc::new(RoundRobin::new()),
    )
    .unwrap();
    let live = reg.list_live_members().await.unwrap();
    let ids: Vec<_> = live.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["node:pod:1"], "only the real pod is live");
    for id in [
        "evil-userinfo",
        "evil-scheme",
        "evil-path",
        "evil-metadata",
        "evil-port",
    ] {
        // the forged member is never routed to; its record exists, so it is
        // not taken out of the set either (a policy narrows picks, it never
        // reassigns a live member's destination): no live member here
        let d = dest(&format!("d-{id}"));
        match reg.route(&d, ResolveOptions::default()).await.unwrap() {
            Resolution::NoLiveMember => {}
            other => panic!("{id}: {other:?}"),
        }
        assert!(smembers(&v, &reg.keys().destination(&d)).await.contains(id));
    }
    pod.kill().await;
}
