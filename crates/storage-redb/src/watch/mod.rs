//! `TtlStorage::watch` of the shared mode, between processes: every
//! process writes to the events file beside the storage file after
//! committing a delete ([`EventsFile`]), and every process's watches learn
//! of that write through inotify ([`ChangeFeed`]).

mod events_file;
mod feed;

pub(crate) use events_file::EventsFile;
pub(crate) use feed::ChangeFeed;
