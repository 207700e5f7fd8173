//! [`DownStore`]: a store that can be taken down (every request hangs, as a zone that
//! is gone: no error, no answer) and brought back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ObjectMeta, ObjectStore, PutOptions, PutPayload, PutResult,
};

use super::forward::{Hooks, Wrapper};

/// A store that can be taken down and brought back ([`DownHooks::set_down`]): while
/// down, every request (PUT, GET, LIST, DELETE) hangs until its sender drops it.
pub type DownStore = Wrapper<DownHooks>;

/// The switch of a [`DownStore`] and the requests it met while down.
#[derive(Debug, Default)]
pub struct DownHooks {
    down: AtomicBool,
    hung: AtomicU64,
}

impl DownHooks {
    /// Wraps `inner`, up.
    pub fn wrap(inner: Arc<dyn ObjectStore>) -> Arc<DownStore> {
        Wrapper::wrap(inner, DownHooks::default())
    }

    /// Takes the store down (`true`) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Requests that arrived while the store was down (each hung).
    pub fn hung(&self) -> u64 {
        self.hung.load(Ordering::SeqCst)
    }

    /// Whether the store is down now.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    fn hangs(&self) -> bool {
        let down = self.down.load(Ordering::SeqCst);
        if down {
            self.hung.fetch_add(1, Ordering::SeqCst);
        }
        down
    }

    fn hang_list(&self) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        stream::pending().boxed()
    }
}

#[async_trait]
impl Hooks for DownHooks {
    const NAME: &'static str = "Down";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if self.hangs() {
            futures::future::pending::<()>().await;
        }
        inner.put_opts(location, payload, opts).await
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if self.hangs() {
            futures::future::pending::<()>().await;
        }
        inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        inner: &Arc<dyn ObjectStore>,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        if self.hangs() {
            return stream::pending().boxed();
        }
        inner.delete_stream(locations)
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if self.hangs() {
            return self.hang_list();
        }
        inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if self.hangs() {
            return self.hang_list();
        }
        inner.list_with_offset(prefix, offset)
    }
}
