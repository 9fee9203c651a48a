//! Hand-over markers that no request asked for (VVM seeds with
//! priorities): a VVM's monitor preempts by the same graceful path as a
//! requested hand-over, so its marker is a preemption. The store tap
//! ([`crate::requests::Ledger`]) records when each leadership record and
//! each candidacy first appeared, and a preemption marker is held to the
//! rules from those ground-truth times alone (a leader can only act on a
//! record after it was written):
//!
//! - the leader's priority is strictly below the successor's (equal
//!   priorities never preempt);
//! - the marker replaced a leadership record written at least the minimum
//!   tenure earlier (at most one preemption per tenure);
//! - the candidacy named was first written at least the hold-down earlier
//!   (no preemption without the hold-down).
//!
//! Without priorities, a marker nobody asked for is a violation, as before.

use std::{collections::BTreeMap, time::Duration};

use ttl_storage::Key;

/// What a VVM priority seed promises about preemptions.
#[derive(Debug, Clone)]
pub(crate) struct MarkerRules {
    /// Each contender's priority.
    pub(crate) priorities: Vec<i32>,
    /// The hold-down of every VVM.
    pub(crate) hold_down: Duration,
    /// The minimum tenure of every VVM.
    pub(crate) min_tenure: Duration,
}

/// When records first appeared in the store (from the run's start).
#[derive(Debug, Default)]
pub(crate) struct Births {
    /// Leadership records, by nonce.
    leaders: BTreeMap<String, Duration>,
    /// Candidacies, by id: their contender and first write.
    candidates: BTreeMap<String, (Option<usize>, Duration)>,
}

impl Births {
    /// `value` was written to `key` at `at` (an insert or a swap applied).
    pub(crate) fn applied(&mut self, key: &Key, value: &[u8], at: Duration) {
        if key
            .as_str()
            .starts_with(elections::candidates::CANDIDATE_PREFIX)
        {
            if let Some((id, contender)) = candidacy(value) {
                self.candidates.entry(id).or_insert((contender, at));
            }
        } else if !value.starts_with(b"\0")
            && let Some(nonce) = elections::record::nonce(value)
        {
            let nonce = String::from_utf8_lossy(nonce).into_owned();
            self.leaders.entry(nonce).or_insert(at);
        }
    }
}

/// The id and contender of a candidate record (`cand1 <since> <id>
/// <value>` or `cand2 <since> <id> <priority> <value>`).
fn candidacy(record: &[u8]) -> Option<(String, Option<usize>)> {
    let text = std::str::from_utf8(record).ok()?;
    let (fields, rest) = if let Some(rest) = text.strip_prefix("cand1 ") {
        (3, rest)
    } else {
        (4, text.strip_prefix("cand2 ")?)
    };
    let parts: Vec<&str> = rest.splitn(fields, ' ').collect();
    let id = parts.get(1)?.to_string();
    let value = parts.get(fields - 1)?;
    Some((id, contender_of(value.as_bytes())))
}

/// The contender of a value written by a simulated VVM (`c<N>-i<M>...`).
pub(crate) fn contender_of(value: &[u8]) -> Option<usize> {
    let rest = value.strip_prefix(b"c")?;
    let end = rest.iter().position(|b| *b == b'-')?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// One marker nobody asked for: the record it replaced and whom it names.
#[derive(Debug, Clone)]
pub(crate) struct Unasked {
    pub(crate) key: String,
    /// The replaced leadership record's nonce.
    pub(crate) nonce: String,
    /// Its leader's contender.
    pub(crate) leader: Option<usize>,
    /// The candidacy the marker names.
    pub(crate) target: String,
    /// When the marker was applied.
    pub(crate) at: Duration,
}

/// The rules a marker nobody asked for broke (empty: a lawful preemption).
pub(crate) fn judge(rules: Option<&MarkerRules>, births: &Births, m: &Unasked) -> Vec<String> {
    let Some(rules) = rules else {
        return vec![format!(
            "a marker on {} by a leadership that accepted no request",
            m.key
        )];
    };
    let mut broken = Vec::new();
    let at = m.at.as_secs_f64();
    let priority = |c: Option<usize>| c.and_then(|c| rules.priorities.get(c).copied());
    let (target, stood) = match births.candidates.get(&m.target) {
        Some((contender, born)) => (priority(*contender), Some(*born)),
        None => (None, None),
    };
    match (priority(m.leader), target) {
        (Some(own), Some(to)) if to > own => {}
        (own, to) => broken.push(format!(
            "preemption on {} at {at:.3}s: priority {to:?} over {own:?} is not strictly higher",
            m.key
        )),
    }
    match births.leaders.get(&m.nonce) {
        Some(born) if *born + rules.min_tenure <= m.at => {}
        born => broken.push(format!(
            "preemption on {} at {at:.3}s: the leader's record was written at {born:?}, within the minimum tenure of {:?}",
            m.key, rules.min_tenure
        )),
    }
    match stood {
        Some(born) if born + rules.hold_down <= m.at => {}
        born => broken.push(format!(
            "preemption on {} at {at:.3}s: the candidacy named was first written at {born:?}, within the hold-down of {:?}",
            m.key, rules.hold_down
        )),
    }
    broken
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_preemption_marker_is_held_to_the_rules() {
        let rules = MarkerRules {
            priorities: vec![0, 1, 0],
            hold_down: 40 * S,
            min_tenure: 30 * S,
        };
        let mut births = Births::default();
        let lease = Key::new("a/1").unwrap();
        let slot = Key::new(format!("{}00/a/1", elections::candidates::CANDIDATE_PREFIX)).unwrap();
        births.applied(&lease, b"c0-i0#pid1#0123456789abcdef00000001", 10 * S);
        births.applied(
            &slot,
            b"cand2 5 0123456789abcdef00000009 1 c1-i0#pid2",
            20 * S,
        );
        births.applied(
            &slot,
            b"cand1 5 0123456789abcdef0000000a c2-i0#pid3",
            20 * S,
        );
        let marker = |target: &str, at: u32| Unasked {
            key: "a/1".into(),
            nonce: "0123456789abcdef00000001".into(),
            leader: Some(0),
            target: target.into(),
            at: at * S,
        };
        let lawful = marker("0123456789abcdef00000009", 60);
        assert_eq!(judge(Some(&rules), &births, &lawful), Vec::<String>::new());
        assert_eq!(judge(None, &births, &lawful).len(), 1);
        // Too early for the hold-down and the tenure; to an equal.
        assert_eq!(
            judge(
                Some(&rules),
                &births,
                &marker("0123456789abcdef00000009", 39)
            )
            .len(),
            2
        );
        assert_eq!(
            judge(
                Some(&rules),
                &births,
                &marker("0123456789abcdef0000000a", 60)
            )
            .len(),
            1
        );
        assert_eq!(contender_of(b"c12-i3#pid"), Some(12));
    }
}
