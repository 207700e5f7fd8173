//! Which stores one WAL lives in: one store, or several that hold it together.
//!
//! Over several stores (3 or 5: a quorum of zonal buckets, or buckets of different
//! providers), every store holds byte-identical objects under the same keys, and an
//! object is durable once a quorum `Q = N / 2 + 1` holds it (docs/DESIGN.md "One log over
//! several stores"). Appends are acknowledged at the speed of the Q-th fastest store;
//! the WAL survives losing any `N - Q` stores; reads go to the fastest copy. The front
//! ends take a [`WalStores`], built from one store (`From`) or with
//! [`WalStores::quorum`].

use std::sync::Arc;

use object_store::ObjectStore;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::internal::store::objects::WalIo;

/// The stores one WAL lives in: one, or an odd number of at least 3 that hold it
/// together (each object durable once a majority of them holds it).
///
/// One store converts with `From` (so `spawn_wal(store, ..)` and
/// `ObjectStoreLogStore::open(store, ..)` take an `Arc` of any store), several are
/// [`quorum`](Self::quorum):
///
/// ```
/// use std::sync::Arc;
///
/// use object_store::memory::InMemory;
/// use object_store::ObjectStore;
/// use object_store_wal::WalStores;
///
/// let one = WalStores::from(Arc::new(InMemory::new()));
/// assert_eq!(one.len(), 1);
/// let zones: Vec<Arc<dyn ObjectStore>> = (0..3).map(|_| Arc::new(InMemory::new()) as _).collect();
/// let three = WalStores::quorum(zones)?;
/// assert_eq!((three.len(), three.quorum_size()), (3, 2));
/// assert!(WalStores::quorum(Vec::new()).is_err());
/// # Ok::<(), object_store_wal::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct WalStores {
    stores: Vec<Arc<dyn ObjectStore>>,
}

impl WalStores {
    /// One store.
    pub fn one(store: Arc<dyn ObjectStore>) -> Self {
        WalStores {
            stores: vec![store],
        }
    }

    /// Several stores holding one log: an odd number, at least 3 (3 survives losing one
    /// store, 5 two). A list of one is [`one`](Self::one). Any store that supports a
    /// conditional create serves, and they may be of different kinds (S3 beside Azure
    /// beside a local directory). Fails with [`Error::Config`] on an even number or none.
    pub fn quorum(stores: impl IntoIterator<Item = Arc<dyn ObjectStore>>) -> Result<Self> {
        let stores: Vec<_> = stores.into_iter().collect();
        let n = stores.len();
        if n != 1 && (n < 3 || n % 2 == 0) {
            return Err(Error::Config {
                field: "urls",
                reason: format!("{n} stores: one, or an odd number of at least 3"),
            });
        }
        Ok(WalStores { stores })
    }

    /// How many stores.
    pub fn len(&self) -> usize {
        self.stores.len()
    }

    /// Always false: there is at least one store.
    pub fn is_empty(&self) -> bool {
        self.stores.is_empty()
    }

    /// How many stores must hold an object for it to be durable: `N / 2 + 1`.
    pub fn quorum_size(&self) -> usize {
        crate::internal::store::quorum::quorum(self.stores.len())
    }

    /// The stores, in the order given.
    pub fn stores(&self) -> &[Arc<dyn ObjectStore>] {
        &self.stores
    }

    /// The store access of the WAL under `config.prefix` in these stores (for the actor
    /// runtime).
    #[doc(hidden)]
    pub fn into_io(self, config: &Config) -> Result<WalIo> {
        WalIo::for_stores(self.stores, config)
    }
}

impl From<Arc<dyn ObjectStore>> for WalStores {
    fn from(store: Arc<dyn ObjectStore>) -> Self {
        WalStores::one(store)
    }
}

impl<T: ObjectStore> From<Arc<T>> for WalStores {
    fn from(store: Arc<T>) -> Self {
        WalStores::one(store)
    }
}
