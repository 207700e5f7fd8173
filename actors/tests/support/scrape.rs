//! Reading a Prometheus text exposition (what `metrics-exporter-prometheus` serves), for
//! the metrics tests (`tests/metrics.rs` here and in the core, which includes this file
//! by path).

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

/// One sample: its metric name, its labels, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The name (`wal_requests_total`, `wal_seal_to_durable_seconds_count`...).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// Every sample of an exposition; comment lines (`# HELP`, `# TYPE`) are skipped. A line
/// that does not parse fails the test, naming it.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let (series, value) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no value in {line:?}"));
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}"));
            let (name, labels) = match series.split_once('{') {
                None => (series.to_string(), BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest
                        .strip_suffix('}')
                        .unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
                    (name.to_string(), parse_labels(body, line))
                }
            };
            Sample {
                name,
                labels,
                value,
            }
        })
        .collect()
}

/// `a="x",b="y"` (the WAL's label values hold no quote, comma or backslash).
fn parse_labels(body: &str, line: &str) -> BTreeMap<String, String> {
    body.split(',')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair
                .split_once('=')
                .unwrap_or_else(|| panic!("bad label {pair:?} in {line:?}"));
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or_else(|| panic!("unquoted label {pair:?} in {line:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The samples of one WAL (its `prefix` label).
pub struct Scrape {
    samples: Vec<Sample>,
    prefix: String,
}

impl Scrape {
    /// The samples of `text` labelled with `prefix`.
    pub fn of(text: &str, prefix: &str) -> Self {
        Scrape {
            samples: parse(text),
            prefix: prefix.to_string(),
        }
    }

    /// The value of `name` with exactly these labels besides `prefix`; the test fails if
    /// the exposition lacks it.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        wanted.insert("prefix".into(), self.prefix.clone());
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == wanted)
            .collect();
        match found.as_slice() {
            [one] => one.value,
            _ => panic!(
                "expected one sample of {name} {wanted:?}, found {}",
                found.len()
            ),
        }
    }

    /// [`value`](Self::value) of a metric with only the `prefix` label, as a count.
    pub fn count(&self, name: &str) -> u64 {
        as_count(self.value(name, &[]))
    }

    /// `wal_requests_total` of one `op` and `outcome`.
    pub fn requests(&self, op: &str, outcome: &str) -> u64 {
        as_count(self.value("wal_requests_total", &[("op", op), ("outcome", outcome)]))
    }

    /// `wal_requests_total` of one `op`, summed over every outcome.
    pub fn requests_of(&self, op: &str) -> u64 {
        OUTCOMES.iter().map(|o| self.requests(op, o)).sum()
    }

    /// How many samples the histogram `name` took (its `_count`).
    pub fn samples_of(&self, histogram: &str) -> u64 {
        self.count(&format!("{histogram}_count"))
    }
}

/// Every `outcome` label of `wal_requests_total`.
pub const OUTCOMES: [&str; 5] = ["ok", "conflict", "error", "hedged", "timed_out"];

fn as_count(v: f64) -> u64 {
    assert!(v >= 0.0 && v.fract() == 0.0, "{v} is not a count");
    v as u64
}
