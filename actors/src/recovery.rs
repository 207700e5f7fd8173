//! The recovery actor: runs the open (listing, chain choice, claims, opening object) off
//! the supervisor's mailbox and reports the result to it, then stops.

use object_store_wal::io::WalIo;
use object_store_wal::open::open_instance_with;
use object_store_wal::{Config, CreateClock, Error};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info_span, Instrument};

use crate::messages::{InternalMsg, WalMsg};

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
}

/// The recovery actor.
pub struct RecoveryActor;

impl Actor for RecoveryActor {
    type Msg = ();
    type State = tokio::task::JoinHandle<()>;
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
                // silence that would leave the supervisor waiting.
                let (io, config, clock) =
                    (args.io.clone(), args.config.clone(), args.clock.clone());
                let opening =
                    tokio::spawn(
                        async move { open_instance_with(&io, &config, clock.as_ref()).await },
                    );
                let result = match opening.await {
                    Ok(result) => result,
                    Err(e) => Err(Error::OpenPanicked {
                        reason: e.to_string(),
                    }),
                };
                let _ = args
                    .supervisor
                    .cast(InternalMsg::Recovered(Box::new(result)).into());
                myself.stop(None);
            }
            .instrument(span),
        );
        Ok(task)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        task: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stopped before it finished (the WAL is stopping). This aborts the outer task
        // only: the open itself runs in a task of its own (to catch its panic), which
        // goes on to its end and may still write claims and an opening object.
        task.abort();
        Ok(())
    }
}
