//! This pod's side: the destinations it has local subscribers for, each
//! with its buffer of notices and its high-water mark (the last number
//! the pod passed on), which puts what arrives into order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use coordinator::{DestinationId, MemberId};
use tokio::sync::{broadcast, watch};

use crate::error::{Error, Result};
use crate::event::{Event, Position, now_micros};
use crate::telemetry;

/// What a destination's buffer carries to its subscribers; each
/// [`crate::Subscription`] turns it into [`crate::Notice`]s.
#[derive(Clone, Debug)]
pub(crate) enum Signal {
    /// An event, in order.
    Event(Arc<Event>),
    /// The numbering moved on to here without events (they were missed).
    Advance(Position),
    /// The numbering went back to here (Valkey lost the counter's last
    /// increments): numbers after it are given again.
    Rewind(Position),
    /// The broadcast channel is lost.
    Interrupted,
    /// It is back.
    Resumed,
}

/// One destination with local subscribers.
#[derive(Debug)]
pub(crate) struct Dest {
    pub(crate) id: DestinationId,
    tx: broadcast::Sender<Signal>,
    order: Mutex<Order>,
    /// Local subscribers; changed under the hub's lock.
    local: AtomicUsize,
    /// Whether the pod is subscribed on the broadcast channel (cluster
    /// mode); held while subscribing or unsubscribing.
    pub(crate) link: tokio::sync::Mutex<bool>,
    /// True once the first message after subscribing set the high-water
    /// mark.
    based: watch::Sender<bool>,
}

#[derive(Debug, Default)]
struct Order {
    /// The last position passed on; `None` while subscribing.
    hw: Option<Position>,
    interrupted: bool,
}

impl Dest {
    fn new(id: DestinationId, buffer: usize, hw: Option<Position>) -> Self {
        Self {
            id,
            tx: broadcast::Sender::new(buffer),
            order: Mutex::new(Order {
                hw,
                interrupted: false,
            }),
            local: AtomicUsize::new(0),
            link: tokio::sync::Mutex::new(false),
            based: watch::Sender::new(hw.is_some()),
        }
    }

    fn order(&self) -> MutexGuard<'_, Order> {
        self.order.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, signal: Signal) {
        // no receiver is fine: nobody listens yet, or any more
        let _ = self.tx.send(signal);
    }

    /// Forgets the high-water mark before subscribing again.
    pub(crate) fn reset(&self) {
        self.order().hw = None;
        self.based.send_replace(false);
    }

    /// A watch that turns true once the high-water mark is set.
    pub(crate) fn based(&self) -> watch::Receiver<bool> {
        self.based.subscribe()
    }

    fn set_base(&self, order: &mut Order, p: Position) {
        order.hw = Some(p);
        self.based.send_replace(true);
    }

    /// An event from the broadcast channel, in the channel's order: after
    /// the high-water mark normally; at or below it only if the counter
    /// went back (then told as a rewind).
    pub(crate) fn accept_event(&self, event: Arc<Event>) {
        let mut o = self.order();
        let p = event.position;
        match o.hw {
            // the first message after subscribing: the start
            None => self.set_base(&mut o, p),
            Some(hw) if hw.generation != p.generation => o.hw = Some(p),
            // in one channel's order numbers only grow: a smaller one means
            // the counter went back (a failover lost its last increments)
            Some(hw) if p.seq <= hw.seq => {
                self.send(Signal::Rewind(Position {
                    generation: p.generation,
                    seq: p.seq - 1,
                }));
                o.hw = Some(p);
            }
            Some(hw) => {
                if p.seq > hw.seq + 1 {
                    telemetry::missed(p.seq - hw.seq - 1);
                }
                o.hw = Some(p);
            }
        }
        self.send(Signal::Event(event));
    }

    /// A mark: every event up to `p` was published before it.
    pub(crate) fn accept_mark(&self, p: Position) {
        let mut o = self.order();
        match o.hw {
            None => self.set_base(&mut o, p),
            Some(hw) if hw.generation != p.generation => {
                o.hw = Some(p);
                self.send(Signal::Advance(p));
            }
            Some(hw) if p.seq > hw.seq => {
                telemetry::missed(p.seq - hw.seq);
                o.hw = Some(p);
                self.send(Signal::Advance(p));
            }
            Some(hw) if p.seq < hw.seq => {
                o.hw = Some(p);
                self.send(Signal::Rewind(p));
            }
            Some(_) => {}
        }
    }

    /// Standalone: numbers and passes on an event.
    fn publish_local(&self, publisher: &MemberId, payload: Bytes) -> Position {
        let mut o = self.order();
        let hw = o.hw.unwrap_or(Position {
            generation: now_micros(),
            seq: 0,
        });
        let p = Position {
            generation: hw.generation,
            seq: hw.seq + 1,
        };
        o.hw = Some(p);
        self.send(Signal::Event(Arc::new(Event {
            destination: self.id.clone(),
            position: p,
            publisher: publisher.clone(),
            sent_micros: now_micros(),
            payload,
        })));
        p
    }

    /// The broadcast channel is lost.
    pub(crate) fn interrupt(&self) {
        let mut o = self.order();
        if !o.interrupted {
            o.interrupted = true;
            self.send(Signal::Interrupted);
        }
    }

    /// The broadcast channel is back.
    pub(crate) fn resume(&self) {
        let mut o = self.order();
        if o.interrupted {
            o.interrupted = false;
            self.send(Signal::Resumed);
        }
    }

    /// The high-water mark.
    pub(crate) fn high_water(&self) -> Option<Position> {
        self.order().hw
    }

    /// A new receiver with the position it starts after, and whether the
    /// channel is interrupted now; taken together, so no signal falls
    /// between them.
    pub(crate) fn receiver(&self) -> (broadcast::Receiver<Signal>, Option<Position>, bool) {
        let o = self.order();
        (self.tx.subscribe(), o.hw, o.interrupted)
    }

    /// Local subscribers now.
    pub(crate) fn local(&self) -> usize {
        self.local.load(Ordering::Acquire)
    }
}

