//! What the requests a run made would cost on a real store: list prices of four stores,
//! applied to the run's request counts scaled to an hour and a month. The prices are the
//! published list prices of one region (dated below); a node's own bill depends on its
//! region and contract. Storage is not counted: a WAL that reclaims keeps little.

use serde_json::{json, Value};

/// Hours in the month the prices are quoted for (365 × 24 / 12).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// One store's request prices, in USD.
pub struct PriceTable {
    /// Short name used as the JSON key.
    pub name: &'static str,
    /// Per 1,000 PUTs (creates).
    pub put_per_1k: f64,
    /// Per 1,000 GETs.
    pub get_per_1k: f64,
    /// Per 1,000 LIST requests (pages of up to 1,000 keys).
    pub list_per_1k: f64,
    /// Per 1,000 DELETEs.
    pub delete_per_1k: f64,
    /// Per GiB uploaded (S3 Express One Zone only).
    pub upload_per_gib: f64,
    /// Per GiB downloaded (S3 Express One Zone only).
    pub retrieval_per_gib: f64,
}

/// The tables `bench` reports, as listed in docs/COSTS.md with their
/// sources and dates.
pub const TABLES: [PriceTable; 4] = [
    // S3 Standard, us-east-1: PUT/COPY/POST/LIST $0.005 per 1,000, GET $0.0004, DELETE free.
    PriceTable {
        name: "s3_standard",
        put_per_1k: 0.005,
        get_per_1k: 0.0004,
        list_per_1k: 0.005,
        delete_per_1k: 0.0,
        upload_per_gib: 0.0,
        retrieval_per_gib: 0.0,
    },
    // S3 Express One Zone, us-east-1 (prices of 10 April 2025): PUT $0.00113 per 1,000,
    // GET $0.00003, plus $0.0032 per GB uploaded and $0.0006 per GB retrieved.
    PriceTable {
        name: "s3_express_one_zone",
        put_per_1k: 0.00113,
        get_per_1k: 0.00003,
        list_per_1k: 0.00113,
        delete_per_1k: 0.0,
        upload_per_gib: 0.0032,
        retrieval_per_gib: 0.0006,
    },
    // GCS Standard, regional: class A (insert, list) $0.005 per 1,000, class B (get)
    // $0.0004, delete free.
    PriceTable {
        name: "gcs_standard",
        put_per_1k: 0.005,
        get_per_1k: 0.0004,
        list_per_1k: 0.005,
        delete_per_1k: 0.0,
        upload_per_gib: 0.0,
        retrieval_per_gib: 0.0,
    },
    // Azure Blob hot, LRS, East US: write and list $0.065 per 10,000, read $0.005 per
    // 10,000, delete free.
    PriceTable {
        name: "azure_blob_hot",
        put_per_1k: 0.0065,
        get_per_1k: 0.0005,
        list_per_1k: 0.0065,
        delete_per_1k: 0.0,
        upload_per_gib: 0.0,
        retrieval_per_gib: 0.0,
    },
];

/// A run's requests, scaled to one hour.
#[derive(Debug, Clone, Copy, Default)]
pub struct HourlyRequests {
    /// PUTs per hour.
    pub puts: f64,
    /// GETs per hour.
    pub gets: f64,
    /// LIST requests per hour: calls, plus a page for every further 1,000 keys listed.
    pub lists: f64,
    /// DELETEs per hour.
    pub deletes: f64,
    /// GiB uploaded per hour.
    pub put_gib: f64,
    /// GiB downloaded per hour.
    pub get_gib: f64,
}

/// What a run counted, for [`HourlyRequests::from_run`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RunCounts {
    /// PUTs.
    pub puts: u64,
    /// GETs.
    pub gets: u64,
    /// LIST calls.
    pub lists: u64,
    /// Keys the LIST calls returned.
    pub listed_keys: u64,
    /// DELETEs.
    pub deletes: u64,
    /// Bytes sent by PUTs.
    pub put_bytes: u64,
    /// Bytes returned by GETs.
    pub get_bytes: u64,
}

impl HourlyRequests {
    /// `counts` over `seconds` of run, scaled to an hour.
    pub fn from_run(counts: RunCounts, seconds: f64) -> Self {
        let per_hour = if seconds > 0.0 { 3600.0 / seconds } else { 0.0 };
        let pages = counts.lists + counts.listed_keys.saturating_sub(counts.lists) / 1000;
        const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
        HourlyRequests {
            puts: counts.puts as f64 * per_hour,
            gets: counts.gets as f64 * per_hour,
            lists: pages as f64 * per_hour,
            deletes: counts.deletes as f64 * per_hour,
            put_gib: counts.put_bytes as f64 / GIB * per_hour,
            get_gib: counts.get_bytes as f64 / GIB * per_hour,
        }
    }

    /// USD per hour under `table`.
    pub fn usd_per_hour(&self, table: &PriceTable) -> f64 {
        (self.puts * table.put_per_1k
            + self.gets * table.get_per_1k
            + self.lists * table.list_per_1k
            + self.deletes * table.delete_per_1k)
            / 1000.0
            + self.put_gib * table.upload_per_gib
            + self.get_gib * table.retrieval_per_gib
    }

    /// The JSON fields a run line gets: `requests_per_hour` by kind and
    /// `usd_per_month` by price table.
    pub fn fields(&self) -> (Value, Value) {
        let requests = json!({
            "put": self.puts.round(),
            "get": self.gets.round(),
            "list": self.lists.round(),
            "delete": self.deletes.round(),
        });
        let mut usd = serde_json::Map::new();
        for table in &TABLES {
            let month = self.usd_per_hour(table) * HOURS_PER_MONTH;
            usd.insert(table.name.into(), json!((month * 100.0).round() / 100.0));
        }
        (requests, Value::Object(usd))
    }
}
