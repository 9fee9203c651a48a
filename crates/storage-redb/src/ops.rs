//! The conditional writes, applied inside one write transaction.
//!
//! Each operation reads the record and writes it in the same transaction, so
//! no other writer can come between the check and the write.

use redb::{ReadableTable, Table, WriteTransaction};
use ttl_storage::Ttl;

use crate::{
    record::{self, NEVER},
    schema::{EXPIRY, RECORDS},
};

/// A conditional write waiting to be applied.
#[derive(Debug)]
pub(crate) enum Op {
    /// `insert_if_not_exists`.
    Insert {
        /// The key.
        key: String,
        /// The value to write.
        value: Vec<u8>,
        /// The TTL of the new record.
        ttl: Ttl,
    },
    /// `compare_and_swap`.
    Swap {
        /// The key.
        key: String,
        /// The value the live record must hold.
        old: Vec<u8>,
        /// The value to write.
        new: Vec<u8>,
        /// The TTL of the new record.
        ttl: Ttl,
    },
    /// `compare_and_delete`.
    Delete {
        /// The key.
        key: String,
        /// The value the live record must hold.
        value: Vec<u8>,
    },
    /// `write_counted`: an insert (`old` is `None`) or a swap, and the
    /// counter's advance, in the one transaction.
    Counted {
        /// The key.
        key: String,
        /// The value the live record must hold (`None`: no live record).
        old: Option<Vec<u8>>,
        /// The value to write.
        new: Vec<u8>,
        /// The TTL of the new record.
        ttl: Ttl,
        /// The counter's key.
        counter: String,
        /// The counter's least next value.
        floor: u64,
        /// The counter's largest value.
        max: u64,
    },
}

/// An operation's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Whether a plain write applied.
    Plain(bool),
    /// A counted write: the counter's new value, `None` when the record's
    /// condition failed (nothing written).
    Counted(Option<u64>),
    /// A counted write whose counter cannot advance: why (nothing written).
    CounterRefused(String),
}

impl Answer {
    /// True when the operation wrote.
    pub(crate) fn applied(&self) -> bool {
        matches!(self, Answer::Plain(true) | Answer::Counted(Some(_)))
    }
}

/// What applying an operation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    /// The operation's answer.
    pub(crate) answer: Answer,
    /// True when the transaction changed (the write, or an expired record reclaimed).
    pub(crate) dirty: bool,
}

/// A stored record: its expiry and its value.
type Stored = (u64, Vec<u8>);

/// The open tables of one write transaction.
pub(crate) struct Tables<'txn> {
    records: Table<'txn, &'static str, &'static [u8]>,
    expiry: Table<'txn, (u64, &'static str), ()>,
}

