//! The recovery actor: runs the open (listing, chain choice, claims, opening object) off
//! the supervisor's mailbox and reports the result to it, then stops.

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use object_store_wal::internal::open::open_instance_above;
use object_store_wal::internal::read::read_open_holdings;
use object_store_wal::internal::store::objects::WalIo;
use object_store_wal::{Config, CreateClock, Error};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info_span, Instrument};

use crate::messages::{InternalMsg, WalMsg};
use crate::task::AbortOnDrop;

/// Everything recovery needs.
pub struct RecoveryArgs {
    /// Store access.
    pub io: WalIo,
    /// Configuration.
    pub config: Config,
    /// Told the open's result.
    pub supervisor: ActorRef<WalMsg>,
    /// The clock the writer measures creates on.
    pub clock: std::sync::Arc<dyn CreateClock>,
    /// The opening object goes above this sequence too: the highest whose entry ids
    /// the WAL handed out at admission (`open_instance_above`).
    pub above: u64,
    /// And above this id base: the highest of the ids handed out.
    pub above_id_base: u64,
}

/// What a panic said, as far as it can be read.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "the open panicked".to_string()
    }
}

/// The recovery actor.
pub struct RecoveryActor;

impl Actor for RecoveryActor {
    type Msg = ();
    type State = AbortOnDrop;
    type Arguments = RecoveryArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let span = info_span!("recovery", prefix = %args.io.prefix());
        let task = tokio::spawn(
            async move {
                // A panic inside the open is reported as a failed open, never as
                // silence that would leave the supervisor waiting. The open runs in
                // this task, so aborting the task ends it: an abandoned open sends
                // nothing more (a claim or an opening object of an instance already
                // replaced would fence its successor).
                let opening = open_instance_above(
                    &args.io,
                    &args.config,
                    args.clock.as_ref(),
                    args.above,
                    args.above_id_base,
                );
                // Then the chain's last control snapshot: which regions this log
                // released (the writer refuses their appends).
                let opening = async {
                    let mut opened = opening.await?;
                    let mode = args.config.recovery_mode;
                    let holdings = read_open_holdings(&args.io, mode, &mut opened.recovery).await?;
                    Ok((opened, holdings))
                };
                let result = match AssertUnwindSafe(opening).catch_unwind().await {
                    Ok(result) => result,
                    Err(panic) => Err(Error::OpenPanicked {
                        reason: panic_message(panic.as_ref()),
                    }),
                };
                let _ = args
                    .supervisor
                    .cast(InternalMsg::Recovered(Box::new(result)).into());
                myself.stop(None);
            }
            .instrument(span),
        );
        Ok(AbortOnDrop(task))
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        task: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stopped before it finished (the WAL is stopping or aborted): the open ends
        // here, at its next await, and sends nothing more.
        task.0.abort();
        Ok(())
    }
}
