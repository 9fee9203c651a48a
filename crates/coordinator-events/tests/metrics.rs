//! The events' metrics move, recorded into a debugging recorder while two
//! pods in this process publish and receive through a real Valkey
//! (`VALKEY_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::time::Duration;

use coordinator_events::EventsConfig;
use coordinator_events::telemetry::names;
use fred::prelude::*;
use metrics_snapshot::{DebuggingRecorder, Snapshot};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn published_delivered_dropped_subscribers_and_latency_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this binary");

    let prefix = prefix();
    let config = EventsConfig {
        buffer: 4,
        ..EventsConfig::default()
    };
    let a = Pod::start(&prefix, "a", config.clone()).await;
    let b = Pod::start(&prefix, "b", config).await;
    let d = dest("t");
    let mut sa = a.events.subscribe(&d).await.unwrap();
    let mut sb1 = b.events.subscribe(&d).await.unwrap();
    let sb2 = b.events.subscribe(&d).await.unwrap();
    let s = Snapshot::take(&snapshotter);
    // both pods record into this one recorder: the last write wins
    assert!(s.gauge(names::SUBSCRIBERS, &[]).is_some());
    assert_eq!(s.gauge(names::DESTINATIONS, &[]), Some(1.0));

    for i in 0..3 {
        a.events.publish(&d, format!("{i}")).await.unwrap();
    }
    for sub in [&mut sa, &mut sb1] {
        for _ in 0..3 {
            tokio::time::timeout(Duration::from_secs(5), sub.next())
                .await
                .unwrap()
                .unwrap();
        }
    }
    let s = Snapshot::take(&snapshotter);
    assert_eq!(s.counter(names::PUBLISHED_TOTAL, &[("outcome", "ok")]), 3);
    assert_eq!(s.counter(names::DELIVERED_TOTAL, &[]), 6);
    // received over the channel: a's own three and b's three
    assert_eq!(s.samples(names::BROADCAST_SECONDS, &[]).len(), 6);

    // sb2 never reads: past its buffer it loses events, counted as lagged
    for i in 0..6 {
        a.events.publish(&d, format!("more-{i}")).await.unwrap();
    }
    // once sb1 (same pod) has the last one, all six are in b's buffer
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), sb1.next())
            .await
            .unwrap()
            .unwrap();
        if matches!(n, coordinator_events::Notice::Event(ref e) if e.payload == "more-5") {
            break;
        }
    }
    let mut sb2 = sb2;
    let first = tokio::time::timeout(Duration::from_secs(5), sb2.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(first, coordinator_events::Notice::Gap(_)),
        "{first:?}"
    );
    let s = Snapshot::take(&snapshotter);
    assert!(s.counter(names::DROPPED_TOTAL, &[("reason", "lagged")]) >= 5);

    // malformed messages on the channel
    let client = valkey().await;
    let channel = a.events.keys().unwrap().channel(&d);
    let _: i64 = client
        .custom(fred::cmd!("SPUBLISH"), vec![channel, "junk".to_owned()])
        .await
        .unwrap();
    // a pod listed in the map but not subscribed: unreached at publish
    let map = a.events.keys().unwrap().subscribers(&d);
    add_map_entry(&client, &map, "ghost").await;
    let p = a.events.publish(&d, "x").await.unwrap();
    assert_eq!((p.pods, p.reached), (3, 2));
    // "x" came after the junk on both pods' connections: once both have
    // it, the junk was dropped on both
    for sub in [&mut sa, &mut sb1] {
        loop {
            let n = tokio::time::timeout(Duration::from_secs(5), sub.next())
                .await
                .unwrap()
                .unwrap();
            if matches!(n, coordinator_events::Notice::Event(ref e) if e.payload == "x") {
                break;
            }
        }
    }
    let s = Snapshot::take(&snapshotter);
    assert_eq!(
        s.counter(names::DROPPED_TOTAL, &[("reason", "malformed")]),
        2
    );
    assert_eq!(s.counter(names::UNREACHED_TOTAL, &[]), 1);
    drop((sa, sb1, sb2));
}
