//! [`SharedRedbStorage`]: the processes of one host share the file
//! (redb's multi-writer mode, byte-range locks, group commit within a
//! process, watches through [`crate::watch`]).

mod config;
mod storage;

pub use config::SharedRedbStorageBuilder;
pub use storage::SharedRedbStorage;
