//! The one place that forwards the whole [`ObjectStore`] trait: [`Wrapper`] implements it
//! once, for every [`Hooks`], and each hook forwards to the wrapped store unless the
//! wrapper overrides it.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// What a wrapper adds to the requests of the store it wraps ([`Wrapper`] calls these).
///
/// Each hook is handed the wrapped store, `inner`, and forwards the request to it
/// unchanged by default: a wrapper overrides only the requests it counts, delays or
/// breaks. `get_ranges` and `rename_opts` have no hook: they keep `object_store`'s
/// default methods, which go through the wrapper's own GETs, copies and deletes, so
/// each range read and each delete meets the wrapper's behaviour.
#[async_trait]
pub trait Hooks: fmt::Debug + Send + Sync + 'static {
    /// The wrapper's name, as its `Display` shows it: `NAME(inner)`.
    const NAME: &'static str;

    /// A PUT: a conditional create (`PutMode::Create`) or an overwrite.
    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        inner.put_opts(location, payload, opts).await
    }

    /// The start of a multipart upload.
    async fn put_multipart_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        inner.put_multipart_opts(location, opts).await
    }

    /// A GET, of a whole object or of a range.
    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> Result<GetResult> {
        inner.get_opts(location, options).await
    }

    /// Deletes, one per location of the stream.
    fn delete_stream(
        &self,
        inner: &Arc<dyn ObjectStore>,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        inner.delete_stream(locations)
    }

    /// A LIST of every key under `prefix`.
    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        inner.list(prefix)
    }

    /// A LIST of the keys under `prefix` after `offset`.
    fn list_with_offset(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        inner.list_with_offset(prefix, offset)
    }

    /// A LIST of one level under `prefix`.
    async fn list_with_delimiter(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> Result<ListResult> {
        inner.list_with_delimiter(prefix).await
    }

    /// A copy within the store.
    async fn copy_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> Result<()> {
        inner.copy_opts(from, to, options).await
    }
}

/// A store that wraps any other, `Arc<dyn ObjectStore>`, and adds the behaviour of its
/// [`Hooks`] (the way `object_store`'s `ThrottledStore` and `LimitStore` wrap a store).
/// A wrapper is itself an `ObjectStore`, so wrappers stack: latency over counting over
/// memory is `with_latency(CountingStore::new(memory), ..)`.
pub struct Wrapper<H> {
    pub(super) inner: Arc<dyn ObjectStore>,
    pub(super) hooks: H,
}

impl<H: Hooks> Wrapper<H> {
    /// Wraps `inner` with `hooks`.
    pub fn wrap(inner: Arc<dyn ObjectStore>, hooks: H) -> Arc<Self> {
        Arc::new(Wrapper { inner, hooks })
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }

    /// The wrapper's hooks (and the state they keep).
    pub fn hooks(&self) -> &H {
        &self.hooks
    }
}

impl<H: Hooks> fmt::Debug for Wrapper<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(H::NAME)
            .field("inner", &self.inner)
            .field("hooks", &self.hooks)
            .finish()
    }
}

impl<H: Hooks> fmt::Display for Wrapper<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", H::NAME, self.inner)
    }
}

#[async_trait]
impl<H: Hooks> ObjectStore for Wrapper<H> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.hooks
            .put_opts(&self.inner, location, payload, opts)
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.hooks
            .put_multipart_opts(&self.inner, location, opts)
            .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.hooks.get_opts(&self.inner, location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.hooks.delete_stream(&self.inner, locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.hooks.list(&self.inner, prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.hooks.list_with_offset(&self.inner, prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.hooks.list_with_delimiter(&self.inner, prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.hooks.copy_opts(&self.inner, from, to, options).await
    }
}
