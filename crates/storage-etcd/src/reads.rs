//! Reads batched into one transaction: the renewals of many records read
//! them together (up to [`MAX_OPS`] per transaction, etcd's default
//! `--max-txn-ops`), so a renewal round of many records costs a few
//! read-only transactions, not one request per record.
//!
//! A read is queued after the caller's keep-alive was answered and is sent
//! after it was queued, so it observes the store at least as late as both.

use etcd_client::{Client, KeyValue, Txn, TxnOp, TxnOpResponse};
use tokio::sync::{mpsc, oneshot};
use ttl_storage::{Result, StorageError};

use crate::{
    error::{EtcdError, Op, classify, storage_error},
    unsent,
};

/// The most reads in one transaction.
const MAX_OPS: usize = 128;

/// The most reads taken from the queue in one round (sent as concurrent
/// transactions of [`MAX_OPS`]).
const MAX_ROUND: usize = 1024;

/// What a read found: the record, if any, and the store's revision when it
/// was read (every write applied before the read has a revision at most
/// this one).
pub(crate) type Read = (Option<KeyValue>, i64);

type Request = (String, oneshot::Sender<std::result::Result<Read, String>>);

/// The queue of reads, and the task that sends them (it ends when the last
/// clone of the storage is dropped).
#[derive(Clone)]
pub(crate) struct Reads {
    client: Client,
    queue: mpsc::UnboundedSender<Request>,
}

impl Reads {
    /// Starts the sending task on the current runtime.
    pub(crate) fn start(client: Client) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        tokio::spawn(send_rounds(client.clone(), requests));
        Reads { client, queue }
    }

    /// Reads `key` in the next batch (or alone, if the batching task is
    /// gone with the runtime that started it).
    pub(crate) async fn read(&self, key: &str, what: &str) -> Result<Read> {
        let (tx, rx) = oneshot::channel();
        if self.queue.send((key.to_string(), tx)).is_ok()
            && let Ok(answer) = rx.await
        {
            return answer.map_err(|message| {
                StorageError::transient(format!("{what}: reading the record failed: {message}"))
            });
        }
        let mut answers = read_many(&self.client, std::slice::from_ref(&key.to_string()))
            .await
            .map_err(|err| storage_error(classify(&err, Op::Read), what, err))?;
        answers
            .pop()
            .ok_or_else(|| StorageError::transient(format!("{what}: the read returned nothing")))
    }
}

async fn send_rounds(client: Client, mut requests: mpsc::UnboundedReceiver<Request>) {
    let mut round = Vec::new();
    while requests.recv_many(&mut round, MAX_ROUND).await > 0 {
        let keys: Vec<String> = round.iter().map(|(key, _)| key.clone()).collect();
        let answers =
            futures::future::join_all(keys.chunks(MAX_OPS).map(|chunk| read_many(&client, chunk)))
                .await;
        let mut replies = round.drain(..);
        for (chunk, answer) in keys.chunks(MAX_OPS).zip(answers) {
            match answer {
                Ok(reads) => {
                    for read in reads {
                        if let Some((_, reply)) = replies.next() {
                            let _ = reply.send(Ok(read));
                        }
                    }
                }
                Err(err) => {
                    let message = crate::error::describe(&err);
                    for _ in chunk {
                        if let Some((_, reply)) = replies.next() {
                            let _ = reply.send(Err(message.clone()));
                        }
                    }
                }
            }
        }
    }
}

/// One read-only transaction reading every key of `keys`, in order.
async fn read_many(client: &Client, keys: &[String]) -> std::result::Result<Vec<Read>, EtcdError> {
    let txn = Txn::new().and_then(
        keys.iter()
            .map(|key| TxnOp::get(key.clone(), None))
            .collect::<Vec<_>>(),
    );
    let response = unsent::retry(|| {
        let mut client = client.clone();
        let txn = txn.clone();
        async move { client.txn(txn).await }
    })
    .await?;
    let revision = response.header().map_or(0, |h| h.revision());
    let mut reads = Vec::with_capacity(keys.len());
    for op in response.op_responses() {
        let kv = match op {
            TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        };
        reads.push((kv, revision));
    }
    if reads.len() != keys.len() {
        return Err(EtcdError::InvalidArgs(format!(
            "a read of {} keys answered {}",
            keys.len(),
            reads.len()
        )));
    }
    Ok(reads)
}
