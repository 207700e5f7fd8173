//! Read-only inspection of a WAL's objects, for tools and runbooks (`walctl chain`,
//! `walctl verify`): which objects each store holds, what value each copy names, and
//! whether each object passes the checks of FORMAT.md's "What a reader verifies".
//!
//! Recovery and reads answer what the log *is* (the chain, its entries); an
//! [`Inspector`] answers what the store *holds*, object by object and store by store,
//! including orphans, claims and damaged copies that recovery passes over. It never
//! writes and never fences.
//!
//! Listings are held whole, so an inspection's memory grows with the number of objects
//! under the prefix (a listed key, about 100 bytes, per object and store): a tool's
//! run, not a node's. Copies and checks stream out as they are read.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use object_store::memory::InMemory;
//! use object_store_wal::inspect::{Inspector, Verdict};
//! use object_store_wal::{Config, ObjectStoreLogStore};
//!
//! let store = Arc::new(InMemory::new());
//! let config = Config::new("wal").with_create_if_missing(true);
//! let mut wal = ObjectStoreLogStore::open(store.clone(), config.clone()).await?;
//! wal.append_and_flush(vec![(1, vec![Bytes::from_static(b"put k v")])]).await?;
//!
//! let inspector = Inspector::new(store, &config)?;
//! let listed = inspector.list().await?;
//! assert_eq!(listed.sequences, vec![1, 2]); // the opening object, then the data
//! for sequence in listed.sequences {
//!     assert!(matches!(inspector.verify(sequence).await, Verdict::Ok));
//! }
//! # Ok::<(), object_store_wal::Error>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;

use futures::stream::{BoxStream, StreamExt};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::format;
use crate::internal::store::codec::SegmentCodec;
use crate::internal::store::objects::{Listing, WalIo};
use crate::internal::store::quorum::{decided_value, ValueId};
use crate::internal::store::stores::WalStores;

/// Read-only access to a prefix's objects in one store, or in each of several
/// ([`stores`](Inspector::stores)).
#[derive(Debug, Clone)]
pub struct Inspector {
    io: WalIo,
}

/// The keys under a prefix, as one listing found them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listed {
    /// The sequences of WAL objects, ascending. Over several stores, the union of the
    /// stores that answered (at least a quorum; [`Inspector::stores`] lists each).
    pub sequences: Vec<u64>,
    /// Keys under the prefix that are not WAL objects.
    pub foreign: Vec<String>,
}

/// What [`Inspector::verify`] found of one object.
#[derive(Debug)]
#[non_exhaustive]
pub enum Verdict {
    /// Every CRC and rule holds.
    Ok,
    /// Listed, then gone before its read (a reclaimer deleted it): not damage.
    Vanished,
    /// Its header, footer or trailer fails, or it names another sequence: the object is
    /// unusable.
    Unusable(Error),
    /// Its read failed (the store answered with an error, or not in time): nothing is
    /// known of its bytes.
    ReadFailed(Error),
    /// Every check that needs no key holds; these encrypted segments need a key the
    /// configuration does not have (`Config::encryption_keys`), each an
    /// [`Error::CorruptSegment`] naming the key id.
    KeysMissing(Vec<Error>),
    /// Header, footer and trailer hold; these segments fail, each an
    /// [`Error::CorruptSegment`] (only their regions' reads fail).
    Segments(Vec<Error>),
    /// Every finer check holds but the object CRC fails: its own 4 bytes are damaged.
    ObjectCrc(Error),
}

/// One store's copy of a key ([`KeyCopies`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreCopy {
    /// The store has no object at the key.
    Missing,
    /// The store has one, but its summary cannot be read or fails its checks.
    Unreadable(Error),
    /// A verified copy: the value it names.
    #[non_exhaustive]
    Held {
        /// The header's epoch.
        epoch: u64,
        /// Whether it is a claim (an opener's placeholder, never replayed).
        claim: bool,
        /// The trailer's CRC of the whole object: equal CRCs, equal values.
        object_crc: u32,
    },
}

/// Every store's copy of one key, and whether a quorum of them hold one value.
#[derive(Debug)]
#[non_exhaustive]
pub struct KeyCopies {
    /// The key's sequence.
    pub sequence: u64,
    /// One per store, in the order the stores were given.
    pub copies: Vec<StoreCopy>,
    /// Whether a quorum of stores hold one value at the key (only a decided value can be
    /// on the chain).
    pub decided: bool,
}

impl Inspector {
    /// Inspects `config.prefix` in `stores` (one store, or several holding one log).
    /// Compressed segments are opened up to [`crate::config::MAX_BYTES`] each, whatever
    /// `config.max_batch_bytes` (a tool reads what any node wrote); encrypted ones with
    /// `config.encryption_keys`.
    pub fn new(stores: impl Into<WalStores>, config: &Config) -> Result<Self> {
        config.validate()?;
        let mut codec = SegmentCodec::of(config);
        codec.max_decoded = crate::config::MAX_BYTES;
        Ok(Inspector {
            io: stores.into().into_io(config)?.with_codec(codec),
        })
    }

