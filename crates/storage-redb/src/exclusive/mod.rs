//! [`RedbStorage`]: one process holds the file (redb's exclusive mode,
//! group commit, a background sweep).

mod config;
mod state;
mod storage;
mod sweep;

pub use config::RedbStorageBuilder;
pub use storage::RedbStorage;
