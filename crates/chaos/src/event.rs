//! The line protocol between contenders (and the harness) and the checker:
//! one event per line, `t=<ms since epoch> ev=<name> key=value ...`.
//! Values never contain spaces (free text is sanitized with `_`).

use std::{
    collections::HashMap,
    fmt,
    time::{SystemTime, UNIX_EPOCH},
};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// What became of one write to the guarded resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The resource accepted it; `seq` is its position in the resource's log.
    Accepted {
        /// Sequence number the write got.
        seq: u64,
    },
    /// The resource had seen a higher token (`seen`) and refused it.
    Rejected {
        /// The highest token the resource had seen.
        seen: u64,
    },
    /// No answer (connection cut, timeout): the outcome is unknown.
    Failed,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A contender process started.
    Started {
        /// Its process id.
        pid: u32,
        /// True for a zombie: no killer, and it keeps writing after a loss.
        zombie: bool,
    },
    /// The killer deadline changed; `deadline_ms` is `None` when disarmed.
    Armed {
        /// Start of the write the deadline counts from (wall ms).
        basis_ms: u64,
        /// The deadline now in force (wall ms).
        deadline_ms: Option<u64>,
        /// `true` when the change followed a successful write (acquire or renew).
        success: bool,
    },
    /// Leadership acquired with this fencing token.
    Acquired {
        /// The fencing token.
        token: u64,
    },
    /// A write to the guarded resource, started at `start_ms` with `token`.
    Write {
        /// When the write was sent (wall ms).
        start_ms: u64,
        /// The token it carried.
        token: u64,
        /// What became of it.
        outcome: WriteOutcome,
    },
    /// The handle fired with a loss.
    Lost {
        /// Why, sanitized.
        reason: String,
    },
    /// `release_leadership` returned.
    Released,
    /// The killer deadline passed: the process is exiting with code 1.
    KillerFired,
    /// The contender is exiting on its own.
    Exiting,
    /// (harness) SIGKILL sent.
    SigKill,
    /// (harness) SIGSTOP sent.
    SigStop,
    /// (harness) SIGCONT sent.
    SigCont,
    /// (harness) the contender's path to the database was cut.
    Cut,
    /// (harness) the path was restored.
    Restored,
    /// (harness) the process was seen to exit.
    Exited {
        /// Its exit code, if it exited rather than being killed by a signal.
        code: Option<i32>,
    },
    /// (harness) the engine server's wall clock now runs `offset_ms` from
    /// real time (a server clock fault, see [`crate::server_clock`]).
    ServerClock {
        /// The server's clock minus real time, in ms.
        offset_ms: i64,
    },
}

/// An event with its time and the contender slot it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Wall time, ms since epoch.
    pub t_ms: u64,
    /// Process identity (`slot.generation`, unique per process).
    pub proc: String,
    /// What happened.
    pub event: Event,
}

impl Record {
    /// `event`, which `proc` reported at `t_ms`.
    pub fn new(t_ms: u64, proc: impl Into<String>, event: Event) -> Record {
        Record {
            t_ms,
            proc: proc.into(),
            event,
        }
    }
}

/// A line that is not a valid event.
#[derive(Debug, thiserror::Error)]
#[error("bad event line {line:?}: {why}")]
pub struct ParseError {
    line: String,
    why: &'static str,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Started { pid, zombie } => write!(f, "ev=started pid={pid} zombie={zombie}"),
            Event::Armed {
                basis_ms,
                deadline_ms,
                success,
            } => {
                let deadline = deadline_ms.map_or("none".to_string(), |d| d.to_string());
                write!(
                    f,
                    "ev=armed basis={basis_ms} deadline={deadline} success={success}"
                )
            }
            Event::Acquired { token } => write!(f, "ev=acquired token={token}"),
            Event::Write {
                start_ms,
                token,
                outcome,
            } => {
                write!(f, "ev=write start={start_ms} token={token} ")?;
                match outcome {
                    WriteOutcome::Accepted { seq } => write!(f, "outcome=accepted seq={seq}"),
                    WriteOutcome::Rejected { seen } => write!(f, "outcome=rejected seen={seen}"),
                    WriteOutcome::Failed => write!(f, "outcome=failed"),
                }
            }
            Event::Lost { reason } => write!(f, "ev=lost reason={}", sanitize(reason)),
            Event::Released => f.write_str("ev=released"),
            Event::KillerFired => f.write_str("ev=killer_fired"),
            Event::Exiting => f.write_str("ev=exiting"),
            Event::SigKill => f.write_str("ev=sigkill"),
            Event::SigStop => f.write_str("ev=sigstop"),
            Event::SigCont => f.write_str("ev=sigcont"),
            Event::Cut => f.write_str("ev=cut"),
            Event::Restored => f.write_str("ev=restored"),
            Event::Exited { code } => match code {
                Some(code) => write!(f, "ev=exited code={code}"),
                None => f.write_str("ev=exited code=signal"),
            },
            Event::ServerClock { offset_ms } => write!(f, "ev=server_clock offset={offset_ms}"),
        }
    }
}

