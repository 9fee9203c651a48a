//! Per-destination concurrency cap with a wait queue, and fan-out when the
//! queue stays non-empty past a threshold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Member, SaturationConfig};
use crate::error::{Error, Result};
use crate::ids::{DestinationId, MemberId};
use crate::registry::fan_out_peer;

/// Idle destination states are swept when this many are tracked.
const IDLE_SWEEP_AT: usize = 1024;

struct DestState {
    semaphore: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// Since when the queue has been non-empty (reset after each fan-out).
    since: Mutex<Option<Instant>>,
    fanning_out: AtomicBool,
}

#[derive(Default)]
struct Load {
    running: AtomicI64,
    queued: AtomicI64,
}

pub(super) struct Limiter {
    config: SaturationConfig,
    states: Mutex<HashMap<DestinationId, Arc<DestState>>>,
    load: Arc<Load>,
}

impl Limiter {
    pub(super) fn new(config: SaturationConfig) -> Self {
        Self {
            config,
            states: Mutex::default(),
            load: Arc::default(),
        }
    }

    /// Running plus queued calls.
    pub(super) fn load(&self) -> i64 {
        self.load.running.load(Ordering::Relaxed) + self.load.queued.load(Ordering::Relaxed)
    }

    fn state(&self, dest: &DestinationId) -> Arc<DestState> {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        if states.len() >= IDLE_SWEEP_AT && !states.contains_key(dest) {
            // Forget idle destinations: nobody holds their state (every
            // acquirer goes through this lock) and every slot is free.
            let cap = self.config.max_concurrent;
            states.retain(|_, st| {
                Arc::strong_count(st) > 1 || st.semaphore.available_permits() < cap
            });
        }
        states
            .entry(dest.clone())
            .or_insert_with(|| {
                Arc::new(DestState {
                    semaphore: Arc::new(Semaphore::new(self.config.max_concurrent)),
                    waiting: AtomicUsize::new(0),
                    since: Mutex::new(None),
                    fanning_out: AtomicBool::new(false),
                })
            })
            .clone()
    }
}

/// A slot of a destination's local share; dropping it frees the slot.
#[derive(Debug)]
pub struct DestinationPermit {
    _permit: OwnedSemaphorePermit,
    load: Arc<Load>,
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Load")
    }
}

impl Drop for DestinationPermit {
    fn drop(&mut self) {
        self.load.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a queued caller; the last one to leave clears the queue timer.
struct Waiting<'a> {
    state: &'a DestState,
    load: &'a Load,
}

impl<'a> Waiting<'a> {
    fn enter(state: &'a DestState, load: &'a Load) -> Self {
        load.queued.fetch_add(1, Ordering::Relaxed);
        if state.waiting.fetch_add(1, Ordering::AcqRel) == 0 {
            *state.since.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }
        Self { state, load }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.load.queued.fetch_sub(1, Ordering::Relaxed);
        if self.state.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self.state.since.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }
}

impl Member {
    /// Takes a slot of `dest`'s local share, waiting in FIFO order when
    /// `max_concurrent` calls already run. While callers wait longer than
    /// `queue_threshold`, the pod fans `dest` out (see [`Member::fan_out`]),
    /// at most one fan-out at a time per destination.
    pub async fn acquire(&self, dest: &DestinationId) -> Result<DestinationPermit> {
        let limiter = &self.inner.limiter;
        let state = limiter.state(dest);
        let permit = match state.semaphore.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let _waiting = Waiting::enter(&state, &limiter.load);
                let threshold = limiter.config.queue_threshold;
                let tick = (threshold / 4).max(Duration::from_millis(1));
                let acquire = state.semaphore.clone().acquire_owned();
                tokio::pin!(acquire);
                loop {
                    tokio::select! {
                        p = &mut acquire => break p.map_err(|_| Error::Closed("destination limiter"))?,
                        _ = tokio::time::sleep(tick) => self.check_saturation(dest, &state, threshold),
                    }
                }
            }
        };
        limiter.load.running.fetch_add(1, Ordering::Relaxed);
        Ok(DestinationPermit {
            _permit: permit,
            load: limiter.load.clone(),
        })
    }

    fn check_saturation(&self, dest: &DestinationId, state: &Arc<DestState>, threshold: Duration) {
        let saturated = state
            .since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t.elapsed() >= threshold);
        if !saturated || state.fanning_out.swap(true, Ordering::AcqRel) {
            return;
        }
        let member = self.clone();
        let dest = dest.clone();
        let state = state.clone();
        tokio::spawn(async move {
            match member.fan_out(&dest).await {
                Ok(Some(peer)) => {
                    tracing::info!(destination = %dest, %peer, "fanned out saturated destination")
                }
                Ok(None) => {
                    tracing::debug!(destination = %dest, "saturated, but no peer left to fan out to")
                }
                Err(err) => tracing::warn!(destination = %dest, %err, "fan-out failed"),
            }
            // the next fan-out needs the queue to stay non-empty another threshold
            if let Some(t) = state
                .since
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                *t = Instant::now();
            }
            state.fanning_out.store(false, Ordering::Release);
        });
    }

    /// Adds a live peer that is not yet in `dest`'s pod set (and was never
    /// added by this pod before) to the set, picked by
    /// [`MemberConfig::fan_out_strategy`](crate::MemberConfig::fan_out_strategy)
    /// (the least-loaded by default; the choice is made in `registry/`, with
    /// every other routing decision). Returns the peer, or `None` when no
    /// candidate is left. Each peer is added at most once per destination by
    /// this pod.
    pub async fn fan_out(&self, dest: &DestinationId) -> Result<Option<MemberId>> {
        let peers = self.list_peer_load().await?;
        let current = self.destination_members(dest).await?;
        let candidate = {
            let fanned = self.inner.fanned.lock().unwrap_or_else(|p| p.into_inner());
            fan_out_peer(
                self.inner.config.fan_out_strategy.as_ref(),
                dest,
                peers,
                |p| {
                    current.iter().any(|c| c == p.id.as_str())
                        || fanned.contains(&(dest.clone(), p.id.clone()))
                },
            )
        };
        let Some(peer) = candidate else {
            return Ok(None);
        };
        let i = &self.inner;
        i.scripts
            .change_set(&i.client, &i.keys, dest, Some(&peer.id), &[])
            .await?;
        i.fanned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((dest.clone(), peer.id.clone()));
        Ok(Some(peer.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_destination_states_are_swept() {
        let limiter = Limiter::new(SaturationConfig {
            max_concurrent: 1,
            queue_threshold: Duration::from_secs(1),
        });
        let busy = DestinationId::new("busy").unwrap();
        let busy_state = limiter.state(&busy);
        let _slot = busy_state.semaphore.clone().try_acquire_owned().unwrap();
        drop(busy_state);
        for i in 0..IDLE_SWEEP_AT + 10 {
            limiter.state(&DestinationId::new(format!("d{i}")).unwrap());
        }
        let states = limiter.states.lock().unwrap();
        assert!(states.len() < IDLE_SWEEP_AT, "idle states were swept");
        assert!(
            states.contains_key(&busy),
            "a destination with a slot in use is kept"
        );
    }
}
