//! Shared fixtures: a real Valkey (`VALKEY_URL`), pods in this process
//! (a `Member` with its heartbeat and `Events`), pods as processes
//! (`events-probe`, killed for real), chaos's TCP fault proxy that cuts one
//! pod from Valkey, and the checker of the delivery promise.

#![allow(
    dead_code,
    unused_imports,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used
)]

mod probe;

pub use chaos::proxy::FaultProxy;
pub use probe::Probe;

use std::time::Duration;

use coordinator::{DestinationId, Member, MemberAddress, MemberConfig, MemberId, ValkeyClient};
use coordinator_events::{Events, EventsConfig, Gap, Notice};
use fred::prelude::*;

/// Member TTL of the test pods.
pub const TTL: Duration = Duration::from_millis(1_500);
/// Their heartbeat period.
pub const HEARTBEAT: Duration = Duration::from_millis(500);

pub fn valkey_url() -> String {
    std::env::var("VALKEY_URL").expect("VALKEY_URL is not set; run `cargo xtask test-drivers`")
}

/// Connects to `VALKEY_URL` (or `url`).
pub async fn valkey_at(url: &str) -> ValkeyClient {
    coordinator::connect(url, Duration::from_millis(500))
        .await
        .expect("cannot connect to Valkey")
}

pub async fn valkey() -> ValkeyClient {
    valkey_at(&valkey_url()).await
}

/// A key prefix no other test uses.
pub fn prefix() -> String {
    format!("ev{}", &coordinator::RequestId::generate().as_str()[..12])
}

pub fn dest(s: &str) -> DestinationId {
    DestinationId::new(s).unwrap()
}

/// A pod in this process.
pub struct Pod {
    pub member: Member,
    pub events: Events,
    heartbeat: Option<coordinator::HeartbeatTask>,
}

impl Pod {
    pub async fn start(prefix: &str, id: &str, config: EventsConfig) -> Pod {
        Self::start_at(&valkey_url(), prefix, id, config).await
    }

    pub async fn start_at(url: &str, prefix: &str, id: &str, config: EventsConfig) -> Pod {
        let valkey = valkey_at(url).await;
        let mut mc = MemberConfig::new(
            MemberId::new(id).unwrap(),
            MemberAddress::parse("http://127.0.0.1:9").unwrap(),
        );
        mc.prefix = prefix.to_owned();
        mc.ttl = TTL;
        mc.heartbeat_interval = HEARTBEAT;
        let member = Member::new(valkey.clone(), mc).unwrap();
        member.register().await.unwrap();
        let heartbeat = Some(member.start_heartbeat());
        let events = Events::clustered(&member, valkey, config).await.unwrap();
        Pod {
            member,
            events,
            heartbeat,
        }
    }

    pub async fn stop_heartbeat(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.stop().await;
        }
    }
}

/// Polls `check` every 20 ms until it holds or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The ids in `P:subscribers:<dest>` whatever their deadline (what is
/// physically in Valkey), and those whose deadline is ahead (live).
pub async fn map_entries(client: &ValkeyClient, key: &str) -> (Vec<String>, Vec<String>) {
    let all: Vec<String> = client
        .custom(
            fred::cmd!("ZRANGE"),
            vec![key.to_owned(), "0".into(), "-1".into()],
        )
        .await
        .unwrap();
    let (secs, micros): (String, String) = client
        .custom(fred::cmd!("TIME"), Vec::<String>::new())
        .await
        .unwrap();
    let now_ms = secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000;
    let live: Vec<String> = client
        .custom(
            fred::cmd!("ZRANGEBYSCORE"),
            vec![key.to_owned(), format!("({now_ms}"), "+inf".into()],
        )
        .await
        .unwrap();
    (all, live)
}

/// One subscriber's view, in order, as `(kind, seq or range)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    Event(u64, String),
    Gap(u64, u64),
    Restarted,
    Interrupted,
    Resumed,
}

impl From<&Notice> for Seen {
    fn from(n: &Notice) -> Self {
        match n {
            Notice::Event(e) => {
                Seen::Event(e.position.seq, String::from_utf8_lossy(&e.payload).into())
            }
            Notice::Gap(Gap::Missed { first, last }) => Seen::Gap(*first, *last),
            Notice::Gap(Gap::Restarted { .. }) => Seen::Restarted,
            Notice::Interrupted => Seen::Interrupted,
            Notice::Resumed => Seen::Resumed,
        }
    }
}

/// Checks the delivery promise on one subscriber's notices after it
/// started at `start`: numbers strictly increase, and every number from
/// `start + 1` to the last one seen is either one event or inside one gap.
pub fn assert_contiguous(start: u64, seen: &[Seen]) {
    let mut next = start + 1;
    for s in seen {
        match s {
            Seen::Event(seq, _) => {
                assert_eq!(*seq, next, "an event out of order or unreported: {seen:?}");
                next = seq + 1;
            }
            Seen::Gap(first, last) => {
                assert_eq!(
                    *first, next,
                    "a gap that does not start where the stream is: {seen:?}"
                );
                assert!(last >= first, "{seen:?}");
                next = last + 1;
            }
            Seen::Restarted => panic!("unexpected restart: {seen:?}"),
            Seen::Interrupted | Seen::Resumed => {}
        }
    }
}

/// `redis://` through `proxy`.
pub fn proxy_url(proxy: &FaultProxy) -> String {
    format!("redis://{}", proxy.local_addr())
}

/// Adds `member` to the subscription map `key` by hand, with an entry that
/// never lapses (a ghost, or a malformed id).
pub async fn add_map_entry(client: &ValkeyClient, key: &str, member: &str) {
    let _: i64 = client
        .custom(
            fred::cmd!("ZADD"),
            vec![key.to_owned(), "99999999999999".into(), member.to_owned()],
        )
        .await
        .unwrap();
}
