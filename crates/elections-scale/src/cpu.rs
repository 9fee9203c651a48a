//! CPU time of a process and its descendants, from `/proc` (Linux).

use std::{collections::HashMap, time::Duration};

/// Clock ticks per second of `/proc/*/stat` times (`sysconf(_SC_CLK_TCK)`,
/// 100 on every Linux this runs on).
const TICKS_PER_SECOND: u64 = 100;

/// `(ppid, utime + stime, cutime + cstime)` in ticks, from one
/// `/proc/PID/stat` (the command name may hold spaces and parentheses: the
/// fields start after its last `)`).
fn stat(pid: u32) -> Option<(u32, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let ppid = u32::try_from(number(1)?).ok()?;
    Some((ppid, number(11)? + number(12)?, number(13)? + number(14)?))
}

/// CPU time used so far by `root` and every live descendant, plus what its
/// waited-for children used (a PostgreSQL server's backends are its
/// children; an exited one is counted in the parent's `cutime`).
pub(crate) fn of_tree(root: u32) -> Option<Duration> {
    let mut parents: HashMap<u32, (u32, u64)> = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((ppid, own, _)) = stat(pid) {
            parents.insert(pid, (ppid, own));
        }
    }
    let (_, _, reaped) = stat(root)?;
    let in_tree = |mut pid: u32| {
        for _ in 0..64 {
            if pid == root {
                return true;
            }
            match parents.get(&pid) {
                Some((ppid, _)) if *ppid != 0 => pid = *ppid,
                _ => return false,
            }
        }
        false
    };
    let ticks: u64 = parents
        .iter()
        .filter(|(pid, _)| in_tree(**pid))
        .map(|(_, (_, own))| own)
        .sum::<u64>()
        + reaped;
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// CPU time this process has used so far.
pub(crate) fn own() -> Option<Duration> {
    let (_, own, _) = stat(std::process::id())?;
    Some(Duration::from_millis(own * 1000 / TICKS_PER_SECOND))
}
