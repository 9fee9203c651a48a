//! Every case of the suite. Each is `pub async fn(Ctx)` and panics on failure.

mod elections;
mod lead;
mod storage;
mod watch;

pub use elections::*;
pub use lead::*;
pub use storage::*;
pub use watch::*;