/// Every destination with local subscribers.
#[derive(Debug)]
pub(crate) struct Hub {
    dests: Mutex<HashMap<DestinationId, Arc<Dest>>>,
    subscribers: AtomicUsize,
    buffer: usize,
    max_destinations: usize,
    max_subscribers: usize,
    /// Standalone: destinations start numbered (no channel to wait for).
    standalone: bool,
}

impl Hub {
    pub(crate) fn new(config: &crate::EventsConfig, standalone: bool) -> Self {
        Self {
            dests: Mutex::default(),
            subscribers: AtomicUsize::new(0),
            buffer: config.buffer,
            max_destinations: config.max_destinations,
            max_subscribers: config.max_subscribers,
            standalone,
        }
    }

    fn dests(&self) -> MutexGuard<'_, HashMap<DestinationId, Arc<Dest>>> {
        self.dests.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new local subscriber of `id`, within the caps.
    pub(crate) fn join(&self, id: &DestinationId) -> Result<Arc<Dest>> {
        let mut dests = self.dests();
        if self.subscribers.load(Ordering::Acquire) >= self.max_subscribers {
            return Err(Error::TooManySubscribers("max_subscribers"));
        }
        let dest = match dests.get(id) {
            Some(d) => d.clone(),
            None => {
                if dests.len() >= self.max_destinations {
                    return Err(Error::TooManySubscribers("max_destinations"));
                }
                let hw = self.standalone.then(|| Position {
                    generation: now_micros(),
                    seq: 0,
                });
                let d = Arc::new(Dest::new(id.clone(), self.buffer, hw));
                dests.insert(id.clone(), d.clone());
                telemetry::destinations(dests.len());
                d
            }
        };
        dest.local.fetch_add(1, Ordering::AcqRel);
        let n = self.subscribers.fetch_add(1, Ordering::AcqRel) + 1;
        telemetry::subscribers(n);
        Ok(dest)
    }

    /// A local subscriber of `dest` is gone; true if it was the last.
    /// Standalone, the destination is forgotten then.
    pub(crate) fn leave(&self, dest: &Arc<Dest>) -> bool {
        let mut dests = self.dests();
        let n = self.subscribers.fetch_sub(1, Ordering::AcqRel) - 1;
        telemetry::subscribers(n);
        let last = dest.local.fetch_sub(1, Ordering::AcqRel) == 1;
        if last && self.standalone {
            Self::forget(&mut dests, dest);
        }
        last
    }

    /// Forgets `dest` if it still has no local subscriber.
    pub(crate) fn remove_if_idle(&self, dest: &Arc<Dest>) {
        let mut dests = self.dests();
        if dest.local() == 0 {
            Self::forget(&mut dests, dest);
        }
    }

    fn forget(dests: &mut HashMap<DestinationId, Arc<Dest>>, dest: &Arc<Dest>) {
        if dests.get(&dest.id).is_some_and(|d| Arc::ptr_eq(d, dest)) {
            dests.remove(&dest.id);
            telemetry::destinations(dests.len());
        }
    }

    pub(crate) fn get(&self, id: &DestinationId) -> Option<Arc<Dest>> {
        self.dests().get(id).cloned()
    }

    /// Every destination with local subscribers (or being unsubscribed).
    pub(crate) fn all(&self) -> Vec<Arc<Dest>> {
        self.dests().values().cloned().collect()
    }

    /// Standalone publish: numbered and passed on if anyone listens here.
    pub(crate) fn publish_local(
        &self,
        id: &DestinationId,
        publisher: &MemberId,
        payload: Bytes,
    ) -> Option<Position> {
        let dest = self.get(id)?;
        Some(dest.publish_local(publisher, payload))
    }
}
