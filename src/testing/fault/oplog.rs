//! The operation log of a [`FaultStore`] ([`FaultStore::record_ops`]), for the reports of
//! a failed simulation.

use std::sync::Mutex;

use object_store::path::Path;
use object_store::{PutPayload, PutResult};

use super::{CreateFault, FaultStore};
use crate::testing::lock;

/// One operation in a [`FaultStore`]'s log.
#[derive(Debug, Clone)]
pub struct OpRecord {
    /// When it happened, on tokio's clock (paused in simulations).
    pub at: tokio::time::Instant,
    /// What happened: creates and their outcome (with the fault injected, if any), late
    /// creates landing, deletes, listings (when the store took its snapshot), injected
    /// GET faults.
    pub what: String,
}

/// The operation log of a [`FaultStore`]; empty until recording starts.
#[derive(Debug, Default)]
pub(super) struct OpLog {
    records: Mutex<Option<Vec<OpRecord>>>,
}

impl OpLog {
    pub(super) fn push(&self, what: String) {
        if let Some(records) = lock(&self.records).as_mut() {
            records.push(OpRecord {
                at: tokio::time::Instant::now(),
                what,
            });
        }
    }

    fn recording(&self) -> bool {
        lock(&self.records).is_some()
    }

    pub(super) fn create(
        &self,
        key: &Path,
        fault: Option<CreateFault>,
        result: &object_store::Result<PutResult>,
    ) {
        if !self.recording() {
            return;
        }
        let outcome = match result {
            Ok(_) => "created".to_string(),
            Err(object_store::Error::AlreadyExists { .. }) => "already exists".to_string(),
            Err(e) => format!("error: {e}"),
        };
        let fault = match fault {
            None => String::new(),
            Some(CreateFault::ApplyThenError) => " [fault: applied, then an error]".into(),
            Some(CreateFault::ErrorUnapplied) => " [fault: not applied]".into(),
            Some(CreateFault::LandLate(n)) => format!(" [fault: lands late, after {n} ops]"),
            Some(CreateFault::Denied) => " [fault: access denied]".into(),
        };
        self.push(format!("create {key}: {outcome}{fault}"));
    }

    pub(super) fn sent(&self, key: &Path, payload: &PutPayload) {
        if !self.recording() {
            return;
        }
        let head: Vec<u8> = payload
            .iter()
            .flat_map(|chunk| chunk.iter().copied())
            .take(crate::format::HEADER_LEN_V3)
            .collect();
        let what = match crate::format::decode_header(&head) {
            Ok(h) => format!(
                "epoch {}, link ({}, {}), floor {}{}",
                h.epoch,
                h.link.sequence,
                h.link.epoch,
                h.floor,
                if h.claim { ", claim" } else { "" }
            ),
            Err(_) => "not a WAL object".into(),
        };
        self.push(format!("create {key} sent ({what})"));
    }

    pub(super) fn late(&self, key: &Path, result: &object_store::Result<PutResult>) {
        if self.recording() {
            let outcome = match result {
                Ok(_) => "landed".to_string(),
                Err(object_store::Error::AlreadyExists { .. }) => "key taken, dropped".into(),
                Err(e) => format!("error: {e}"),
            };
            self.push(format!("late create {key}: {outcome}"));
        }
    }
}

impl FaultStore {
    /// Starts (`true`) or stops and forgets (`false`) recording an operation log:
    /// creates and their outcome, late creates landing, deletes, listings and injected
    /// GET faults, each with its time on tokio's clock ([`op_log`](Self::op_log)).
    pub fn record_ops(&self, on: bool) {
        *lock(&self.hooks.log.records) = on.then(Vec::new);
    }

    /// The operations recorded so far, in order.
    pub fn op_log(&self) -> Vec<OpRecord> {
        lock(&self.hooks.log.records).clone().unwrap_or_default()
    }
}