impl<'txn> Tables<'txn> {
    /// Opens the tables in `txn`.
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Tables {
            records: txn.open_table(RECORDS)?,
            expiry: txn.open_table(EXPIRY)?,
        })
    }

    /// Applies `op` at wall-clock time `now` (Unix millis).
    pub(crate) fn apply(&mut self, op: &Op, now: u64) -> Result<Applied, redb::Error> {
        let (key, expected) = match op {
            Op::Insert { key, .. } => (key, None),
            Op::Swap { key, old, .. } => (key, Some(old)),
            Op::Delete { key, value } => (key, Some(value)),
            Op::Counted { key, old, .. } => (key, old.as_ref()),
        };
        let (current, reclaimed) = self.live(key, now)?;
        let matches = match (&current, expected) {
            (None, None) => true,
            (Some((_, value)), Some(expected)) => value == expected,
            _ => false,
        };
        if !matches {
            let answer = match op {
                Op::Counted { .. } => Answer::Counted(None),
                _ => Answer::Plain(false),
            };
            return Ok(Applied {
                answer,
                dirty: reclaimed,
            });
        }
        let mut answer = Answer::Plain(true);
        if let Op::Counted {
            counter,
            floor,
            max,
            ..
        } = op
        {
            // The counter first: when it cannot advance, nothing is written.
            let (stored, counter_reclaimed) = self.live(counter, now)?;
            let next = ttl_storage::Key::new(counter.clone())
                .map_err(|err| err.to_string())
                .and_then(|key| {
                    ttl_storage::counted::next_count(
                        &key,
                        stored.as_ref().map(|(_, v)| v.as_slice()),
                        *floor,
                        *max,
                    )
                    .map_err(|err| err.to_string())
                });
            let next = match next {
                Ok(next) => next,
                Err(why) => {
                    return Ok(Applied {
                        answer: Answer::CounterRefused(why),
                        dirty: reclaimed || counter_reclaimed,
                    });
                }
            };
            if let Some((expires_at, _)) = stored {
                self.unindex(expires_at, counter)?;
            }
            self.records.insert(
                counter.as_str(),
                record::encode(NEVER, next.to_string().as_bytes()).as_slice(),
            )?;
            answer = Answer::Counted(Some(next));
        }
        if let Some((expires_at, _)) = current {
            self.unindex(expires_at, key)?;
        }
        match op {
            Op::Insert { key, value, ttl }
            | Op::Swap {
                key,
                new: value,
                ttl,
                ..
            }
            | Op::Counted {
                key,
                new: value,
                ttl,
                ..
            } => {
                let expires_at = record::expiry_for(now, *ttl);
                self.records
                    .insert(key.as_str(), record::encode(expires_at, value).as_slice())?;
                if expires_at != NEVER {
                    self.expiry.insert((expires_at, key.as_str()), ())?;
                }
            }
            Op::Delete { key, .. } => {
                self.records.remove(key.as_str())?;
            }
        }
        Ok(Applied {
            answer,
            dirty: true,
        })
    }

    /// The live record under `key` as (expiry, value). An expired record is
    /// deleted on the way; the flag says so.
    fn live(&mut self, key: &str, now: u64) -> Result<(Option<Stored>, bool), redb::Error> {
        let stored = match self.records.get(key)? {
            None => return Ok((None, false)),
            Some(guard) => {
                let (expires_at, value) = record::decode(guard.value())?;
                (expires_at, value.to_vec())
            }
        };
        if record::is_live(stored.0, now) {
            return Ok((Some(stored), false));
        }
        self.records.remove(key)?;
        self.unindex(stored.0, key)?;
        Ok((None, true))
    }

    /// Removes the expiry-index entry of a record.
    fn unindex(&mut self, expires_at: u64, key: &str) -> Result<(), redb::Error> {
        if expires_at != NEVER {
            self.expiry.remove((expires_at, key))?;
        }
        Ok(())
    }

    /// Deletes at most `limit` records that expired by `now`, oldest expiry
    /// first. Returns how many index entries it removed.
    pub(crate) fn sweep(&mut self, now: u64, limit: usize) -> Result<usize, redb::Error> {
        let due: Vec<(u64, String)> = self
            .expiry
            .range(..(now.saturating_add(1), ""))?
            .take(limit)
            .map(|entry| entry.map(|(key, _)| (key.value().0, key.value().1.to_owned())))
            .collect::<Result<_, _>>()?;
        for (expires_at, key) in &due {
            self.expiry.remove((*expires_at, key.as_str()))?;
            let stale = match self.records.get(key.as_str())? {
                Some(guard) => record::decode(guard.value())?.0 == *expires_at,
                None => false,
            };
            if stale {
                self.records.remove(key.as_str())?;
            }
        }
        Ok(due.len())
    }
}

