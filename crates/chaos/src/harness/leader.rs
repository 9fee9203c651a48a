//! Who leads now, read from the records the contenders wrote.

use crate::event::{Event, Record, WriteOutcome};

/// The process leading at the end of `records`: its latest acquisition
/// has not ended (no loss, release, killer, exit or SIGKILL since) and it
/// has had a write accepted since.
///
/// A leader that was paused (SIGSTOP) or cut off is not leading until it
/// shows it still holds the lease: a successful renewal (`armed`, success)
/// after the fault, then an accepted write. It may well: on etcd, a new
/// Raft leader renews every lease by its whole TTL, so a lease that was
/// about to run out while its holder was stopped can outlive the pause (a
/// zombie, whose killer never ends it, then leads on).
pub(super) fn current_leader(records: &[Record]) -> Option<String> {
    struct Leader<'a> {
        proc: &'a str,
        wrote: bool,
        suspended: bool,
    }
    let mut leader: Option<Leader> = None;
    for r in records {
        let own = leader.as_ref().is_some_and(|l| l.proc == r.proc);
        match &r.event {
            Event::Acquired { .. } => {
                leader = Some(Leader {
                    proc: &r.proc,
                    wrote: false,
                    suspended: false,
                });
            }
            Event::Write {
                outcome: WriteOutcome::Accepted { .. },
                ..
            } if own => {
                if let Some(l) = leader.as_mut().filter(|l| !l.suspended) {
                    l.wrote = true;
                }
            }
            Event::Armed { success: true, .. } if own => {
                if let Some(l) = leader.as_mut() {
                    l.suspended = false;
                }
            }
            Event::SigStop | Event::Cut if own => {
                if let Some(l) = leader.as_mut() {
                    l.wrote = false;
                    l.suspended = true;
                }
            }
            Event::Lost { .. }
            | Event::Released
            | Event::KillerFired
            | Event::Exited { .. }
            | Event::SigKill
                if own =>
            {
                leader = None;
            }
            _ => {}
        }
    }
    leader.and_then(|l| l.wrote.then(|| l.proc.to_string()))
}

/// Whether the process leading at the end of `records` renewed its lease
/// at or after `since_ms` (what a server clock step is aimed at).
pub(super) fn renewed_since(records: &[Record], since_ms: u64) -> bool {
    let Some(leader) = current_leader(records) else {
        return false;
    };
    records
        .iter()
        .rev()
        .take_while(|r| r.t_ms >= since_ms)
        .any(|r| r.proc == leader && matches!(r.event, Event::Armed { success: true, .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_support::{accepted_write, renewed};

    fn accepted(t: u64, seq: u64) -> Event {
        accepted_write(t, 4, seq)
    }

    #[test]
    fn a_paused_leader_that_still_holds_the_lease_leads_again() {
        let mut records = vec![
            Record::new(100, "z2.2", Event::Acquired { token: 4 }),
            Record::new(200, "z2.2", accepted(150, 1)),
        ];
        assert_eq!(current_leader(&records).as_deref(), Some("z2.2"));
        records.push(Record::new(2_000, "z2.2", Event::SigStop));
        assert_eq!(current_leader(&records), None);
        records.push(Record::new(8_000, "z2.2", Event::SigCont));
        // A write accepted on the resource alone is not enough (fencing
        // accepts a deposed leader's write until a newer token arrives)...
        records.push(Record::new(8_010, "z2.2", accepted(8_005, 2)));
        assert_eq!(current_leader(&records), None);
        // ...a renewal that succeeded after the pause is.
        records.push(Record::new(8_100, "z2.2", renewed(8_050)));
        records.push(Record::new(8_200, "z2.2", accepted(8_150, 3)));
        assert_eq!(current_leader(&records).as_deref(), Some("z2.2"));
        // A loss ends it; so does another process's acquisition.
        let mut lost = records.clone();
        lost.push(Record::new(
            9_000,
            "z2.2",
            Event::Lost { reason: "x".into() },
        ));
        assert_eq!(current_leader(&lost), None);
        records.push(Record::new(9_000, "c0.2", Event::Acquired { token: 5 }));
        records.push(Record::new(9_100, "c0.2", accepted(9_050, 4)));
        assert_eq!(current_leader(&records).as_deref(), Some("c0.2"));
        assert!(!renewed_since(&records, 9_000));
        records.push(Record::new(9_300, "z2.2", renewed(9_250)));
        assert!(!renewed_since(&records, 9_000), "not the leader's");
        records.push(Record::new(9_400, "c0.2", renewed(9_350)));
        assert!(renewed_since(&records, 9_000));
        assert!(!renewed_since(&records, 9_401));
    }
}
