//! The scaler's signal: the load of the whole fleet of live members, as the
//! design's scaler reads it (total load ÷ pods above a threshold adds a pod).

use std::time::Duration;

use crate::error::Result;
use crate::record::MemberRecord;

use super::Registry;

/// The live members' reported loads, summed up: what an autoscaler reads.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FleetLoad {
    /// Live members (a valid, unexpired registration).
    pub members: usize,
    /// The sum of their reported loads.
    pub total: i64,
    /// The largest reported load (0 without members).
    pub max: i64,
}

impl FleetLoad {
    /// Sums the loads of `members`.
    pub fn of(members: &[MemberRecord]) -> Self {
        FleetLoad {
            members: members.len(),
            total: members.iter().map(|m| m.load).sum(),
            max: members.iter().map(|m| m.load).max().unwrap_or(0),
        }
    }

    /// The mean load per member (0 without members).
    pub fn mean(&self) -> f64 {
        if self.members == 0 {
            0.0
        } else {
            self.total as f64 / self.members as f64
        }
    }

    /// The design's scaling rule: the fleet needs another pod when the mean
    /// load per pod is above `threshold` (with no pod at all it needs one).
    ///
    /// ```
    /// use coordinator::FleetLoad;
    ///
    /// let fleet = FleetLoad { members: 3, total: 240, max: 100 };
    /// assert!(fleet.needs_more_pods(70.0));   // mean 80 > 70
    /// assert!(!fleet.needs_more_pods(80.0));  // mean 80 is not above 80
    /// assert_eq!(fleet.pods_for(50.0), 5);   // 240 / 50, rounded up
    /// ```
    pub fn needs_more_pods(&self, threshold: f64) -> bool {
        self.members == 0 || self.mean() > threshold
    }

    /// The number of pods that would bring the mean load to `threshold` or
    /// below (at least 1): the "desired replicas" of an autoscaler.
    pub fn pods_for(&self, threshold: f64) -> usize {
        if threshold <= 0.0 || self.total <= 0 {
            return self.members.max(1);
        }
        let wanted = (self.total as f64 / threshold).ceil();
        if wanted >= usize::MAX as f64 {
            usize::MAX
        } else {
            (wanted as usize).max(1)
        }
    }
}

impl Registry {
    /// The fleet's load: every live member's last reported load, read in
    /// one round trip (the members list, which also prunes dead ids), and
    /// recorded in the `coordinator_fleet_*` gauges.
    ///
    /// # Errors
    ///
    /// Valkey errors, as for [`Registry::list_live_members`].
    pub async fn fleet_load(&self) -> Result<FleetLoad> {
        let fleet = FleetLoad::of(&self.list_live_members().await?);
        crate::telemetry::fleet(&fleet);
        Ok(fleet)
    }

    /// Refreshes the `coordinator_fleet_*` gauges every `period` until the
    /// returned task is aborted (a coordinator program runs one, so the
    /// gauges are there for an autoscaler to scrape). Errors are logged and
    /// the gauges keep their last values.
    pub fn spawn_fleet_load_gauges(&self, period: Duration) -> tokio::task::JoinHandle<()> {
        let registry = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(err) = registry.fleet_load().await {
                    tracing::debug!(error = %err, "cannot read the fleet load");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_member;

    #[test]
    fn sums_means_and_the_scaling_rule() {
        let none = FleetLoad::of(&[]);
        assert_eq!(none, FleetLoad::default());
        assert!(none.needs_more_pods(10.0));
        assert_eq!(none.pods_for(10.0), 1);
        let fleet = FleetLoad::of(&[test_member("a", 10), test_member("b", 30)]);
        assert_eq!((fleet.members, fleet.total, fleet.max), (2, 40, 30));
        assert!((fleet.mean() - 20.0).abs() < f64::EPSILON);
        assert!(fleet.needs_more_pods(19.0));
        assert!(!fleet.needs_more_pods(20.0));
        assert_eq!(fleet.pods_for(15.0), 3);
        assert_eq!(fleet.pods_for(0.0), 2);
    }
}
