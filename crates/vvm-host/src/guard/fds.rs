//! Descriptors handed between vvm-host, the guard and the namespace's
//! init over their Unix sockets (`SCM_RIGHTS`), each with a fixed line
//! that says what it carries: the lifeline to the init, and with
//! `--pass-stdin` vvm-host's standard input down to the command.

use std::{
    io::{self, IoSlice, IoSliceMut},
    mem::MaybeUninit,
    os::{
        fd::{AsFd, BorrowedFd, OwnedFd},
        unix::net::UnixStream as StdUnixStream,
    },
};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// The most descriptors one line carries.
const MAX_FDS: usize = 2;

/// Sends `line` with `fds` attached, in one message.
pub(crate) fn send(socket: &impl AsFd, line: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::other("too many descriptors for one line"));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    let sent = sendmsg(
        socket,
        &[IoSlice::new(line)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent == line.len() {
        Ok(())
    } else {
        Err(io::ErrorKind::WriteZero.into())
    }
}

/// Receives `line` (blocking) and the descriptors attached to it, in the
/// order sent, close-on-exec (so no child inherits them unless it is given
/// one as a standard stream). An error if another line comes.
pub(crate) fn receive(socket: &StdUnixStream, line: &[u8]) -> io::Result<Vec<OwnedFd>> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut got = vec![0u8; line.len()];
    let received = recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut got)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::WAITALL,
    )?;
    if received.bytes != line.len() || got != line {
        return Err(io::Error::other(format!(
            "expected {:?}, got {:?}",
            String::from_utf8_lossy(line).trim_end(),
            String::from_utf8_lossy(&got[..received.bytes]).trim_end()
        )));
    }
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn a_line_carries_its_descriptors_in_order() {
        let (a, b) = StdUnixStream::pair().unwrap();
        let (mut x_in, x_out) = StdUnixStream::pair().unwrap();
        let (y_in, y_out) = StdUnixStream::pair().unwrap();
        send(&a, b"two\n", &[x_out.as_fd(), y_out.as_fd()]).unwrap();
        let fds = receive(&b, b"two\n").unwrap();
        assert_eq!(fds.len(), 2);
        let mut x = StdUnixStream::from(fds.into_iter().next().unwrap());
        x.write_all(b"x").unwrap();
        let mut got = [0u8; 1];
        x_in.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"x");
        drop(y_out);
        y_in.set_nonblocking(true).unwrap();
        send(&a, b"one\n", &[]).unwrap();
        assert!(receive(&b, b"two\n").is_err());
    }
}
