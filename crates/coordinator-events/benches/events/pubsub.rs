//! The channel this crate ships: three pods, each a `Member` with its
//! heartbeat and `Events::clustered`, one subscriber each.

use std::time::Duration;

use coordinator::{DestinationId, Member, MemberAddress, MemberConfig, MemberId};
use coordinator_events::{Events, EventsConfig, Notice};

use crate::{Channel, PAYLOAD, PODS, Sink};

pub(crate) struct Fleet {
    events: Vec<Events>,
    dest: DestinationId,
    heartbeats: Vec<coordinator::HeartbeatTask>,
}

impl Fleet {
    pub(crate) async fn start(url: &str, sink: Sink) -> Fleet {
        let prefix = format!("bench{}", &coordinator::RequestId::generate().as_str()[..8]);
        let dest = DestinationId::new("bench").unwrap();
        let mut events = Vec::new();
        let mut heartbeats = Vec::new();
        for i in 0..PODS {
            let valkey = coordinator::connect(url, Duration::from_secs(2))
                .await
                .unwrap();
            let mut mc = MemberConfig::new(
                MemberId::new(format!("pod-{i}")).unwrap(),
                MemberAddress::parse("http://127.0.0.1:9").unwrap(),
            );
            mc.prefix = prefix.clone();
            let member = Member::new(valkey.clone(), mc).unwrap();
            member.register().await.unwrap();
            heartbeats.push(member.start_heartbeat());
            let ev = Events::clustered(
                &member,
                valkey,
                EventsConfig {
                    buffer: 1 << 16,
                    ..EventsConfig::default()
                },
            )
            .await
            .unwrap();
            let mut sub = ev.subscribe(&dest).await.unwrap();
            let sink = sink.clone();
            tokio::spawn(async move {
                while let Some(n) = sub.next().await {
                    match n {
                        Notice::Event(e) => {
                            let from: usize = e.publisher.as_str()[4..].parse().unwrap();
                            sink.record(i, from, e.sent_micros);
                        }
                        Notice::Gap(g) => eprintln!("pubsub: pod-{i} missed {g:?}"),
                        _ => {}
                    }
                }
            });
            events.push(ev);
        }
        Fleet {
            events,
            dest,
            heartbeats,
        }
    }

    pub(crate) async fn stop(&self) {
        for ev in &self.events {
            ev.shutdown(Duration::from_secs(1)).await;
        }
        let _ = &self.heartbeats;
    }
}

impl Channel for Fleet {
    async fn publish(&self, from: usize) {
        self.events[from]
            .publish(&self.dest, PAYLOAD)
            .await
            .unwrap();
    }
}
