//! Tasks the WAL's actors spawn end with them: each is held by an [`AbortOnDrop`].

/// A task aborted when this is dropped: the state of an actor that owns a task (the
/// open here, an upload, a reclaim pass), so the task ends however the actor does
/// (stopped, or killed with its supervisor, which skips `post_stop`).
pub struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
