//! The Valkey keys and channels of cluster events, beside the
//! coordinator's own ([`coordinator::keys`]), under the same prefix `P`.
//!
//! | key / channel | type | TTL |
//! |---|---|---|
//! | `P:subscribers:<dest>` | sorted set: member id → the entry's deadline (ms, Valkey's clock) | the latest deadline in it; each entry is the member's TTL from its last renewal, renewed after each heartbeat |
//! | `P:event-seq:<dest>` | hash `gen` (the numbering's generation), `seq` (the last number given) | none (like `P:epoch:<dest>`: one small hash per destination that ever had events) |
//! | `P:events:<dest>` | sharded pub/sub channel | — |
//! | `P:events-probe:<member>` | sharded pub/sub channel: the member's own probes | — |
//!
//! With a hash-tag prefix (`{coordinator}`), keys and channels share one
//! Valkey Cluster slot, so every script touches one shard.

use coordinator::DestinationId;
use coordinator::keys::KeySpace;

/// Builds the keys and channels for one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventKeys {
    prefix: String,
}

impl EventKeys {
    /// The layout under the coordinator's prefix.
    pub fn new(keys: &KeySpace) -> Self {
        Self {
            prefix: keys.prefix().to_owned(),
        }
    }

    /// `P:subscribers:<dest>`: the subscription map's entries for `dest`.
    pub fn subscribers(&self, dest: &DestinationId) -> String {
        format!("{}:subscribers:{dest}", self.prefix)
    }

    /// `P:event-seq:<dest>`: the destination's numbering.
    pub fn counter(&self, dest: &DestinationId) -> String {
        format!("{}:event-seq:{dest}", self.prefix)
    }

    /// `P:events:<dest>`: the destination's broadcast channel.
    pub fn channel(&self, dest: &DestinationId) -> String {
        format!("{}{dest}", self.channel_prefix())
    }

    /// `P:events-probe:<member>`: the channel a pod sends its own probes
    /// through (round trips that prove its broadcast connection works).
    pub fn probe_channel(&self, member: &coordinator::MemberId) -> String {
        format!("{}:events-probe:{member}", self.prefix)
    }

    /// `P:events:`, the channels without the destination.
    pub fn channel_prefix(&self) -> String {
        format!("{}:events:", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() -> coordinator::Result<()> {
        let k = EventKeys::new(&KeySpace::new("{c}")?);
        let d = DestinationId::new("t1")?;
        assert_eq!(k.subscribers(&d), "{c}:subscribers:t1");
        assert_eq!(k.counter(&d), "{c}:event-seq:t1");
        assert_eq!(k.channel(&d), "{c}:events:t1");
        Ok(())
    }
}
