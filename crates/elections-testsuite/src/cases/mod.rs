//! Every case of the suite. Each is `pub async fn(Ctx)` and panics on failure.

mod elections;
mod storage;
mod watch;

pub use elections::*;
pub use storage::*;
pub use watch::*;