/// Reads the live record under `key` at `now` as its stored expiry
/// ([`NEVER`] for a record that never expires) and value.
pub(crate) fn get_record(
    db: &redb::Database,
    key: &str,
    now: u64,
) -> Result<Option<(u64, Vec<u8>)>, redb::Error> {
    use redb::ReadableDatabase;
    let txn = db.begin_read()?;
    let records = txn.open_table(RECORDS)?;
    let Some(guard) = records.get(key)? else {
        return Ok(None);
    };
    let (expires_at, value) = record::decode(guard.value())?;
    Ok(record::is_live(expires_at, now).then(|| (expires_at, value.to_vec())))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::{Rng, SeedableRng, rngs::StdRng};
    use redb::{ReadableDatabase, backends::InMemoryBackend};

    use super::*;
    use crate::schema;

    fn memory_db() -> redb::Database {
        let db = redb::Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        schema::init_or_check(&db).unwrap();
        db
    }

    /// The expiry index holds exactly one entry per expiring record.
    fn assert_index_matches(db: &redb::Database) {
        let txn = db.begin_read().unwrap();
        let records = txn.open_table(RECORDS).unwrap();
        let expiry = txn.open_table(EXPIRY).unwrap();
        let mut expected = Vec::new();
        for entry in records.iter().unwrap() {
            let (key, value) = entry.unwrap();
            let (expires_at, _) = record::decode(value.value()).unwrap();
            if expires_at != NEVER {
                expected.push((expires_at, key.value().to_owned()));
            }
        }
        let mut indexed: Vec<(u64, String)> = expiry
            .iter()
            .unwrap()
            .map(|entry| {
                let (key, _) = entry.unwrap();
                (key.value().0, key.value().1.to_owned())
            })
            .collect();
        expected.sort();
        indexed.sort();
        assert_eq!(indexed, expected);
    }

    /// Random operations on a few keys, with a clock that advances in steps,
    /// agree with a plain map model, and keep the expiry index exact.
    #[test]
    fn random_operations_match_a_model() {
        let db = memory_db();
        let mut rng = StdRng::seed_from_u64(7);
        // key -> (expiry, value)
        let mut model: BTreeMap<String, (u64, Vec<u8>)> = BTreeMap::new();
        let mut now = 1_000_000u64;
        for step in 0..3000 {
            now += rng.random_range(0..400);
            let key = format!("k{}", rng.random_range(0..12));
            let value = vec![rng.random_range(0..3u8)];
            let other = vec![rng.random_range(0..3u8)];
            let ttl = match rng.random_range(0..3) {
                0 => Ttl::NEVER,
                _ => Ttl::from_secs(rng.random_range(1..4)).unwrap(),
            };
            let live = model
                .get(&key)
                .filter(|(expires_at, _)| record::is_live(*expires_at, now))
                .cloned();
            let (op, expected) = match rng.random_range(0..3) {
                0 => (
                    Op::Insert {
                        key: key.clone(),
                        value: value.clone(),
                        ttl,
                    },
                    live.is_none(),
                ),
                1 => (
                    Op::Swap {
                        key: key.clone(),
                        old: other.clone(),
                        new: value.clone(),
                        ttl,
                    },
                    live.as_ref().is_some_and(|(_, v)| *v == other),
                ),
                _ => (
                    Op::Delete {
                        key: key.clone(),
                        value: value.clone(),
                    },
                    live.as_ref().is_some_and(|(_, v)| *v == value),
                ),
            };
            let txn = db.begin_write().unwrap();
            let applied = Tables::open(&txn).unwrap().apply(&op, now).unwrap();
            txn.commit().unwrap();
            assert_eq!(applied.answer.applied(), expected, "step {step}: {op:?}");
            if expected {
                match op {
                    Op::Delete { .. } => {
                        model.remove(&key);
                    }
                    _ => {
                        model.insert(key.clone(), (record::expiry_for(now, ttl), value));
                    }
                }
            }
            if step % 100 == 0 {
                let txn = db.begin_write().unwrap();
                Tables::open(&txn).unwrap().sweep(now, 5).unwrap();
                txn.commit().unwrap();
            }
            assert_index_matches(&db);
            for (key, (expires_at, value)) in &model {
                let got = get_record(&db, key, now).unwrap().map(|(_, value)| value);
                let want = record::is_live(*expires_at, now).then(|| value.clone());
                assert_eq!(got, want, "step {step}: {key}");
            }
        }
    }

    #[test]
    fn operations_of_one_batch_see_each_other() {
        let db = memory_db();
        let ttl = Ttl::from_secs(5).unwrap();
        let txn = db.begin_write().unwrap();
        let mut tables = Tables::open(&txn).unwrap();
        let insert = Op::Insert {
            key: "k".into(),
            value: b"a".to_vec(),
            ttl,
        };
        let swap = Op::Swap {
            key: "k".into(),
            old: b"a".to_vec(),
            new: b"b".to_vec(),
            ttl,
        };
        let delete = Op::Delete {
            key: "k".into(),
            value: b"b".to_vec(),
        };
        let answers: Vec<bool> = [&insert, &insert, &swap, &swap, &delete, &insert]
            .into_iter()
            .map(|op| tables.apply(op, 1_000).unwrap().answer.applied())
            .collect();
        drop(tables);
        txn.commit().unwrap();
        assert_eq!(answers, [true, false, true, false, true, true]);
        assert_eq!(
            get_record(&db, "k", 1_000).unwrap().map(|(_, value)| value),
            Some(b"a".to_vec())
        );
        assert_index_matches(&db);
    }
}