    /// One inspector per store, in the order the stores were given (over one store,
    /// this one).
    pub fn stores(&self) -> Vec<Inspector> {
        let replicas = self.io.replicas();
        if replicas.is_empty() {
            return vec![self.clone()];
        }
        let codec = self.io.codec().clone();
        replicas
            .into_iter()
            .map(|io| Inspector {
                io: io.with_codec(codec.clone()),
            })
            .collect()
    }

    /// The key of the object `sequence`.
    pub fn key(&self, sequence: u64) -> String {
        self.io.key(sequence).to_string()
    }

    /// Lists the prefix: its WAL objects and foreign keys.
    pub async fn list(&self) -> Result<Listed> {
        let listing = self.io.list().await?;
        Ok(Listed {
            sequences: listing.objects.iter().map(|o| o.sequence).collect(),
            foreign: listing.foreign.iter().map(|k| k.to_string()).collect(),
        })
    }

    /// Reads the object `sequence` whole and checks it as FORMAT.md's "What a reader
    /// verifies" tells: header, footer and trailer first, then each segment on its own
    /// (a transformed one opened with the configuration's keys), then the object CRC.
    /// Over several stores, the first readable copy.
    pub async fn verify(&self, sequence: u64) -> Verdict {
        let key = self.key(sequence);
        let bytes = match self.io.read_whole(sequence).await {
            Ok(bytes) => bytes,
            Err(Error::Store { source, .. })
                if matches!(*source, object_store::Error::NotFound { .. }) =>
            {
                return Verdict::Vanished
            }
            Err(e) => return Verdict::ReadFailed(e),
        };
        let checked = match format::check_object(&bytes) {
            Ok(checked) => checked,
            Err(source) => return Verdict::Unusable(Error::CorruptObject { key, source }),
        };
        let found = checked.summary.header.sequence;
        if found != sequence {
            return Verdict::Unusable(Error::SequenceMismatch {
                key,
                expected: sequence,
                found,
            });
        }
        // A transformed segment whose stored CRC holds is opened too: decrypted and
        // decompressed with the configuration's keys, its entries checked.
        let header = checked.summary.header;
        let mut damaged: Vec<(u64, format::FormatError)> = checked
            .damaged
            .into_iter()
            .map(|d| (d.region, d.error))
            .collect();
        for record in checked.summary.footer.records.iter() {
            if !record.is_transformed() || damaged.iter().any(|(r, _)| *r == record.region) {
                continue;
            }
            // `check_object` placed every segment inside the object.
            let range = usize::try_from(record.offset)
                .ok()
                .zip(usize::try_from(record.range().end).ok());
            let Some(segment) = range.and_then(|(from, to)| bytes.get(from..to)) else {
                continue;
            };
            let segment = bytes.slice_ref(segment);
            if let Err(error) =
                self.io
                    .decode_segment(segment, record, header.sequence, header.epoch)
            {
                damaged.push((record.region, error));
            }
        }
        let corrupt = |(region, source)| Error::CorruptSegment {
            key: key.clone(),
            region,
            source,
        };
        let (missing, damaged): (Vec<_>, Vec<_>) = damaged
            .into_iter()
            .partition(|(_, e)| matches!(e, format::FormatError::KeyUnavailable { .. }));
        if !damaged.is_empty() {
            return Verdict::Segments(damaged.into_iter().map(corrupt).collect());
        }
        if !missing.is_empty() {
            return Verdict::KeysMissing(missing.into_iter().map(corrupt).collect());
        }
        match format::check_object_crc(&bytes, &checked.summary.trailer) {
            Ok(()) => Verdict::Ok,
            Err(source) => Verdict::ObjectCrc(Error::CorruptObject { key, source }),
        }
    }

    /// Every key any store lists, ascending, with each store's copy and whether a
    /// quorum holds one value (over one store: its copy). Each store is listed first
    /// (held whole, a listing failure fails the call); the copies' summaries are then
    /// read 8 keys at a time, and each key comes as soon as its copies are read.
    pub async fn copies(&self) -> Result<BoxStream<'static, KeyCopies>> {
        let replicas: Vec<WalIo> = self.stores().into_iter().map(|i| i.io).collect();
        let mut per_store = Vec::with_capacity(replicas.len());
        for r in &replicas {
            per_store.push(Arc::new(r.list().await?));
        }
        let mut sequences: Vec<u64> = per_store
            .iter()
            .flat_map(|l| l.objects.iter().map(|o| o.sequence))
            .collect();
        sequences.sort_unstable();
        sequences.dedup();
        let stores: Arc<Vec<(WalIo, Arc<Listing>)>> =
            Arc::new(replicas.into_iter().zip(per_store).collect());
        Ok(futures::stream::iter(sequences)
            .map(move |sequence| {
                let stores = stores.clone();
                async move { key_copies(&stores, sequence).await }
            })
            .buffered(8)
            .boxed())
    }
}

