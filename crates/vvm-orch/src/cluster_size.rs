//! Nodes agree on the cluster size. Every leader holds the shared claim
//! `__vvm__/size/{key_prefix}` ([`crate::keys`]) with the size it was
//! started with, `N`, as decimal text: an [`elections::SharedClaim`], taken
//! right after the lease and **renewed with it** in every renewal round,
//! under the same deadlines and the same killer. A node started with
//! another size finds the claim and refuses to lead
//! ([`crate::VvmProblem::ClusterSizeMismatch`]). So nodes started with
//! different `--cluster-size` never lead together, and never more than the
//! smallest N run at once.
//!
//! The claim cannot lapse while a leader of its size may act: each leader's
//! killer deadline is at most `0.8 d` after the start of its last
//! successful claim write, and the claim lives `d` after each. A leader
//! whose claim writes fail loses its leadership exactly as when its lease
//! writes fail, and the renewal (hence the claim) goes on while the
//! services stop, during a hand-over too. When the last leader is gone the
//! claim expires after one leadership duration, and the cluster may
//! restart with another size. A lost race (two sizes claiming at once) is
//! decided by the store's insert-if-not-exists; the loser gives its key
//! back before anything ran.

use elections::{ElectionsError, SharedClaim};
use ttl_storage::ValidationError;

use crate::{VvmConfig, VvmProblem};

/// The cluster-size claim of `config`'s keys.
pub(crate) fn claim(config: &VvmConfig) -> Result<SharedClaim, ValidationError> {
    Ok(SharedClaim::new(
        crate::keys::size(&config.key_prefix)?,
        config.cluster_size.to_string(),
    ))
}

/// The size a claim holds; `None` for anything else.
fn decode(bytes: &[u8]) -> Option<u32> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// The problem of finding the claim held by `found`.
pub(crate) fn mismatch(config: &VvmConfig, found: &[u8]) -> VvmProblem {
    VvmProblem::ClusterSizeMismatch {
        ours: config.cluster_size,
        theirs: decode(found),
    }
}

/// The problem an acquisition error is, when it is a size conflict.
pub(crate) fn conflict(config: &VvmConfig, err: &ElectionsError) -> Option<VvmProblem> {
    match err {
        ElectionsError::ClaimConflict { found, .. } => Some(mismatch(config, found)),
        _ => None,
    }
}
