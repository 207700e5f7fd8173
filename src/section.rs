//! The configuration file (feature `serde`): the `Deserialize` impls of [`Config`] and
//! [`WalSection`]; the file form they read is described in the [`config`](crate::config)
//! module docs. Apart from `config` because a `WalSection` builds the stores its URLs
//! name, and `config` sits below the stores.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytesize::ByteSize;
use object_store::ObjectStore;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::config::{
    Config, CorruptSegmentPolicy, FirstRetryWait, HedgeAfter, RecoveryMode, RetryPolicy,
};
use crate::error::{Error, Result};
use crate::internal::store::stores::WalStores;
use crate::transform::{Cipher, Compression, Keys, StaticKeys};

/// Every field of a `[wal]` section, none required: the prefix comes as `prefix` (a
/// `Config`) or as the end of `url` (a `WalSection`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    prefix: Option<String>,
    url: Option<String>,
    urls: Option<Vec<String>>,
    #[serde(default, with = "humantime_serde")]
    min_object_interval: Option<Duration>,
    max_batch_bytes: Option<ByteSize>,
    max_entry_bytes: Option<ByteSize>,
    max_in_flight: Option<usize>,
    max_pending_bytes: Option<ByteSize>,
    recovery_concurrency: Option<usize>,
    whole_read_threshold: Option<ByteSize>,
    read_ahead: Option<usize>,
    retry: Option<RetryPolicy>,
    open_attempts: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    max_create_duration: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    reclaim_grace: Option<Duration>,
    corrupt_segment_policy: Option<CorruptSegmentPolicy>,
    hedge_after: Option<HedgeAfter>,
    #[serde(default, with = "humantime_serde")]
    request_timeout: Option<Duration>,
    replay_concurrency: Option<usize>,
    replay_budget_bytes: Option<ByteSize>,
    create_if_missing: Option<bool>,
    recovery_mode: Option<RecoveryMode>,
    compression: Option<Compression>,
    encryption_keys: Option<String>,
    cipher: Option<Cipher>,
    segment_cache_bytes: Option<ByteSize>,
    segment_cache_region_bytes: Option<ByteSize>,
    max_readers: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    source_idle_close: Option<Duration>,
}

impl Fields {
    /// The validated config under `prefix`, each field left out at its default. Every
    /// field of `Config` is named here, so a new one does not compile until the file
    /// form has it too.
    fn into_config(self, prefix: String) -> Result<Config> {
        let d = Config::new(prefix);
        let encryption_keys = match self.encryption_keys.as_deref() {
            None => None,
            Some(source) => Some(Keys(Arc::new(StaticKeys::from_source(source).map_err(
                |e| Error::Config {
                    field: "encryption_keys",
                    reason: e.to_string(),
                },
            )?))),
        };
        let size = |v: Option<ByteSize>, default: u64| v.map_or(default, |b| b.as_u64());
        let config = Config {
            min_object_interval: self.min_object_interval.unwrap_or(d.min_object_interval),
            max_batch_bytes: size(self.max_batch_bytes, d.max_batch_bytes),
            max_entry_bytes: size(self.max_entry_bytes, d.max_entry_bytes),
            max_in_flight: self.max_in_flight.unwrap_or(d.max_in_flight),
            max_pending_bytes: size(self.max_pending_bytes, d.max_pending_bytes),
            recovery_concurrency: self.recovery_concurrency.unwrap_or(d.recovery_concurrency),
            whole_read_threshold: size(self.whole_read_threshold, d.whole_read_threshold),
            read_ahead: self.read_ahead.unwrap_or(d.read_ahead),
            retry: self.retry.unwrap_or(d.retry),
            open_attempts: self.open_attempts.unwrap_or(d.open_attempts),
            max_create_duration: self.max_create_duration.unwrap_or(d.max_create_duration),
            reclaim_grace: self.reclaim_grace.unwrap_or(d.reclaim_grace),
            corrupt_segment_policy: self
                .corrupt_segment_policy
                .unwrap_or(d.corrupt_segment_policy),
            hedge_after: self.hedge_after.unwrap_or(d.hedge_after),
            request_timeout: self.request_timeout.unwrap_or(d.request_timeout),
            replay_concurrency: self.replay_concurrency.unwrap_or(d.replay_concurrency),
            replay_budget_bytes: size(self.replay_budget_bytes, d.replay_budget_bytes),
            create_if_missing: self.create_if_missing.unwrap_or(d.create_if_missing),
            recovery_mode: self.recovery_mode.unwrap_or(d.recovery_mode),
            compression: self.compression.unwrap_or(d.compression),
            encryption_keys,
            cipher: self.cipher.unwrap_or(d.cipher),
            segment_cache_bytes: size(self.segment_cache_bytes, d.segment_cache_bytes),
            segment_cache_region_bytes: size(
                self.segment_cache_region_bytes,
                d.segment_cache_region_bytes,
            ),
            max_readers: self.max_readers.unwrap_or(d.max_readers),
            source_idle_close: self.source_idle_close.unwrap_or(d.source_idle_close),
            prefix: d.prefix,
        };
        config.validate()?;
        Ok(config)
    }
}

