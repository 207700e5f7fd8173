//! Stores from URLs: `file://`, `memory://`, and `s3://`, `gs://`, `az://` under the
//! crate's features of those names; a URL naming a store and a WAL prefix in one split
//! at its last path component.

use std::sync::Arc;

use object_store::path::Path;
use object_store::ObjectStore;

use crate::config::validate_prefix;
use crate::error::{Error, Result};

/// Builds a store from a URL: `file:///absolute/dir` (with fsync; a directory that does
/// not exist yet is not created here, but by the first create under it),
/// `memory://`, and, when the crate's features of the same names are on, `s3://`,
/// `gs://` and `az://` (credentials from the environment, as object_store reads them).
/// A path after the bucket becomes a key prefix of the returned store.
pub fn store_from_url(url: &str) -> Result<Arc<dyn ObjectStore>> {
    let invalid = |reason: String| Error::InvalidUrl {
        url: url.to_string(),
        reason,
    };
    let parsed = url::Url::parse(url).map_err(|e| invalid(e.to_string()))?;
    match parsed.scheme() {
        "file" => {
            let dir = parsed
                .to_file_path()
                .map_err(|_| invalid("not an absolute local path".into()))?;
            local_store(&dir).map_err(|e| invalid(e.to_string()))
        }
        "memory" => Ok(Arc::new(object_store::memory::InMemory::new())),
        scheme => cloud_store(scheme, &parsed).map_err(invalid),
    }
}

/// A local directory as a store, with fsync. The directory is not created: the store is
/// rooted at its nearest existing ancestor, with the missing components as a key prefix,
/// so a typo in a URL leaves nothing behind (an open as the writer then finds no WAL and,
/// unless `create_if_missing`, fails naming the location), and the first create makes
/// the directories it needs.
fn local_store(dir: &std::path::Path) -> std::result::Result<Arc<dyn ObjectStore>, String> {
    let mut root = dir;
    let mut missing = Vec::new();
    while !root.exists() {
        let (Some(name), Some(parent)) = (root.file_name(), root.parent()) else {
            return Err(format!("no existing ancestor of {}", dir.display()));
        };
        missing.push(name.to_string_lossy().into_owned());
        root = parent;
    }
    let store = object_store::local::LocalFileSystem::new_with_prefix(root)
        .map_err(|e| e.to_string())?
        .with_fsync(true);
    if missing.is_empty() {
        return Ok(Arc::new(store));
    }
    missing.reverse();
    let prefix = Path::parse(missing.join("/")).map_err(|e| e.to_string())?;
    Ok(Arc::new(object_store::prefix::PrefixStore::new(
        store, prefix,
    )))
}

/// Splits a URL that names a store and a WAL prefix in one into the store's URL (what
/// [`store_from_url`] takes) and the prefix: the prefix is the URL's last path component.
///
/// `s3://bucket/path/prefix` gives `s3://bucket/path` and `prefix`; `file:///dir/prefix`
/// gives `file:///dir` and `prefix`; `memory:///prefix` gives `memory:///` and `prefix`.
/// Either way the WAL's keys are `<path>/<prefix>/<sequence>.wal` from the bucket's (or
/// the filesystem's) root. A URL without a path component after the bucket, one ending
/// in `/`, one with a query or fragment, or one whose prefix is percent-encoded is
/// refused with [`Error::InvalidUrl`]. Nothing is built or contacted: the scheme is
/// checked when the store is built.
pub fn split_store_url(url: &str) -> Result<(String, String)> {
    let invalid = |reason: &str| Error::InvalidUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let mut parsed = url::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid("a store URL takes no query or fragment"));
    }
    let path = parsed.path().to_string();
    if path.ends_with('/') {
        return Err(invalid(
            "it ends with '/': the last path component is the WAL prefix",
        ));
    }
    let Some((store_path, prefix)) = path.rsplit_once('/') else {
        return Err(invalid(
            "no path: the last path component is the WAL prefix",
        ));
    };
    if prefix.contains('%') {
        return Err(invalid(
            "the WAL prefix is percent-encoded; name it plainly",
        ));
    }
    validate_prefix(prefix).map_err(|e| invalid(&e.to_string()))?;
    let prefix = prefix.to_string();
    parsed.set_path(if store_path.is_empty() {
        "/"
    } else {
        store_path
    });
    Ok((parsed.to_string(), prefix))
}

/// Builds the store a URL names and returns it with the WAL prefix: the URL is split by
/// [`split_store_url`] and the store built by [`store_from_url`].
pub fn store_and_prefix_from_url(url: &str) -> Result<(Arc<dyn ObjectStore>, String)> {
    let (store_url, prefix) = split_store_url(url)?;
    Ok((store_from_url(&store_url)?, prefix))
}
/// The S3 builder of [`store_from_url`]: the environment's settings (`AWS_*`), the URL,
/// and a CRC64NVME checksum on every upload unless `AWS_CHECKSUM_ALGORITHM` names one
/// (`sha256` or `crc64nvme`). S3 checks the checksum against the bytes it received and
/// refuses a body damaged in transit; the WAL retries such a refused create with the
/// identical bytes (an unknown outcome), so a flipped bit is never stored.
#[cfg(feature = "aws")]
pub fn s3_builder(url: &url::Url) -> object_store::aws::AmazonS3Builder {
    let builder = object_store::aws::AmazonS3Builder::from_env().with_url(url.as_str());
    if std::env::var_os("AWS_CHECKSUM_ALGORITHM").is_some() {
        return builder;
    }
    builder.with_checksum_algorithm(object_store::aws::Checksum::CRC64NVME)
}

#[allow(unused_variables, unreachable_code, unreachable_patterns)]
fn cloud_store(scheme: &str, url: &url::Url) -> std::result::Result<Arc<dyn ObjectStore>, String> {
    let store: Arc<dyn ObjectStore> = match scheme {
        #[cfg(feature = "aws")]
        "s3" | "s3a" => Arc::new(s3_builder(url).build().map_err(|e| e.to_string())?),
        #[cfg(feature = "gcp")]
        "gs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .build()
                .map_err(|e| e.to_string())?,
        ),
        #[cfg(feature = "azure")]
        "az" | "azure" | "abfs" | "abfss" => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .build()
                .map_err(|e| e.to_string())?,
        ),
        "s3" | "s3a" | "gs" | "az" | "azure" | "abfs" | "abfss" => {
            return Err(format!(
                "scheme {scheme}:// needs the crate built with its feature (aws, gcp or azure)"
            ))
        }
        other => return Err(format!("unsupported scheme {other}://")),
    };
    let path = url.path().trim_matches('/');
    if path.is_empty() {
        Ok(store)
    } else {
        let prefix = Path::parse(path).map_err(|e| e.to_string())?;
        Ok(Arc::new(object_store::prefix::PrefixStore::new(
            store, prefix,
        )))
    }
}
