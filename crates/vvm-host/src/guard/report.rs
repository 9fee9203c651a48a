//! The guard's words to vvm-host, on the lifeline socket, never blocking.
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
