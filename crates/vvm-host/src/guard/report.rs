//! The guard's words to vvm-host, on the lifeline socket, never blocking —
//! written by the guard ([`Reporter`]), read by vvm-host ([`parse_exit`],
//! [`log_note`], [`Outcome`]).
//!
//! The guard never writes to its standard error: that may be a full pipe
//! (a stalled log reader), a closed one, or a terminal that stops
//! background writers. Everything it has to say goes over the lifeline,
//! which is non-blocking: a line that does not fit is dropped, and vvm-host
//! logs the rest through its own non-blocking writer.

use std::{
    io::{self, Write},
    os::unix::net::UnixStream,
};

use nix::sys::signal::Signal;

/// Writes lines to vvm-host; never blocks, never panics.
pub(crate) struct Reporter {
    socket: Option<UnixStream>,
}

impl Reporter {
    /// Reports on `socket` (set non-blocking by the caller).
    pub(crate) fn new(socket: UnixStream) -> Reporter {
        Reporter {
            socket: Some(socket),
        }
    }

    /// Sends `line` (a newline is added). Err when vvm-host cannot hear
    /// (gone, or not reading): the caller treats that as the lifeline
    /// closing where it matters.
    pub(crate) fn send(&mut self, line: &str) -> io::Result<()> {
        let Some(socket) = &mut self.socket else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        // One datagram-sized write: a partial write of a short line is
        // possible only on a full buffer, where the rest is dropped.
        match socket.write(&bytes) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(_) => Err(io::ErrorKind::WouldBlock.into()),
            Err(err) => {
                if err.kind() != io::ErrorKind::WouldBlock {
                    self.socket = None;
                }
                Err(err)
            }
        }
    }

    /// A warning for vvm-host's log, dropped if it cannot be sent.
    pub(crate) fn note(&mut self, text: &str) {
        let _ = self.send(&format!("note {}", text.replace('\n', " ")));
    }

    /// A fact for vvm-host's log at INFO (the containment in force),
    /// dropped if it cannot be sent.
    pub(crate) fn info(&mut self, text: &str) {
        let _ = self.send(&format!("info {}", text.replace('\n', " ")));
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// It could not be started; `true` when the program was not found.
    NotStarted { not_found: bool },
}

impl Outcome {
    /// The exit status a shell would report: the code, 128+N for signal N,
    /// 127 when not found, 126 when not startable.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Outcome::Code(code) => u8::try_from(code & 0xff).unwrap_or(1),
            Outcome::Signal(signal) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
            Outcome::NotStarted { not_found: true } => 127,
            Outcome::NotStarted { not_found: false } => 126,
        }
    }

    /// True for a zero exit code.
    pub(crate) fn success(self) -> bool {
        self == Outcome::Code(0)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Code(code) => write!(f, "exit code {code}"),
            Outcome::Signal(signal) => match Signal::try_from(*signal) {
                Ok(signal) => write!(f, "signal {signal}"),
                Err(_) => write!(f, "signal {signal}"),
            },
            Outcome::NotStarted { not_found: true } => f.write_str("not found"),
            Outcome::NotStarted { not_found: false } => f.write_str("could not be started"),
        }
    }
}

/// Logs a guard's `note TEXT` (WARN) or `info TEXT` (DEBUG: the chosen
/// containment is said once, on the `command started` line) line; false
/// for any other line.
pub(crate) fn log_note(line: &str) -> bool {
    match line.split_once(' ') {
        Some(("note", note)) => tracing::warn!(guard = note, "guard"),
        Some(("info", info)) => tracing::debug!(guard = info, "guard"),
        _ => return false,
    }
    true
}

/// Parses `exited code N swept K` / `exited signal N swept K`.
pub(crate) fn parse_exit(line: &str) -> Option<(Outcome, usize)> {
    let words: Vec<&str> = line.split(' ').collect();
    let (outcome, swept) = match words.as_slice() {
        ["exited", "code", n, "swept", k] => (Outcome::Code(n.parse().ok()?), k),
        ["exited", "signal", n, "swept", k] => (Outcome::Signal(n.parse().ok()?), k),
        _ => return None,
    };
    Some((outcome, swept.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse() {
        assert_eq!(
            parse_exit("exited code 7 swept 0"),
            Some((Outcome::Code(7), 0))
        );
        assert_eq!(
            parse_exit("exited signal 9 swept 2"),
            Some((Outcome::Signal(9), 2))
        );
        assert_eq!(parse_exit("exited code x swept 0"), None);
        assert_eq!(parse_exit("hello"), None);
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(Outcome::Code(7).exit_code(), 7);
        assert_eq!(Outcome::Signal(9).exit_code(), 137);
        assert_eq!(Outcome::NotStarted { not_found: true }.exit_code(), 127);
        assert_eq!(Outcome::NotStarted { not_found: false }.exit_code(), 126);
        assert!(Outcome::Code(0).success());
        assert!(!Outcome::Signal(15).success());
    }
}
