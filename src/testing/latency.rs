//! [`LatencyStore`]: a fixed latency per PUT and per GET.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{GetOptions, GetResult, ObjectStore, PutOptions, PutPayload, PutResult};

use super::forward::{Hooks, Wrapper};

/// Wraps `store` with a fixed latency per PUT (creates included) and per GET, standing
/// in for a remote store. (object_store's `ThrottledStore` does this too, but panics on
/// GETs from a `LocalFileSystem`, whose results are files.)
pub fn with_latency(
    store: Arc<dyn ObjectStore>,
    put: Duration,
    get: Duration,
) -> Arc<dyn ObjectStore> {
    Wrapper::wrap(store, LatencyHooks { put, get })
}

/// Adds a fixed latency before every PUT and GET of the wrapped store
/// ([`with_latency`]).
pub type LatencyStore = Wrapper<LatencyHooks>;

/// The behaviour of a [`LatencyStore`]: a sleep on tokio's clock before each PUT and
/// each GET is sent on.
#[derive(Debug)]
pub struct LatencyHooks {
    put: Duration,
    get: Duration,
}

#[async_trait]
impl Hooks for LatencyHooks {
    const NAME: &'static str = "LatencyStore";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        tokio::time::sleep(self.put).await;
        inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        tokio::time::sleep(self.get).await;
        inner.get_opts(location, options).await
    }
}
