//! A process's mirror of the run's key space: a get of everything under the run's root,
//! then a watch from the revision after it, applied in order. Frontends follow routes
//! and failover records through it; the coordinator follows the live nodes.
//!
//! A broken watch (etcd restarted, a compaction) starts over with a fresh get, so the
//! view converges whatever happened meanwhile. Readers wait on [`View::changed`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::keys::{FailoverRecord, Keys, NodeRecord, Route};

/// What the view holds.
#[derive(Debug, Default, Clone)]
pub struct State {
    /// Live nodes by name.
    pub nodes: HashMap<String, NodeRecord>,
    /// Routes by region.
    pub routes: HashMap<u64, Route>,
    /// Failover records by node name.
    pub failovers: HashMap<String, FailoverRecord>,
}

/// A mirror of the key space, kept up to date by a task that runs as long as the
/// process.
#[derive(Clone)]
pub struct View {
    state: Arc<Mutex<State>>,
    changed: watch::Sender<u64>,
}

fn parse<T: DeserializeOwned>(value: &[u8]) -> Option<T> {
    serde_json::from_slice(value).ok()
}

impl View {
    /// Starts following run `keys` on `client`; answers once the first get is applied.
    pub async fn start(client: etcd_client::Client, keys: Keys) -> anyhow::Result<View> {
        let view = View {
            state: Arc::default(),
            changed: watch::channel(0).0,
        };
        let mut client = client;
        let revision = view.load(&mut client, &keys).await?;
        let follower = view.clone();
        tokio::spawn(async move {
            let mut revision = revision;
            loop {
                match follower.follow(&mut client, &keys, revision).await {
                    Ok(()) => {}
                    Err(e) => eprintln!("view: watch ended: {e}"),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                match follower.load(&mut client, &keys).await {
                    Ok(r) => revision = r,
                    Err(e) => eprintln!("view: reload failed: {e}"),
                }
            }
        });
        Ok(view)
    }

    /// Replaces the state with a fresh get; answers its revision.
    async fn load(&self, client: &mut etcd_client::Client, keys: &Keys) -> anyhow::Result<i64> {
        let resp = client
            .get(keys.root(), Some(GetOptions::new().with_prefix()))
            .await?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let mut state = State::default();
        for kv in resp.kvs() {
            apply(&mut state, keys, kv.key(), Some(kv.value()));
        }
        if let Ok(mut s) = self.state.lock() {
            *s = state;
        }
        self.changed.send_modify(|v| *v += 1);
        Ok(revision)
    }

    /// Applies the watch's events from `revision + 1` until it breaks.
    async fn follow(
        &self,
        client: &mut etcd_client::Client,
        keys: &Keys,
        revision: i64,
    ) -> anyhow::Result<()> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision.saturating_add(1));
        let mut stream = client.watch(keys.root(), Some(options)).await?;
        while let Some(resp) = stream.message().await? {
            if resp.canceled() {
                anyhow::bail!("canceled: {}", resp.cancel_reason());
            }
            if let Ok(mut state) = self.state.lock() {
                for event in resp.events() {
                    let Some(kv) = event.kv() else { continue };
                    let value = match event.event_type() {
                        EventType::Put => Some(kv.value()),
                        EventType::Delete => None,
                    };
                    apply(&mut state, keys, kv.key(), value);
                }
            }
            self.changed.send_modify(|v| *v += 1);
        }
        Ok(())
    }

    /// Region `region`'s route.
    pub fn route(&self, region: u64) -> Option<Route> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.routes.get(&region).cloned())
    }

    /// Node `name`'s failover record.
    pub fn failover(&self, name: &str) -> Option<FailoverRecord> {
        self.state
            .lock()
            .ok()
            .and_then(|s| s.failovers.get(name).cloned())
    }

    /// Every failover record.
    pub fn failovers(&self) -> Vec<FailoverRecord> {
        self.state
            .lock()
            .map(|s| s.failovers.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The live nodes.
    pub fn nodes(&self) -> HashMap<String, NodeRecord> {
        self.state
            .lock()
            .map(|s| s.nodes.clone())
            .unwrap_or_default()
    }

    /// A receiver that sees every change.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waits until `done` holds of the state, or `within` passed; answers whether it
    /// held.
    pub async fn wait_for(&self, within: Duration, mut done: impl FnMut(&State) -> bool) -> bool {
        let mut rx = self.changed();
        let wait = async {
            loop {
                let ok = self.state.lock().map(|s| done(&s)).unwrap_or(false);
                if ok {
                    return true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(within, wait).await.unwrap_or(false)
    }
}

/// Applies one key's new value (`None`: deleted) to `state`.
fn apply(state: &mut State, keys: &Keys, key: &[u8], value: Option<&[u8]>) {
    let Ok(key) = std::str::from_utf8(key) else {
        return;
    };
    if let Some(name) = key.strip_prefix(&keys.nodes()) {
        match value.and_then(parse::<NodeRecord>) {
            Some(record) => {
                state.nodes.insert(name.to_string(), record);
            }
            None => {
                state.nodes.remove(name);
            }
        }
    } else if let Some(region) = key.strip_prefix(&keys.routes()) {
        let Ok(region) = region.parse::<u64>() else {
            return;
        };
        match value.and_then(parse::<Route>) {
            Some(route) => {
                state.routes.insert(region, route);
            }
            None => {
                state.routes.remove(&region);
            }
        }
    } else if let Some(name) = key.strip_prefix(&keys.failovers()) {
        match value.and_then(parse::<FailoverRecord>) {
            Some(record) => {
                state.failovers.insert(name.to_string(), record);
            }
            None => {
                state.failovers.remove(name);
            }
        }
    }
}