/// Reads the knobs and `prefix`; a `url` is refused (a `Config` holds no store: read a
/// [`WalSection`] for that). Validated: see the [`config`](crate::config) module docs.
impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let mut fields = Fields::deserialize(d)?;
        if fields.url.is_some() || fields.urls.is_some() {
            return Err(de::Error::custom(
                "`url` and `urls` name stores, which a Config does not hold: give `prefix`, or read the section as a WalSection",
            ));
        }
        let prefix = fields
            .prefix
            .take()
            .ok_or_else(|| de::Error::missing_field("prefix"))?;
        fields.into_config(prefix).map_err(de::Error::custom)
    }
}

/// A node's `[wal]` section: where the WAL lives, as one URL (`url =
/// "s3://bucket/path/prefix"`) or, for one log over several stores, one URL per store
/// (`urls = [...]`, 3 or 5, each ending in the same prefix), and the knobs of [`Config`]
/// beside it.
///
/// ```toml
/// [wal]
/// url = "file:///var/lib/node/wal"
/// min_object_interval = "10ms"
/// max_batch_bytes = "8MiB"
/// hedge_after = "adaptive"
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WalSection {
    /// The store's URL with the prefix taken off, what
    /// [`store_from_url`](crate::store_from_url) builds (the first store's, with `urls`).
    pub store_url: String,
    /// Every store's URL with the prefix taken off: one with `url`, several with `urls`.
    pub store_urls: Vec<String>,
    /// The configuration, validated, its prefix the URL's last path component.
    pub config: Config,
}

impl WalSection {
    /// Builds the store [`store_url`](Self::store_url) names.
    pub fn store(&self) -> Result<Arc<dyn ObjectStore>> {
        crate::internal::store::url::store_from_url(&self.store_url)
    }

    /// Builds every store [`store_urls`](Self::store_urls) names: one, or several that
    /// hold one log.
    pub fn stores(&self) -> Result<WalStores> {
        let stores = self
            .store_urls
            .iter()
            .map(|u| crate::internal::store::url::store_from_url(u))
            .collect::<Result<Vec<_>>>()?;
        WalStores::quorum(stores)
    }
}

