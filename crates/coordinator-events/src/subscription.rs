//! A local subscriber's stream: the destination's signals turned into
//! [`Notice`]s, with a gap wherever numbers are missing.

use std::collections::VecDeque;
use std::sync::Arc;

use coordinator::DestinationId;
use futures::Stream;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::Core;
use crate::event::{Gap, Notice, Position};
use crate::hub::{Dest, Signal};
use crate::telemetry;

/// One local subscriber of a destination: what a pod's SSE or WebSocket
/// handler holds. Dropping it unsubscribes; when the pod's last subscriber
/// of a destination goes, its entry leaves the subscription map.
#[derive(Debug)]
pub struct Subscription {
    core: Arc<Core>,
    dest: Arc<Dest>,
    rx: Receiver<Signal>,
    /// The last position passed to the subscriber.
    last: Option<Position>,
    queued: VecDeque<Notice>,
}

/// Where a position stands against the last one passed on.
enum Step {
    /// Ahead, possibly with a gap before it.
    Ahead(Option<Gap>),
    /// At or behind: already delivered or reported missing.
    Behind,
}

impl Subscription {
    pub(crate) fn new(core: Arc<Core>, dest: Arc<Dest>) -> Self {
        let (rx, last, interrupted) = dest.receiver();
        let mut queued = VecDeque::new();
        if interrupted {
            queued.push_back(Notice::Interrupted);
        }
        Self {
            core,
            dest,
            rx,
            last,
            queued,
        }
    }

    /// The destination.
    pub fn destination(&self) -> &DestinationId {
        &self.dest.id
    }

    /// The last position passed on (or the start, before the first
    /// notice): the next event is numbered after it.
    pub fn position(&self) -> Option<Position> {
        self.last
    }

    /// The next notice; `None` once the events are shut down.
    pub async fn next(&mut self) -> Option<Notice> {
        loop {
            if let Some(notice) = self.queued.pop_front() {
                if matches!(notice, Notice::Event(_)) {
                    telemetry::delivered();
                }
                return Some(notice);
            }
            let received = tokio::select! {
                biased;
                _ = self.core.stop.cancelled() => return None,
                r = self.rx.recv() => r,
            };
            match received {
                Ok(signal) => self.absorb(signal),
                Err(RecvError::Lagged(n)) => {
                    telemetry::dropped("lagged", n);
                    match self.rx.try_recv() {
                        Ok(signal) => self.absorb(signal),
                        // the lost signals were the last ones: the pod's
                        // high-water mark says how far they went
                        Err(TryRecvError::Empty) => {
                            if let Some(hw) = self.dest.high_water() {
                                self.absorb(Signal::Advance(hw));
                            }
                        }
                        Err(TryRecvError::Lagged(n)) => telemetry::dropped("lagged", n),
                        Err(TryRecvError::Closed) => return None,
                    }
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }

    /// The notices as a [`Stream`] (for an SSE response, say).
    pub fn into_stream(self) -> impl Stream<Item = Notice> + Send + 'static {
        futures::stream::unfold(self, |mut s| async move { s.next().await.map(|n| (n, s)) })
    }

    fn absorb(&mut self, signal: Signal) {
        match signal {
            Signal::Event(event) => {
                if let Step::Ahead(gap) = self.step(event.position, false) {
                    if let Some(gap) = gap {
                        self.queued.push_back(Notice::Gap(gap));
                    }
                    self.queued.push_back(Notice::Event(event));
                }
            }
            Signal::Advance(p) => {
                if let Step::Ahead(Some(gap)) = self.step(p, true) {
                    self.queued.push_back(Notice::Gap(gap));
                }
            }
            Signal::Rewind(p) => {
                if self
                    .last
                    .is_some_and(|l| l.generation == p.generation && l.seq > p.seq)
                {
                    self.queued.push_back(Notice::Gap(Gap::Restarted {
                        generation: p.generation,
                    }));
                    self.last = Some(p);
                }
            }
            Signal::Interrupted => self.queued.push_back(Notice::Interrupted),
            Signal::Resumed => self.queued.push_back(Notice::Resumed),
        }
    }

    /// Moves the last position to `p` if it is ahead. `p` itself is missed
    /// when `through` (an advance without its event), delivered otherwise.
    fn step(&mut self, p: Position, through: bool) -> Step {
        let upto = if through {
            p.seq
        } else {
            p.seq.saturating_sub(1)
        };
        let gap = match self.last {
            None => None,
            Some(last) if last.generation != p.generation => Some(Gap::Restarted {
                generation: p.generation,
            }),
            Some(last) if p.seq <= last.seq => return Step::Behind,
            Some(last) if upto > last.seq => Some(Gap::Missed {
                first: last.seq + 1,
                last: upto,
            }),
            Some(_) => None,
        };
        self.last = Some(p);
        Step::Ahead(gap)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.core.release(&self.dest);
    }
}
