//! The state every handle of a [`RedbStorage`](crate::RedbStorage), its
//! blocking tasks and its sweep share: the open file alone.

use crate::handle::{FileState, OpenFile};

/// The state every handle and every blocking task shares.
pub(crate) type Shared = OpenFile;

/// Its queued writes are committed as they are ([`FileState::drain`]'s
/// default): no other process, nothing to announce.
impl FileState for OpenFile {
    fn file(&self) -> &OpenFile {
        self
    }
}