/// Reads `url` (or `urls`) and the knobs; a `prefix` is refused (the URL names it).
/// Validated: see the [`config`](crate::config) module docs.
impl<'de> Deserialize<'de> for WalSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let mut fields = Fields::deserialize(d)?;
        if fields.prefix.is_some() {
            return Err(de::Error::custom(
                "`prefix`: a [wal] section names its prefix as the last path component of `url`; give one, not both",
            ));
        }
        let urls = match (fields.url.take(), fields.urls.take()) {
            (Some(url), None) => vec![url],
            (None, Some(urls)) if urls.len() >= 3 && urls.len() % 2 == 1 => urls,
            (None, Some(urls)) => {
                return Err(de::Error::custom(format!(
                    "`urls`: {} stores; one log over several stores takes an odd number, at least 3 (one store: `url`)",
                    urls.len()
                )))
            }
            (Some(_), Some(_)) => {
                return Err(de::Error::custom("give `url` or `urls`, not both"))
            }
            (None, None) => return Err(de::Error::missing_field("url")),
        };
        let mut store_urls = Vec::with_capacity(urls.len());
        let mut prefix: Option<String> = None;
        for url in &urls {
            let (store_url, p) =
                crate::internal::store::url::split_store_url(url).map_err(de::Error::custom)?;
            match &prefix {
                Some(first) if *first != p => {
                    return Err(de::Error::custom(format!(
                        "`urls`: every store holds the WAL under the same prefix; {url} ends in {p}, not {first}"
                    )))
                }
                _ => prefix = Some(p),
            }
            store_urls.push(store_url);
        }
        let prefix = prefix.ok_or_else(|| de::Error::missing_field("url"))?;
        let config = fields.into_config(prefix).map_err(de::Error::custom)?;
        let store_url = store_urls.first().cloned().unwrap_or_default();
        Ok(WalSection {
            store_url,
            store_urls,
            config,
        })
    }
}

/// A table `{ max_attempts = 8, initial_backoff = "50ms", max_backoff = "2s",
/// first_wait = "adaptive" }` (or `"fixed"`), each key defaulting to
/// [`RetryPolicy::default`]'s. Checked with the rest by
/// [`Config::validate`].
impl<'de> Deserialize<'de> for RetryPolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Retry {
            max_attempts: Option<u32>,
            #[serde(default, with = "humantime_serde")]
            initial_backoff: Option<Duration>,
            #[serde(default, with = "humantime_serde")]
            max_backoff: Option<Duration>,
            first_wait: Option<String>,
        }
        let r = Retry::deserialize(d)?;
        let d = RetryPolicy::default();
        let first_wait = match r.first_wait.as_deref() {
            None => d.first_wait,
            Some("adaptive") => FirstRetryWait::Adaptive,
            Some("fixed") => FirstRetryWait::Fixed,
            Some(other) => {
                return Err(serde::de::Error::invalid_value(
                    serde::de::Unexpected::Str(other),
                    &"\"adaptive\" or \"fixed\"",
                ))
            }
        };
        Ok(RetryPolicy::new(
            r.max_attempts.unwrap_or(d.max_attempts),
            r.initial_backoff.unwrap_or(d.initial_backoff),
            r.max_backoff.unwrap_or(d.max_backoff),
        )
        .with_first_wait(first_wait))
    }
}

/// `"off"`, `"adaptive"`, a duration (`"25ms"`) or a table `{ percentile = 95, floor =
/// "5ms" }`: see [`HedgeAfter`]. Checked with the rest by [`Config::validate`].
impl<'de> Deserialize<'de> for HedgeAfter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(HedgeAfterVisitor)
    }
}

struct HedgeAfterVisitor;

impl<'de> Visitor<'de> for HedgeAfterVisitor {
    type Value = HedgeAfter;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "\"off\", \"adaptive\", a duration such as \"25ms\", or a table { percentile, floor }",
        )
    }

    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<HedgeAfter, E> {
        match v {
            "off" => Ok(HedgeAfter::Off),
            "adaptive" => Ok(HedgeAfter::default()),
            other => humantime_serde::re::humantime::parse_duration(other)
                .map(HedgeAfter::Fixed)
                .map_err(|e| {
                    E::custom(format!(
                        "hedge_after {other:?} is not \"off\", \"adaptive\" or a duration ({e})"
                    ))
                }),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<HedgeAfter, A::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Adaptive {
            percentile: Option<u8>,
            #[serde(default, with = "humantime_serde")]
            floor: Option<Duration>,
        }
        let a = Adaptive::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(HedgeAfter::Adaptive {
            percentile: a.percentile.unwrap_or(crate::config::ADAPTIVE_PERCENTILE),
            floor: a.floor.unwrap_or(crate::config::ADAPTIVE_FLOOR),
        })
    }
}
