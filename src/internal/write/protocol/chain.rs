//! What the write protocol needs of the chain ([`Chain`]): the floor the next object
//! carries, the commit of an acknowledged object, and the control region's pin; and the
//! one implementation both writers use, over the catalog shared with reads and the
//! WAL's retention ([`SharedChain`]). Kept apart so the protocol's rules read without
//! the locks.

use super::*;

/// The catalog and the floor bookkeeping, as the protocol needs them.
pub trait Chain {
    /// The floor the next object carries, given the lowest sequence not yet committed;
    /// never decreasing.
    fn floor_for(&mut self, lowest_uncommitted: u64) -> u64;
    /// Puts an acknowledged object on the chain: the objects now live, or the error that
    /// ends the epoch (the object does not fit the chain).
    fn commit(&mut self, sealed: &SealedObject) -> Result<usize>;
    /// An object carrying `floor` was acknowledged: `Some(floor)` when the acknowledged
    /// floor rose, to be published.
    fn acknowledge_floor(&mut self, floor: u64) -> Option<u64>;
    /// The largest id of `region` on the chain.
    fn last_entry_id(&self, region: u64) -> Option<u64>;
    /// Whether the control region's last snapshot alone holds the floor far enough below
    /// `lowest_uncommitted` that it should be copied forward
    /// ([`Retention::control_holds_floor`]).
    fn control_holds_floor(&self, lowest_uncommitted: u64) -> bool;
    /// The control region pins nothing any more ([`Retention::unpin_control`]).
    fn unpin_control(&mut self);
}

/// [`Chain`] over the catalog shared with reads and the WAL's one [`Retention`].
#[derive(Debug, Clone)]
pub struct SharedChain {
    /// The catalog readers read.
    pub catalog: Arc<RwLock<Catalog>>,
    /// The watermarks and floors.
    pub retention: Arc<Mutex<Retention>>,
}

impl SharedChain {
    pub(super) fn retention(&self) -> std::sync::MutexGuard<'_, Retention> {
        self.retention.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Chain for SharedChain {
    fn floor_for(&mut self, lowest_uncommitted: u64) -> u64 {
        self.retention().floor_for(lowest_uncommitted)
    }

    fn commit(&mut self, sealed: &SealedObject) -> Result<usize> {
        let object = sealed.encoded().map_err(|e| Error::EncodeFailed {
            what: format!("object {}", sealed.sequence()),
            reason: e.to_string(),
        })?;
        let live = {
            let mut catalog = self.catalog.write().unwrap_or_else(|p| p.into_inner());
            catalog.commit(object)?;
            catalog.object_count()
        };
        self.retention()
            .committed(sealed.sequence(), object.records());
        Ok(live)
    }

    fn acknowledge_floor(&mut self, floor: u64) -> Option<u64> {
        self.retention().acknowledged(floor)
    }

    fn last_entry_id(&self, region: u64) -> Option<u64> {
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner());
        catalog.last_entry_id(region)
    }

    fn control_holds_floor(&self, lowest_uncommitted: u64) -> bool {
        self.retention().control_holds_floor(lowest_uncommitted)
    }

    fn unpin_control(&mut self) {
        self.retention().unpin_control();
    }
}
