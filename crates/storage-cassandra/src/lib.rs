//! # storage-cassandra
//!
//! A [`ttl_storage::TtlStorage`] on **Apache Cassandra** (4.x, 5.x) and
//! **ScyllaDB**, with the [`scylla`] driver. Leadership lives in the
//! database the cluster already runs.
//!
//! ## How it works
//!
//! Records live in a table `key text PRIMARY KEY, value blob`. Every
//! operation is a lightweight transaction (Paxos), with prepared statements:
//!
//! | operation | CQL |
//! |---|---|
//! | `insert_if_not_exists` | `UPDATE t USING TTL ? SET value = ? WHERE key = ? IF value = null` |
//! | `compare_and_swap` | `UPDATE t USING TTL ? SET value = ? WHERE key = ? IF value = ?` |
//! | `compare_and_delete` | `DELETE FROM t WHERE key = ? IF value = ?` |
//! | `get` | `SELECT value FROM t WHERE key = ?` at consistency SERIAL (or LOCAL_SERIAL) |
//! | `get_entry` (`vvm-host status`) | `SELECT value, TTL(value) FROM t WHERE key = ?`, same consistency (whole seconds) |
//!
//! The insert is a conditional `UPDATE` rather than `INSERT ... IF NOT
//! EXISTS` on purpose: an `INSERT` also writes a row marker with its own TTL,
//! which a later conditional `UPDATE` cannot restart; after a
//! compare-and-swap to a shorter TTL (or from [`ttl_storage::Ttl::NEVER`] to
//! an expiring one) the stale marker would keep a value-less row "existing"
//! and block every later insert. Without markers, a row lives exactly as long
//! as its value, and `IF value = null` means "absent or expired".
//!
//! ## Guarantees
//!
//! - **Linearizable** conditional writes and reads, by Paxos at the
//!   configured serial consistency. With `SERIAL` this holds cluster-wide.
//!   `LOCAL_SERIAL` runs Paxos among the replicas of the coordinator's data
//!   center only: it is linearizable only if every client of a key talks to
//!   the same data center; clients in two data centers can both win.
//! - **Reads see every committed write**: `get` runs at SERIAL, so it also
//!   completes any in-flight Paxos round on the key before answering.
//! - **Expiry.** Cassandra stores expiry times in whole seconds, computed
//!   from the *coordinator's* clock when it starts executing the statement,
//!   truncated to the second; replicas compare them with their own clocks.
//!   A TTL of `t` seconds is written as `t + 1`, so on synchronized clocks
//!   the record is live for at least `t` after the coordinator started the
//!   write (hence after any instant the writer measured before sending it)
//!   and is gone at most `t + 1` s after that instant. (At the 20-year
//!   maximum the extra second is dropped: Cassandra refuses longer TTLs.)
//!   [`ttl_storage::Ttl::NEVER`] writes with `USING TTL 0`: no expiry.
//!   A write applied late counts from when the coordinator started it,
//!   which is after the request arrived, so a request delayed on the
//!   network only lengthens the lease. The one gap in "a write applied
//!   late never moves the expiry earlier": a statement that loses Paxos
//!   rounds to a later one keeps its start, so it can land anchored up to
//!   the coordinator's `cas_contention_timeout` (1 s by default) before the
//!   write it replaces.
//! - **Errors** are classified: a Paxos write timeout (`WriteTimeout`,
//!   write type `CAS` or the `SIMPLE` commit phase), a write failure, a
//!   client-side timeout or a connection broken after a conditional write
//!   was sent are [`ttl_storage::ErrorKind::OutcomeUnknown`]; unavailable,
//!   overloaded, bootstrapping nodes and connections that could not be
//!   opened are [`ttl_storage::ErrorKind::Transient`]; syntax, schema,
//!   authentication, authorization and configuration errors are
//!   [`ttl_storage::ErrorKind::Permanent`]. Conditional writes are marked
//!   non-idempotent, so the driver re-sends one only after an error that
//!   proves it was not executed (`Unavailable`, a bootstrapping coordinator);
//!   retrying after anything else is the caller's decision.
//!
//! ## Assumptions
//!
//! - **Never mix lightweight transactions and plain writes on these rows.**
//!   Paxos only orders writes that go through Paxos; a plain `INSERT`,
//!   `UPDATE` or `DELETE` (from another tool, or a TTL set with a plain
//!   write) can be silently reordered against them. Let only this driver
//!   write the table.
//! - **Clocks.** Expiry compares the coordinator's clock at write time with
//!   each replica's clock at read time: node clocks must be synchronized
//!   (NTP) to well under a second. Client clocks do not matter. Paxos ballots
//!   are time-based too: a node with a clock far ahead can delay others.
//! - **Replication.** The keyspace needs enough live replicas for a quorum
//!   at the serial consistency (2 of 3 with rf = 3); fewer gives transient
//!   `Unavailable` errors that name the replicas required and alive, never
//!   wrong answers.
//! - Keys are stored as `text`, values as `blob`. The table must have exactly
//!   those two columns; [`CassandraStorage::connect`] checks
//!   `system_schema.columns` and fails with a permanent error otherwise.
//! - **ScyllaDB**: releases that refuse lightweight transactions on tablets
//!   need a vnodes keyspace; `create_schema` creates the keyspace with
//!   `tablets = {'enabled': false}` (and without that option on Cassandra).
//!   An existing keyspace with tablets fails at the first operation with a
//!   permanent `Invalid` error.
//! - TLS (feature `tls`, on by default; rustls) verifies node certificates against a CA
//!   file; the certificates must name the node's IP address. Client
//!   certificates are not supported.
//!
//! ## Consistency levels, and several data centers
//!
//! Two levels are in play, both set per storage (URL parameters
//! `serial_consistency` and `consistency`, or
//! [`CassandraConfigBuilder::serial_consistency`] and
//! [`CassandraConfigBuilder::consistency`]):
//!
//! | level | used for | default | multi-DC alternative |
//! |---|---|---|---|
//! | serial consistency ([`SerialConsistency`]) | the Paxos phases of every conditional write, and every `get` (a read at SERIAL) | `SERIAL`: a quorum of all replicas, in every data center | `LOCAL_SERIAL`: a quorum of the coordinator's data center only |
//! | commit consistency ([`WriteConsistency`]) | how many replicas must have a conditional write's committed value before it returns | `QUORUM` | `LOCAL_QUORUM` |
//!
//! With one data center the defaults are right. With several, `SERIAL`
//! keeps elections linearizable cluster-wide at the price of a cross-DC
//! round trip per Paxos phase (and an error while a data center is cut
//! off); `serial_consistency=LOCAL_SERIAL&consistency=LOCAL_QUORUM` stays
//! in the local data center but is only safe if every contender for a key
//! connects to the same data center (two data centers could each elect a
//! leader). The keyspace is then typically created with
//! `replication=dc1:3,dc2:3` (NetworkTopologyStrategy).
//!
//! With replication factor 3 a quorum is 2: one node down (or frozen)
//! leaves every operation working; with two down, operations fail with a
//! transient error that says so (`unavailable: 1 of 2 required replicas
//! alive at SERIAL`).
//!
//! ## A coordinator that stops answering
//!
//! A node can keep its CQL port open and still leave every lightweight
//! transaction it coordinates unanswered: cut off from its peers (even one
//! way, which gossip does not notice while its own messages still arrive)
//! or frozen. The driver's load balancing would keep sending it one request
//! in three, and the Paxos rounds it starts still reach the other replicas
//! and pre-empt the healthy coordinators' rounds on the same key. So the
//! storage notes the node of every attempt: an attempt still unanswered
//! after 500 ms when its request times out or is dropped by the caller
//! makes that node a **suspect for 10 s**, which every later plan tries
//! last (still tried if nothing else is left); any answer from it clears
//! it. A `WARN` log names the node. A false suspicion (a node that was
//! only slow, or a client process paused mid-request) costs that node 10 s
//! of traffic, never an error: with every node suspected, plans keep the
//! driver's own order. Measured on a 3-node Cassandra 5.0
//! cluster with one node cut off one way for 10 s and three contenders:
//! before, no acquisition succeeded during the cut (a takeover took
//! 23 s); after, takeovers during cuts took 8.5–8.9 s with an 8 s lease
//! (`cargo xtask chaos --engine cassandra-3`).
//!
//! ## Contention and unknown outcomes
//!
//! A conditional write that times out in Paxos is
//! [`ttl_storage::ErrorKind::OutcomeUnknown`]; callers settle it by reading
//! the record back with `get`. Under contention Cassandra's Paxos v2
//! abandons such a read (`WriteTimeout` at SERIAL, write type CAS), so
//! `get` retries contention errors (`WriteTimeout`, `ReadTimeout`,
//! `Unavailable`, `Overloaded`) with jittered exponential backoff
//! (10 ms to 400 ms) until the request timeout has passed since its first
//! attempt, and only then returns a transient error. The driver does not
//! settle writes itself: reading a value back cannot prove that a write
//! that may have been superseded did or did not apply.
//!
//! ## Creating the schema
//!
//! `create_schema=true` is safe when many clients start at once on
//! different coordinators: the table is created `WITH id =` a UUID derived
//! from its keyspace and name, so concurrent `CREATE TABLE IF NOT EXISTS`
//! statements all propose the same table instead of one table under
//! several ids (which fails every write with `INCOMPATIBLE_SCHEMA`); then
//! the driver waits for schema agreement before checking and using it.
//! Engines that refuse a table id fall back to a plain `CREATE TABLE`,
//! which is only safe from one client at a time. A connection whose
//! keepalives go unanswered for the request timeout (a frozen node) is
//! dropped, instead of after the driver's default 30 s.
//!
//! ## Example
//!
//! ```no_run
//! use storage_cassandra::CassandraStorage;
//! use ttl_storage::{Key, Ttl, TtlStorage};
//!
//! # async fn demo() -> Result<(), ttl_storage::StorageError> {
//! let storage = CassandraStorage::from_url(
//!     "scylla://10.0.0.1,10.0.0.2/elections?replication=simple:3&create_schema=true",
//! )
//! .await?;
//! let key = Key::new("vvm/leader/1")?;
//! if storage.insert_if_not_exists(&key, b"node-7", Ttl::from_secs(20)?).await? {
//!     // we lead for 20 s unless we renew:
//!     storage.compare_and_swap(&key, b"node-7", b"node-7", Ttl::from_secs(20)?).await?;
//! }
//! assert_eq!(storage.get(&key).await?.as_deref(), Some(&b"node-7"[..]));
//! # Ok(()) }
//! ```

mod classify;
mod config;
mod consistency;
mod driver;
mod error;
pub mod fence;
mod schema;
mod storage;
mod suspects;
mod tls;
mod url;

pub use config::{
    CassandraConfig, CassandraConfigBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_TABLE, TlsSettings,
};
pub use consistency::{Replication, SerialConsistency, WriteConsistency};
pub use error::ConfigError;
pub use storage::CassandraStorage;

/// This driver, for registries such as `storage-url`: the URL is parsed
/// once, and the parsed configuration is what gets opened.
///
/// ```
/// let parsed = (storage_cassandra::DRIVER.parse)("scylla://app:pw@10.0.0.1:9042/leases")?;
/// assert_eq!((storage_cassandra::DRIVER.endpoint)(&parsed).as_deref(), Some("10.0.0.1:9042"));
/// # Ok::<(), ttl_storage::BoxError>(())
/// ```
pub const DRIVER: ttl_storage::Driver = ttl_storage::Driver::new::<CassandraConfig>(
    "cassandra",
    &["scylla", "cassandra"],
    "scylla://[user:password@]host[:port][,host...]/keyspace[?options] (Cassandra, ScyllaDB; also cassandra://)",
    Some(DEFAULT_PORT),
).with_fence::<CassandraConfig>();