/// Replaces whitespace so a value stays one token.
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}

/// Formats `event` at `t_ms` as one line (no newline).
pub fn format_line(t_ms: u64, event: &Event) -> String {
    format!("t={t_ms} {event}")
}

/// Prints `event`, stamped now, as one line on stdout (flushed by the newline).
pub fn emit(event: &Event) {
    println!("{}", format_line(now_ms(), event));
}

/// Parses one line written by [`format_line`]: `(t_ms, event)`.
pub fn parse_line(line: &str) -> Result<(u64, Event), ParseError> {
    let bad = |why| ParseError {
        line: line.to_string(),
        why,
    };
    let fields: HashMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let num = |k: &str| -> Result<u64, ParseError> {
        fields
            .get(k)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad("missing or non-numeric field"))
    };
    let t = num("t")?;
    let event = match fields.get("ev").copied() {
        Some("started") => Event::Started {
            pid: u32::try_from(num("pid")?).map_err(|_| bad("pid too large"))?,
            zombie: fields.get("zombie") == Some(&"true"),
        },
        Some("armed") => Event::Armed {
            basis_ms: num("basis")?,
            deadline_ms: match fields.get("deadline") {
                Some(&"none") => None,
                _ => Some(num("deadline")?),
            },
            success: fields.get("success") == Some(&"true"),
        },
        Some("acquired") => Event::Acquired {
            token: num("token")?,
        },
        Some("write") => Event::Write {
            start_ms: num("start")?,
            token: num("token")?,
            outcome: match fields.get("outcome").copied() {
                Some("accepted") => WriteOutcome::Accepted { seq: num("seq")? },
                Some("rejected") => WriteOutcome::Rejected { seen: num("seen")? },
                Some("failed") => WriteOutcome::Failed,
                _ => return Err(bad("unknown write outcome")),
            },
        },
        Some("lost") => Event::Lost {
            reason: fields.get("reason").unwrap_or(&"").to_string(),
        },
        Some("released") => Event::Released,
        Some("killer_fired") => Event::KillerFired,
        Some("exiting") => Event::Exiting,
        Some("sigkill") => Event::SigKill,
        Some("sigstop") => Event::SigStop,
        Some("sigcont") => Event::SigCont,
        Some("cut") => Event::Cut,
        Some("restored") => Event::Restored,
        Some("exited") => Event::Exited {
            code: fields.get("code").and_then(|c| c.parse().ok()),
        },
        Some("server_clock") => Event::ServerClock {
            offset_ms: fields
                .get("offset")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad("missing or non-numeric offset"))?,
        },
        _ => return Err(bad("unknown event")),
    };
    Ok((t, event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_round_trips() {
        let events = [
            Event::Started {
                pid: 42,
                zombie: true,
            },
            Event::Armed {
                basis_ms: 10,
                deadline_ms: Some(20),
                success: true,
            },
            Event::Armed {
                basis_ms: 10,
                deadline_ms: None,
                success: false,
            },
            Event::Acquired { token: 7 },
            Event::Write {
                start_ms: 5,
                token: 7,
                outcome: WriteOutcome::Accepted { seq: 3 },
            },
            Event::Write {
                start_ms: 5,
                token: 7,
                outcome: WriteOutcome::Rejected { seen: 9 },
            },
            Event::Write {
                start_ms: 5,
                token: 7,
                outcome: WriteOutcome::Failed,
            },
            Event::Lost {
                reason: "lost:_3_attempts".into(),
            },
            Event::Released,
            Event::KillerFired,
            Event::Exiting,
            Event::SigKill,
            Event::SigStop,
            Event::SigCont,
            Event::Cut,
            Event::Restored,
            Event::Exited { code: Some(1) },
            Event::Exited { code: None },
            Event::ServerClock { offset_ms: 30_000 },
            Event::ServerClock { offset_ms: -30_000 },
        ];
        for event in events {
            let line = format_line(123, &event);
            assert_eq!(parse_line(&line).unwrap(), (123, event), "{line}");
        }
    }

    #[test]
    fn free_text_stays_one_field() {
        let line = format_line(
            1,
            &Event::Lost {
                reason: "lost: the record was taken".into(),
            },
        );
        let (_, event) = parse_line(&line).unwrap();
        assert_eq!(
            event,
            Event::Lost {
                reason: "lost:_the_record_was_taken".into()
            }
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_line("hello").is_err());
        assert!(parse_line("t=1 ev=nope").is_err());
        assert!(parse_line("t=1 ev=acquired").is_err());
    }
}
