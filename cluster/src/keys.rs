//! The run's key space in etcd, under `/osw/<run>/`:
//!
//! | key | value | written by |
//! |---|---|---|
//! | `nodes/<name>` | [`NodeRecord`]: prefix, RPC address | the node, bound to its lease: gone when the lease expires |
//! | `coordinator` (election name) | the instance's id | etcd's election API (a key under it per candidate) |
//! | `leaders/<key>` | when that leader was elected | each coordinator as it wins |
//! | `routes/<region>` | [`Route`]: owner, prefix, address, tenure start, version | the leader, once the owner's acquire answered |
//! | `history/<region>` | the region's [`Piece`]s in order | the leader, in the same transaction as the route |
//! | `failovers/<name>` | [`FailoverRecord`]: state, times | the leader, at detection, fence, last route |
//! | `archives/<region>` | [`ArchiveRecord`]: how many of the history's first pieces are in archive objects, and those objects | the leader, after each flush |
//! | `moves/<region>` | a move under way: source and target | the leader, before the source's release; deleted with the route's switch |
//!
//! Every write of the leader's is a transaction guarded by its election key's create
//! revision, so a deposed leader (its lease expired, a new one elected) writes nothing.
//! Routes and history live in one transaction per region: the checker's history is
//! exactly the routes the frontends followed.

use serde::{Deserialize, Serialize};

/// The key names of one run.
#[derive(Debug, Clone)]
pub struct Keys {
    root: String,
}

impl Keys {
    /// The key space of run `run_id`.
    pub fn new(run_id: &str) -> Self {
        Keys {
            root: format!("/osw/{run_id}/"),
        }
    }

    /// Everything of the run (a watch on it sees every change).
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The live nodes' keys.
    pub fn nodes(&self) -> String {
        format!("{}nodes/", self.root)
    }

    /// Node `name`'s key.
    pub fn node(&self, name: &str) -> String {
        format!("{}{name}", self.nodes())
    }

    /// The routes' keys.
    pub fn routes(&self) -> String {
        format!("{}routes/", self.root)
    }

    /// Region `region`'s route.
    pub fn route(&self, region: u64) -> String {
        format!("{}{region:06}", self.routes())
    }

    /// The histories' keys.
    pub fn histories(&self) -> String {
        format!("{}history/", self.root)
    }

    /// Region `region`'s history.
    pub fn history(&self, region: u64) -> String {
        format!("{}{region:06}", self.histories())
    }

    /// The failover records' keys.
    pub fn failovers(&self) -> String {
        format!("{}failovers/", self.root)
    }

    /// The failover record of node `name`'s prefix.
    pub fn failover(&self, name: &str) -> String {
        format!("{}{name}", self.failovers())
    }

    /// The move intents' keys.
    pub fn moves(&self) -> String {
        format!("{}moves/", self.root)
    }

    /// Region `region`'s move intent.
    pub fn move_intent(&self, region: u64) -> String {
        format!("{}{region:06}", self.moves())
    }

    /// The archive records' keys.
    pub fn archives(&self) -> String {
        format!("{}archives/", self.root)
    }

    /// Region `region`'s archive record.
    pub fn archive(&self, region: u64) -> String {
        format!("{}{region:06}", self.archives())
    }

    /// The coordinators' election name.
    pub fn election(&self) -> String {
        format!("{}coordinator", self.root)
    }

    /// The elected leaders' keys.
    pub fn leaders(&self) -> String {
        format!("{}leaders/", self.root)
    }
}

/// A live node: what `nodes/<name>` holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeRecord {
    /// `node-<slot>-<generation>`.
    pub name: String,
    /// Its WAL's prefix in the bucket: `<run>/<name>`.
    pub prefix: String,
    /// Where it serves RPC.
    pub addr: String,
    /// Its slot (the process the driver restarts).
    pub slot: u64,
}

/// Where a region is served: what `routes/<region>` holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Route {
    /// The owner's name.
    pub name: String,
    /// The owner's prefix.
    pub prefix: String,
    /// The owner's RPC address.
    pub addr: String,
    /// The owner's tenure holds ids above this (`None`: from id 0).
    pub after: Option<u64>,
    /// Bumped at every switch.
    pub version: u64,
}

impl Route {
    /// The first id the owner's tenure can hold: an append sent to it now lands at or
    /// above it, if anywhere.
    pub fn tenure_start(&self) -> u64 {
        self.after.map_or(0, |a| a.saturating_add(1))
    }
}

/// A piece of a region's history: ids after `after` through `through` on `prefix`
/// (`through` `None`: the current owner's piece, open).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Piece {
    /// The owner's prefix.
    pub prefix: String,
    /// Ids above this (`None`: from 0).
    pub after: Option<u64>,
    /// Ids through this; `None` while open.
    pub through: Option<u64>,
    /// How the piece began: `initial`, `move` or `takeover`.
    pub kind: String,
}

/// What `archives/<region>` holds: the region's first `archived` pieces were flushed
/// into `objects` (bucket paths, in order, each a JSON list of `[id, payload]`), which
/// the checker reads before the pieces that follow.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ArchiveRecord {
    /// Pieces of the history in the archives.
    pub archived: usize,
    /// The archive objects, in order.
    pub objects: Vec<String>,
}

/// A fenced prefix's failover: what `failovers/<name>` holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FailoverRecord {
    /// The fenced node's name.
    pub name: String,
    /// Its prefix.
    pub prefix: String,
    /// `fencing`, `fenced` (frontends may read the fenced chain), `done` (every region
    /// routed to a new owner), `retired` (only the tombstone is left: its entries are
    /// in archives).
    pub state: String,
    /// When the leader saw the node's key gone (ms since the epoch).
    pub detected_ms: u64,
    /// When the fence returned.
    pub fenced_ms: Option<u64>,
    /// When the last of its regions' routes was written.
    pub done_ms: Option<u64>,
    /// Its regions taken over.
    pub regions: u64,
}

impl FailoverRecord {
    /// Whether the prefix's chain is final (fenced): a resolve may read it.
    pub fn fenced(&self) -> bool {
        self.state == "fenced" || self.state == "done"
    }
}