/// Every store's copy of the key `sequence`.
async fn key_copies(stores: &[(WalIo, Arc<Listing>)], sequence: u64) -> KeyCopies {
    let reads = stores.iter().map(|(io, listing)| async move {
        // Listings are sorted by sequence.
        let found = listing
            .objects
            .binary_search_by_key(&sequence, |o| o.sequence)
            .ok()
            .and_then(|at| listing.objects.get(at));
        match found {
            None => (StoreCopy::Missing, None),
            Some(listed) => match io.read_summary(listed).await {
                Ok(read) => {
                    let value = ValueId::of(&read.summary);
                    let copy = StoreCopy::Held {
                        epoch: value.epoch,
                        claim: value.claim,
                        object_crc: value.object_crc,
                    };
                    (copy, Some(value))
                }
                Err(e) => (StoreCopy::Unreadable(e), None),
            },
        }
    });
    let (copies, values): (Vec<StoreCopy>, Vec<Option<ValueId>>) =
        futures::future::join_all(reads).await.into_iter().unzip();
    KeyCopies {
        sequence,
        copies,
        decided: decided_value(&values).is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
    use std::sync::Arc;

    fn config() -> Config {
        Config::new("wal").with_create_if_missing(true)
    }

    async fn written(store: Arc<InMemory>) -> u64 {
        let mut wal = crate::internal::sequential::ObjectStoreLogStore::open(store, config())
            .await
            .expect("open");
        let receipt = wal
            .append_and_flush(vec![(7, vec![Bytes::from_static(b"entry")])])
            .await
            .expect("append");
        receipt.sequence
    }

    #[tokio::test]
    async fn verify_names_a_damaged_segment_and_a_vanished_object() {
        let store = Arc::new(InMemory::new());
        let sequence = written(store.clone()).await;
        let inspector = Inspector::new(store.clone(), &config()).expect("inspector");
        assert!(matches!(inspector.verify(sequence).await, Verdict::Ok));

        // Flip the last payload byte of the only segment (just before the footer).
        let key = Path::from(inspector.key(sequence));
        let bytes = store
            .get(&key)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        let mut damaged = bytes.to_vec();
        let trailer = format::decode_trailer(&bytes, bytes.len() as u64).expect("trailer");
        let at = trailer.footer_range().start as usize - 1;
        damaged[at] ^= 0x01;
        store
            .put(&key, PutPayload::from(damaged))
            .await
            .expect("put");
        match inspector.verify(sequence).await {
            Verdict::Segments(errors) => {
                assert_eq!(errors.len(), 1);
                assert!(
                    matches!(errors[0], Error::CorruptSegment { region: 7, .. }),
                    "{errors:?}"
                );
            }
            other => panic!("expected a damaged segment, got {other:?}"),
        }

        store.delete(&key).await.expect("delete");
        assert!(matches!(
            inspector.verify(sequence).await,
            Verdict::Vanished
        ));
        // Over one store: the store itself, and its copy of each key it lists.
        assert_eq!(inspector.stores().len(), 1);
        let keys: Vec<KeyCopies> = inspector.copies().await.expect("copies").collect().await;
        assert_eq!(keys.len(), 1, "only the opening object is left");
        assert!(keys[0].decided);
        assert!(matches!(keys[0].copies[..], [StoreCopy::Held { .. }]));
    }

    #[tokio::test]
    async fn copies_over_three_stores_say_which_keys_are_decided() {
        let stores: Vec<Arc<InMemory>> = (0..3).map(|_| Arc::new(InMemory::new())).collect();
        // Objects written to store 0 alone; the opening object copied to store 1 (two
        // copies of three: decided), the data object left alone (one copy: not).
        let sequence = written(stores[0].clone()).await;
        let opening = Path::from("wal/00000000000000000001.wal");
        let bytes = stores[0]
            .get(&opening)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("bytes");
        stores[1]
            .put(&opening, PutPayload::from(bytes))
            .await
            .expect("put");

        let dyns: Vec<Arc<dyn ObjectStore>> = stores
            .iter()
            .map(|s| s.clone() as Arc<dyn ObjectStore>)
            .collect();
        let wal_stores = WalStores::quorum(dyns).expect("three stores");
        let inspector = Inspector::new(wal_stores, &config()).expect("inspector");
        assert_eq!(inspector.key(1), opening.to_string());
        let keys: Vec<KeyCopies> = inspector.copies().await.expect("copies").collect().await;
        let seqs: Vec<u64> = keys.iter().map(|k| k.sequence).collect();
        assert_eq!(seqs, vec![1, sequence]);
        let (opening, data) = (&keys[0], &keys[1]);
        assert!(opening.decided);
        assert!(matches!(
            opening.copies[0],
            StoreCopy::Held { claim: false, .. }
        ));
        assert!(matches!(
            opening.copies[1],
            StoreCopy::Held { claim: false, .. }
        ));
        assert!(matches!(opening.copies[2], StoreCopy::Missing));
        assert!(!data.decided);
        assert!(matches!(data.copies[0], StoreCopy::Held { .. }));
        assert!(matches!(data.copies[1], StoreCopy::Missing));
        assert!(matches!(data.copies[2], StoreCopy::Missing));
        assert_eq!(inspector.stores().len(), 3);
    }
}
