//! Every case of the suite. Each is `pub async fn(Ctx)` and panics on failure.

mod elections;
mod handover;
mod lead;
mod observe;
mod storage;
mod watch;

pub use elections::*;
pub use handover::*;
pub use lead::*;
pub use observe::*;
pub use storage::*;
pub use watch::*;
