//! Standalone events (no Valkey): the same API inside one process, the
//! caps, and a subscriber too slow for its buffer getting a gap.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use coordinator::{DestinationId, MemberId};
use coordinator_events::{Error, Events, EventsConfig, Gap, Notice};
use futures::StreamExt;

fn dest(s: &str) -> DestinationId {
    DestinationId::new(s).unwrap()
}

fn events(config: EventsConfig) -> Events {
    Events::standalone(MemberId::new("solo").unwrap(), config).unwrap()
}

async fn next(sub: &mut coordinator_events::Subscription) -> Notice {
    tokio::time::timeout(Duration::from_secs(2), sub.next())
        .await
        .expect("a notice")
        .expect("not closed")
}

#[tokio::test]
async fn subscribers_in_the_process_get_every_event_in_order() {
    let ev = events(EventsConfig::default());
    assert!(!ev.is_clustered());
    let d = dest("acme");
    let mut a = ev.subscribe(&d).await.unwrap();
    let mut b = ev.subscribe(&d).await.unwrap();
    let mut other = ev.subscribe(&dest("globex")).await.unwrap();
    assert_eq!(
        ev.subscribers(&d).await.unwrap(),
        [MemberId::new("solo").unwrap()]
    );
    for i in 1..=3u64 {
        let p = ev.publish(&d, format!("e{i}")).await.unwrap();
        assert_eq!(p.position.unwrap().seq, i);
        assert_eq!((p.pods, p.reached), (1, 1));
    }
    for sub in [&mut a, &mut b] {
        for i in 1..=3u64 {
            match next(sub).await {
                Notice::Event(e) => {
                    assert_eq!(e.position.seq, i);
                    assert_eq!(e.payload, format!("e{i}"));
                    assert_eq!(e.publisher.as_str(), "solo");
                    assert_eq!(e.destination, d);
                }
                n => panic!("{n:?}"),
            }
        }
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(100), other.next())
            .await
            .is_err(),
        "another destination's subscriber gets nothing"
    );
    // nobody listens: not numbered, delivered nowhere
    drop(other);
    let p = ev.publish(&dest("globex"), "lost").await.unwrap();
    assert_eq!((p.position, p.pods, p.reached), (None, 0, 0));
    assert!(ev.subscribers(&dest("globex")).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_subscriber_too_slow_for_its_buffer_gets_a_gap_not_silence() {
    let ev = events(EventsConfig {
        buffer: 4,
        ..EventsConfig::default()
    });
    let d = dest("t");
    let mut slow = ev.subscribe(&d).await.unwrap();
    let start = slow.position().unwrap().seq;
    for i in 0..10 {
        ev.publish(&d, format!("{i}")).await.unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 5 {
        seen.push(next(&mut slow).await);
    }
    assert_eq!(
        seen[0],
        Notice::Gap(Gap::Missed {
            first: start + 1,
            last: start + 6
        })
    );
    let seqs: Vec<u64> = seen[1..]
        .iter()
        .map(|n| match n {
            Notice::Event(e) => e.position.seq,
            n => panic!("{n:?}"),
        })
        .collect();
    assert_eq!(seqs, (start + 7..=start + 10).collect::<Vec<_>>());
}

#[tokio::test]
async fn the_last_events_lost_to_lag_are_reported_too() {
    let ev = events(EventsConfig {
        buffer: 2,
        ..EventsConfig::default()
    });
    let d = dest("t");
    let mut slow = ev.subscribe(&d).await.unwrap();
    for i in 0..5 {
        ev.publish(&d, format!("{i}")).await.unwrap();
    }
    // read everything that is there, then nothing more comes
    let mut seen = Vec::new();
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_millis(100), slow.next()).await {
        seen.push(n);
    }
    let covered: u64 = seen
        .iter()
        .map(|n| match n {
            Notice::Event(_) => 1,
            Notice::Gap(g) => g.missed().unwrap(),
            n => panic!("{n:?}"),
        })
        .sum();
    assert_eq!(covered, 5, "every number delivered or reported: {seen:?}");
}

#[tokio::test]
async fn caps_and_sizes_are_enforced() {
    let ev = events(EventsConfig {
        max_subscribers: 2,
        max_destinations: 1,
        max_payload: 8,
        ..EventsConfig::default()
    });
    let a = ev.subscribe(&dest("a")).await.unwrap();
    assert!(matches!(
        ev.subscribe(&dest("b")).await,
        Err(Error::TooManySubscribers("max_destinations"))
    ));
    let _a2 = ev.subscribe(&dest("a")).await.unwrap();
    assert!(matches!(
        ev.subscribe(&dest("a")).await,
        Err(Error::TooManySubscribers("max_subscribers"))
    ));
    drop(a);
    assert!(ev.subscribe(&dest("a")).await.is_ok(), "a place freed");
    assert!(matches!(
        ev.publish(&dest("a"), vec![0u8; 9]).await,
        Err(Error::TooLarge { size: 9, limit: 8 })
    ));
    assert!(matches!(
        Events::standalone(
            MemberId::new("x").unwrap(),
            EventsConfig {
                buffer: 0,
                ..EventsConfig::default()
            }
        ),
        Err(Error::InvalidConfig(_))
    ));
}

#[tokio::test]
async fn shutdown_ends_the_streams() {
    let ev = events(EventsConfig::default());
    let d = dest("t");
    let sub = ev.subscribe(&d).await.unwrap();
    let mut stream = Box::pin(sub.into_stream());
    ev.publish(&d, "x").await.unwrap();
    assert!(matches!(stream.next().await, Some(Notice::Event(_))));
    ev.shutdown(Duration::from_secs(1)).await;
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(1), stream.next())
            .await
            .unwrap(),
        None
    );
    assert!(matches!(ev.subscribe(&d).await, Err(Error::Closed)));
    assert!(matches!(ev.publish(&d, "y").await, Err(Error::Closed)));
}
