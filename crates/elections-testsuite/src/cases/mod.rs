//! Every case of the suite. Each is `pub async fn(Ctx)` and panics on failure.

mod changes;
mod counted;
mod elections;
mod fencing;
mod handover;
mod killer;
mod lead;
mod observe;
mod renewal;
mod storage;
mod watch;

pub use changes::*;
pub use counted::*;
pub use elections::*;
pub use fencing::*;
pub use handover::*;
pub use killer::*;
pub use lead::*;
pub use observe::*;
pub use renewal::*;
pub use storage::*;
pub use watch::*;
