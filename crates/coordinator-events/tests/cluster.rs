//! Cluster events on a real Valkey (`VALKEY_URL`; `cargo xtask
//! test-drivers --engine valkey`): pods as processes (`events-probe`) for
//! what the issue names — three pods all receiving, a pod SIGKILLed, a pod
//! cut from Valkey — and pods in this process for the rest of the
//! promise.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use coordinator_events::{EventsConfig, Gap, Notice};
use fred::prelude::*;
use support::*;

const WAIT: Duration = Duration::from_secs(5);

async fn wait_payloads(p: &Probe, dest: &str, n: usize) -> Vec<String> {
    eventually(WAIT, || {
        let got = p.payloads(dest).len();
        async move { got >= n }
    })
    .await;
    p.payloads(dest)
}

/// Chaos's TCP fault proxy in front of the Valkey at `url`
/// (`redis://host:port`).
async fn proxy_to_valkey(url: &str) -> FaultProxy {
    let upstream: std::net::SocketAddr = url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .parse()
        .expect("VALKEY_URL as redis://host:port");
    FaultProxy::start(upstream).await.unwrap()
}

/// A fresh prefix, and pods pod-1..3 as processes, each subscribed to
/// `acme`, with the position each subscription started at.
async fn three_subscribed_to_acme() -> (String, Vec<Probe>, Vec<u64>) {
    let (url, prefix) = (valkey_url(), prefix());
    let mut pods = Vec::new();
    for id in ["pod-1", "pod-2", "pod-3"] {
        pods.push(Probe::start(&url, &prefix, id).await);
    }
    let mut starts = Vec::new();
    for p in &mut pods {
        starts.push(p.subscribe("acme").await);
    }
    (prefix, pods, starts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn three_pods_all_receive_what_any_of_them_publishes() {
    let (prefix, mut pods, starts) = three_subscribed_to_acme().await;
    // the map lists all three
    let client = valkey().await;
    let key = format!("{prefix}:subscribers:acme");
    let (_, live) = map_entries(&client, &key).await;
    assert_eq!(
        live.iter().cloned().collect::<BTreeSet<_>>(),
        ["pod-1", "pod-2", "pod-3"].map(String::from).into(),
    );
    // each pod publishes; every pod's subscriber gets all three, in one order
    for (i, p) in pods.iter_mut().enumerate() {
        let answer = p.publish("acme", &format!("from-{i}")).await;
        assert_eq!(answer["kind"], "published", "{answer}");
        assert_eq!(answer["pods"], 3, "{answer}");
        assert_eq!(answer["reached"], 3, "{answer}");
    }
    let mut orders = Vec::new();
    for (p, start) in pods.iter().zip(&starts) {
        let got = wait_payloads(p, "acme", 3).await;
        assert_eq!(
            got,
            ["from-0", "from-1", "from-2"],
            "{}: {:?}",
            p.id,
            p.lines()
        );
        assert_contiguous(*start, &p.seen("acme"));
        orders.push(p.seen("acme"));
    }
    assert!(
        orders.windows(2).all(|w| w[0] == w[1]),
        "one order on every pod: {orders:?}"
    );
    // another destination's subscribers see none of it
    pods[0].subscribe("globex").await;
    pods[1].publish("globex", "g").await;
    assert_eq!(wait_payloads(&pods[0], "globex", 1).await, ["g"]);
    assert_eq!(pods[0].payloads("acme").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn a_killed_pod_leaves_no_entry_past_its_ttl_and_the_others_keep_receiving() {
    let (prefix, mut pods, starts) = three_subscribed_to_acme().await;
    let client = valkey().await;
    let key = format!("{prefix}:subscribers:acme");

    pods[1].kill().await;
    let killed = Instant::now();
    // still listed right after the kill: the entry lives out its TTL
    let (all, live) = map_entries(&client, &key).await;
    assert!(live.contains(&"pod-2".to_owned()), "{all:?} {live:?}");
    // the others keep receiving, while the dead pod is still listed ...
    let answer = pods[0].publish("acme", "after-kill").await;
    assert_eq!(answer["pods"], 3, "{answer}");
    assert_eq!(
        answer["reached"], 2,
        "the dead pod is not reached: {answer}"
    );
    // ... and after its entry lapsed
    assert!(
        eventually(TTL + HEARTBEAT * 2, || async {
            let (_, live) = map_entries(&client, &key).await;
            !live.contains(&"pod-2".to_owned())
        })
        .await,
        "pod-2's entry outlived its TTL"
    );
    assert!(
        killed.elapsed() >= TTL - Duration::from_millis(100),
        "the entry went before its TTL ({:?})",
        killed.elapsed()
    );
    // gone from Valkey too, once a renewal or a publish touched the set
    assert!(
        eventually(HEARTBEAT * 3, || async {
            let (all, _) = map_entries(&client, &key).await;
            !all.contains(&"pod-2".to_owned())
        })
        .await,
        "pod-2's entry is still stored"
    );
    let (_, live) = map_entries(&client, &key).await;
    assert_eq!(live.len(), 2, "the live pods keep theirs: {live:?}");
    let answer = pods[2].publish("acme", "after-ttl").await;
    assert_eq!(
        (answer["pods"].as_u64(), answer["reached"].as_u64()),
        (Some(2), Some(2))
    );
    for i in [0, 2] {
        let got = wait_payloads(&pods[i], "acme", 2).await;
        assert_eq!(got, ["after-kill", "after-ttl"], "{}", pods[i].id);
        assert_contiguous(starts[i], &pods[i].seen("acme"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn a_pod_cut_from_valkey_is_told_at_once_and_sees_the_exact_gap() {
    let (url, prefix) = (valkey_url(), prefix());
    let proxy = proxy_to_valkey(&url).await;
    let mut a = Probe::start(&url, &prefix, "pod-a").await;
    let mut b = Probe::start(&url, &prefix, "pod-b").await;
    let mut c = Probe::start(&proxy_url(&proxy), &prefix, "pod-c").await;
    let start_b = b.subscribe("acme").await;
    let start_c = c.subscribe("acme").await;
    a.publish("acme", "before").await;
    assert_eq!(wait_payloads(&c, "acme", 1).await, ["before"]);

    proxy.cut().await;
    let cut = Instant::now();
    // told at once: not silence
    let told = c
        .wait_for(WAIT, |v| v["kind"] == "interrupted" && v["dest"] == "acme")
        .await;
    assert!(told.is_some(), "no interruption: {:?}", c.lines());
    let told_after = cut.elapsed();
    for i in 0..3 {
        let answer = a.publish("acme", &format!("during-{i}")).await;
        assert_eq!(answer["reached"], 1, "only pod-b is reached: {answer}");
    }
    assert_eq!(wait_payloads(&b, "acme", 4).await.len(), 4);
    proxy.restore();
    // back: resumed, then the gap of exactly the three it missed
    let gap = c.wait_for(WAIT, |v| v["kind"] == "gap").await;
    assert!(gap.is_some(), "no gap after the cut: {:?}", c.lines());
    a.publish("acme", "after").await;
    assert_eq!(wait_payloads(&c, "acme", 2).await, ["before", "after"]);
    let seen = c.seen("acme");
    // the numbers: the first event, the exact gap, the next event
    let numbers: Vec<&Seen> = seen
        .iter()
        .filter(|s| !matches!(s, Seen::Interrupted | Seen::Resumed))
        .collect();
    assert_eq!(
        numbers,
        [
            &Seen::Event(start_c + 1, "before".into()),
            &Seen::Gap(start_c + 2, start_c + 4),
            &Seen::Event(start_c + 5, "after".into()),
        ],
        "{seen:?}\n{:?}",
        c.lines()
    );
    // told before the gap: interrupted, then resumed (a loaded machine may
    // add a spurious interruption later: a probe that came back too late)
    assert_eq!(seen[1..3], [Seen::Interrupted, Seen::Resumed], "{seen:?}");
    assert_eq!(seen[3], Seen::Gap(start_c + 2, start_c + 4), "{seen:?}");
    assert_contiguous(start_c, &seen);
    assert_contiguous(start_b, &b.seen("acme"));
    assert!(b.seen("acme").iter().all(|s| matches!(s, Seen::Event(..))));
    eprintln!("interruption told {told_after:?} after the cut");
}

/// Cut after cut: each time the pod is back within [`WAIT`] of the
/// restore, with the exact gap. The pod's reconnection lands while a
/// probe is out more often than not here; a monitor that answers the
/// probe's failure by opening yet another connection drops the
/// subscriptions it is making and goes round that loop (the way the
/// single cut above failed on loaded machines).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn a_pod_cut_again_and_again_comes_back_each_time_with_the_exact_gap() {
    const ROUNDS: usize = 6;
    let (url, prefix) = (valkey_url(), prefix());
    let proxy = proxy_to_valkey(&url).await;
    let mut a = Probe::start(&url, &prefix, "pod-a").await;
    let mut c = Probe::start(&proxy_url(&proxy), &prefix, "pod-c").await;
    let start = c.subscribe("acme").await;
    let valkey = valkey().await;
    let channel = coordinator_events::keys::EventKeys::new(
        &coordinator::keys::KeySpace::new(prefix.clone()).unwrap(),
    )
    .channel(&dest("acme"));
    // The channel is named right: pod-c's subscription is counted.
    assert_eq!(shard_subscribers(&valkey, &channel).await, 1);
    a.publish("acme", "before").await;
    assert_eq!(wait_payloads(&c, "acme", 1).await, ["before"]);
    let mut expected = vec![Seen::Event(start + 1, "before".into())];
    let mut next = start + 2;
    for round in 1..=ROUNDS {
        // A round may be told of more than one interruption (a probe that
        // failed while the connection came back): wait for a new one.
        let interrupted_before = c.count(|v| v["kind"] == "interrupted");
        let gaps_before = c.count(|v| v["kind"] == "gap");
        proxy.cut().await;
        let told = eventually(WAIT, || {
            let n = c.count(|v| v["kind"] == "interrupted");
            async move { n > interrupted_before }
        })
        .await;
        assert!(told, "round {round}: no interruption: {:?}", c.lines());
        // The pod saw its connection go; Valkey may see it a moment later:
        // the publishes below must find no subscriber.
        let gone = eventually(WAIT, || {
            let (valkey, channel) = (valkey.clone(), channel.clone());
            async move { shard_subscribers(&valkey, &channel).await == 0 }
        })
        .await;
        assert!(
            gone,
            "round {round}: Valkey still counts pod-c's subscription"
        );
        for i in 0..2 {
            let answer = a.publish("acme", &format!("during-{round}-{i}")).await;
            assert_eq!(answer["reached"], 0, "pod-c is cut: {answer}");
        }
        // the cut lasts past a probe's timeout now and then: a probe is
        // out when the connection comes back
        if round % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(1_200)).await;
        }
        proxy.restore();
        let restored = Instant::now();
        let back = eventually(WAIT, || {
            let n = c.count(|v| v["kind"] == "gap");
            async move { n > gaps_before }
        })
        .await;
        assert!(
            back,
            "round {round}: no gap within {WAIT:?} of the restore: {:?}",
            c.lines()
        );
        eprintln!(
            "round {round}: back {:?} after the restore",
            restored.elapsed()
        );
        a.publish("acme", &format!("after-{round}")).await;
        assert_eq!(wait_payloads(&c, "acme", round + 1).await.len(), round + 1);
        expected.push(Seen::Gap(next, next + 1));
        expected.push(Seen::Event(next + 2, format!("after-{round}")));
        next += 3;
    }
    let seen = c.seen("acme");
    let numbers: Vec<Seen> = seen
        .iter()
        .filter(|s| !matches!(s, Seen::Interrupted | Seen::Resumed))
        .cloned()
        .collect();
    assert_eq!(numbers, expected, "{seen:?}");
    assert_contiguous(start, &seen);
}

/// How many connections Valkey counts as subscribed to sharded `channel`.
async fn shard_subscribers(valkey: &coordinator::ValkeyClient, channel: &str) -> i64 {
    let answer: Vec<fred::types::Value> = valkey
        .custom(
            fred::cmd!("PUBSUB"),
            vec!["SHARDNUMSUB".to_owned(), channel.to_owned()],
        )
        .await
        .unwrap();
    match answer.as_slice() {
        [_, fred::types::Value::Integer(n)] => *n,
        other => panic!("PUBSUB SHARDNUMSUB {channel}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn concurrent_publishers_give_every_subscriber_one_order() {
    let prefix = prefix();
    let mut pods = Vec::new();
    for id in ["p1", "p2", "p3"] {
        pods.push(Pod::start(&prefix, id, EventsConfig::default()).await);
    }
    let d = dest("busy");
    let mut subs = Vec::new();
    for p in &pods {
        subs.push(p.events.subscribe(&d).await.unwrap());
    }
    const EACH: usize = 150;
    let mut publishers = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        let events = p.events.clone();
        let d = d.clone();
        publishers.push(tokio::spawn(async move {
            for n in 0..EACH {
                events.publish(&d, format!("{i}-{n}")).await.unwrap();
            }
        }));
    }
    for p in publishers {
        p.await.unwrap();
    }
    let mut views = Vec::new();
    for sub in &mut subs {
        let start = sub.position().unwrap().seq;
        let mut seen = Vec::new();
        while seen.len() < 3 * EACH {
            let n = tokio::time::timeout(WAIT, sub.next())
                .await
                .unwrap()
                .unwrap();
            seen.push(Seen::from(&n));
        }
        assert_contiguous(start, &seen);
        assert!(
            seen.iter().all(|s| matches!(s, Seen::Event(..))),
            "no gaps: {seen:?}"
        );
        // each publisher's events in its own order
        for i in 0..3 {
            let mine: Vec<usize> = seen
                .iter()
                .filter_map(|s| match s {
                    Seen::Event(_, p) => p.strip_prefix(&format!("{i}-"))?.parse().ok(),
                    _ => None,
                })
                .collect();
            assert_eq!(mine, (0..EACH).collect::<Vec<_>>());
        }
        views.push(seen);
    }
    assert!(views.windows(2).all(|w| w[0] == w[1]), "one order for all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn the_last_local_subscriber_leaving_removes_the_entry() {
    let prefix = prefix();
    let a = Pod::start(&prefix, "a", EventsConfig::default()).await;
    let b = Pod::start(&prefix, "b", EventsConfig::default()).await;
    let d = dest("t");
    let key = a.events.keys().unwrap().subscribers(&d);
    let client = valkey().await;
    let s1 = a.events.subscribe(&d).await.unwrap();
    let s2 = a.events.subscribe(&d).await.unwrap();
    let mut sb = b.events.subscribe(&d).await.unwrap();
    let ids = |v: Vec<coordinator::MemberId>| {
        v.into_iter()
            .map(|m| m.as_str().to_owned())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        ids(a.events.subscribers(&d).await.unwrap()),
        ["a", "b"].map(String::from).into()
    );
    drop(s1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        map_entries(&client, &key).await.1.len(),
        2,
        "a still has a subscriber"
    );
    drop(s2);
    assert!(
        eventually(WAIT, || async {
            map_entries(&client, &key).await.0 == ["b"]
        })
        .await,
        "a's entry stays after its last subscriber left"
    );
    // a publishes still reach b; a's renewals do not bring its entry back
    a.events.publish(&d, "x").await.unwrap();
    let n = tokio::time::timeout(WAIT, sb.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(n, Notice::Event(ref e) if e.payload == "x"),
        "{n:?}"
    );
    tokio::time::sleep(HEARTBEAT * 2).await;
    assert_eq!(map_entries(&client, &key).await.0, ["b"]);
    // entries are renewed with the heartbeat: past the TTL, b is still live
    tokio::time::sleep(TTL).await;
    assert_eq!(map_entries(&client, &key).await.1, ["b"]);
    drop(sb);
    assert!(
        eventually(WAIT, || async {
            !client.exists::<bool, _>(&key).await.unwrap()
        })
        .await,
        "the key goes with its last entry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn entries_lapse_when_the_heartbeat_stops() {
    let prefix = prefix();
    let mut a = Pod::start(&prefix, "a", EventsConfig::default()).await;
    let d = dest("t");
    let key = a.events.keys().unwrap().subscribers(&d);
    let client = valkey().await;
    let _sub = a.events.subscribe(&d).await.unwrap();
    a.stop_heartbeat().await;
    let stopped = Instant::now();
    assert!(
        eventually(TTL * 2, || async {
            map_entries(&client, &key).await.1.is_empty()
        })
        .await,
        "the entry outlived the heartbeat"
    );
    assert!(stopped.elapsed() >= TTL - HEARTBEAT - Duration::from_millis(100));
    assert!(
        eventually(TTL, || async {
            !client.exists::<bool, _>(&key).await.unwrap()
        })
        .await,
        "the key outlived its last entry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn untrusted_channel_messages_and_entries_are_dropped() {
    let prefix = prefix();
    let a = Pod::start(
        &prefix,
        "a",
        EventsConfig {
            max_payload: 16,
            ..EventsConfig::default()
        },
    )
    .await;
    let d = dest("t");
    let keys = a.events.keys().unwrap().clone();
    let client = valkey().await;
    let mut sub = a.events.subscribe(&d).await.unwrap();
    let start = sub.position().unwrap();
    let channel = keys.channel(&d);
    for garbage in [
        "".to_owned(),
        "hello".to_owned(),
        "ev1\n1\n2\n3\n".to_owned(),
        format!(
            "ev1\n{}\n{}\n1\np\n{}",
            start.generation,
            start.seq + 1,
            "x".repeat(17)
        ),
        format!("ev1\n{}\n{}\n1\n../p\nx", start.generation, start.seq + 1),
        "mk1\n1\n".to_owned(),
    ] {
        let _: i64 = client
            .custom(fred::cmd!("SPUBLISH"), vec![channel.clone(), garbage])
            .await
            .unwrap();
    }
    // a malformed entry in the map is not listed
    add_map_entry(&client, &keys.subscribers(&d), "bad\u{7}id").await;
    assert_eq!(
        a.events
            .subscribers(&d)
            .await
            .unwrap()
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>(),
        ["a"]
    );
    // too large to publish
    assert!(matches!(
        a.events.publish(&d, vec![0u8; 17]).await,
        Err(coordinator_events::Error::TooLarge {
            size: 17,
            limit: 16
        })
    ));
    // the next real event comes next, with no gap
    a.events.publish(&d, "ok").await.unwrap();
    let n = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    match n {
        Notice::Event(e) => {
            assert_eq!(e.payload, "ok");
            assert_eq!(e.position.seq, start.seq + 1);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn a_counter_lost_or_set_back_in_valkey_shows_as_a_restart() {
    let prefix = prefix();
    let a = Pod::start(&prefix, "a", EventsConfig::default()).await;
    let d = dest("t");
    let client = valkey().await;
    let mut sub = a.events.subscribe(&d).await.unwrap();
    for _ in 0..3 {
        a.events.publish(&d, "x").await.unwrap();
    }
    for _ in 0..3 {
        tokio::time::timeout(WAIT, sub.next())
            .await
            .unwrap()
            .unwrap();
    }
    let _: i64 = client
        .del(a.events.keys().unwrap().counter(&d))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let p = a.events.publish(&d, "y").await.unwrap();
    assert_eq!(p.position.unwrap().seq, 1, "numbering starts again");
    let n = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(n, Notice::Gap(Gap::Restarted { .. })), "{n:?}");
    let n = tokio::time::timeout(WAIT, sub.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(n, Notice::Event(ref e) if e.payload == "y" && e.position.seq == 1),
        "{n:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey: run `cargo xtask test-drivers --engine valkey`"]
async fn the_cut_fixture_really_cuts() {
    let url = valkey_url();
    let proxy = proxy_to_valkey(&url).await;
    let c = valkey_at(&proxy_url(&proxy)).await;
    let _: String = c.ping(None).await.unwrap();
    proxy.cut().await;
    for _ in 0..3 {
        assert!(
            c.ping::<Value>(None).await.is_err(),
            "a call went through the cut"
        );
    }
    proxy.restore();
    assert!(
        eventually(WAIT, || async { c.ping::<Value>(None).await.is_ok() }).await,
        "no way back after the cut"
    );
}
