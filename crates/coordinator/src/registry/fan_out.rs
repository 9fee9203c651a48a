//! The pod side's routing decision: which peer a saturated destination fans
//! out to.
//!
//! It runs in the resource pod ([`Member::fan_out`](crate::Member::fan_out)),
//! not in a coordinator, so it cannot use the strategy a
//! [`Registry`](super::Registry) was built with: that object lives in the
//! coordinators' processes (which may be Node coordinators, or run
//! different strategies). The pod has its own,
//! [`MemberConfig::fan_out_strategy`](crate::MemberConfig::fan_out_strategy)
//! ([`LeastLoaded`](crate::strategy::LeastLoaded) by default, as the design
//! says: the least-loaded peer), asked with [`PickPurpose::FanOut`]. The
//! decision lives here, beside the coordinator's, so that every choice of a
//! member is made in `registry/`.

use crate::ids::DestinationId;
use crate::record::MemberRecord;
use crate::strategy::{self, PickContext, PickPurpose, Strategy};

/// The peer to add to `dest`'s pod set: `strategy` picks among `peers`
/// (live, sorted by id) except those `skip` refuses (already in the set, or
/// added by this pod before). `None` when no candidate is left or the
/// strategy refuses.
pub(crate) fn fan_out_peer(
    strategy: &dyn Strategy,
    dest: &DestinationId,
    peers: Vec<MemberRecord>,
    skip: impl Fn(&MemberRecord) -> bool,
) -> Option<MemberRecord> {
    let candidates: Vec<MemberRecord> = peers.into_iter().filter(|p| !skip(p)).collect();
    let ctx = PickContext {
        destination: Some(dest),
        purpose: PickPurpose::FanOut,
    };
    strategy::pick(strategy, &candidates, &ctx).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_member as member;
    use crate::strategy::LeastLoaded;

    #[test]
    fn least_loaded_peer_outside_the_set_is_chosen() {
        let dest = DestinationId::new("d").unwrap();
        let peers = vec![member("a", 1), member("b", 5), member("c", 3)];
        let pick = |skip: &[&str]| {
            fan_out_peer(&LeastLoaded::new(), &dest, peers.clone(), |p| {
                skip.contains(&p.id.as_str())
            })
            .map(|p| p.id.as_str().to_owned())
        };
        assert_eq!(pick(&[]).as_deref(), Some("a"));
        assert_eq!(pick(&["a"]).as_deref(), Some("c"));
        assert_eq!(pick(&["a", "b", "c"]), None);
    }
}
