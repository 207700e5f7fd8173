//! [`ThrottleStore`]: a store that takes at most N PUTs a second and answers the rest
//! the way S3 answers a prefix pushed past its request rate: `503 Slow Down`, and the
//! PUT not applied.
//!
//! ## The limit
//!
//! Each class of request has a token bucket, refilled at its rate and holding at most
//! one second of it (at least one token) unless [`Throttle::burst`] says otherwise; a
//! request that finds a token takes it and goes on to the wrapped store, one that finds
//! none is refused at once, without reaching it. The classes are S3's: "PUTs" are
//! PUT, COPY, POST (a multipart upload's start) and DELETE, which S3 counts together
//! (3,500 a second per prefix, against 5,500 GET/HEAD), and "GETs" are GET, HEAD and
//! LIST. GETs are unlimited unless asked ([`Throttle::gets_per_s`]). Either limit can be
//! changed or lifted while requests run ([`ThrottleStore::set_puts_per_s`]), as a
//! store's partition splits or the load on it moves. Time is tokio's: under a paused
//! test clock the buckets refill with virtual time.
//!
//! Put the throttle *beneath* a latency wrapper (latency over throttle over the store):
//! a refused request then takes its round trip before its error comes back, as a real
//! one does, and the requests counted above it include the refused ones.
//!
//! ## What a refused request answers
//!
//! What `object_store`'s own HTTP client returns for a 503, as closely as a type outside
//! `object_store` can build it. The client retries a 5xx (and a 429) itself, with
//! backoff, up to `RetryConfig::max_retries` (10 by default) within `retry_timeout`
//! (3 minutes), whatever the request's idempotency; once its retries are spent it
//! hands the last response to the store, which maps the status: 404, 304, 412, 409, 403
//! and 401 have variants of their own, every other status, 503 and 429 included,
//! becomes [`object_store::Error::Generic`] with the store's name (`"S3"`, `"GCS"`,
//! `"MicrosoftAzure"`) and the client's `RetryError` as its source. A LIST's error is
//! wrapped once more by the store (`Error performing list request: ...`).
//!
//! `RetryError` has no public constructor (and its module is private, so no caller can
//! name it or downcast to it); [`Throttled`] stands in for it: the same `Display`, word
//! for word (`Error performing PUT <uri> in <elapsed>[, after N retries, max_retries:
//! M, retry_timeout: T ] - Server returned non-2xx status code: 503 Service
//! Unavailable: <body>`), the same source chain (its source is the status error, whose
//! text is the part after the dash), and the response body the service sends
//! ([`ThrottleReply`]: S3's `SlowDown` XML by default). A caller outside
//! `object_store` can tell a real 503 from another failure only by that text, so a
//! classifier written against this wrapper works on the real client's error too; a
//! downcast to [`Throttled`] would not, and is meant only for this crate's tests.
//!
//! By default a refusal comes back at once, `after 0 retries` (the text then omits the
//! retry part), as from a client built with `max_retries: 0`, or as if the client's
//! retries took no time. [`Throttle::client_retries`] instead plays the client's retry
//! loop in the wrapper: each retry waits the client's backoff (decorrelated jitter from
//! 100 ms, doubling up to 15 s, drawn from the seed), asks the bucket again, and goes
//! through if a token came back; the error, if none did, says how many retries and how
//! long. That is what a node with the default client sees: a create that is slow rather
//! than refused, and a 503 only after a few seconds.

use std::error::Error as StdError;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use tokio::time::Instant;

use super::forward::{Hooks, Wrapper};
use super::lock;
use super::rng::SplitMix64;

/// Wraps `store` with the limits of `throttle`.
///
/// ```text
/// let throttle = with_throttle(memory, Throttle::puts_per_s(50.0));
/// let store = with_latency(throttle.clone(), put, get);
/// // ... later, the partition split:
/// throttle.set_puts_per_s(None);
/// ```
pub fn with_throttle(store: Arc<dyn ObjectStore>, throttle: Throttle) -> Arc<ThrottleStore> {
    Wrapper::wrap(store, ThrottleHooks::new(throttle))
}

/// A store that takes at most so many requests a second of each class and refuses the
/// rest with a 503 ([`with_throttle`]; see the module docs).
pub type ThrottleStore = Wrapper<ThrottleHooks>;

/// The limits of a [`ThrottleStore`], and how it answers past them. Built with
/// [`Throttle::puts_per_s`] (or [`Throttle::unlimited`]) and the builder methods.
#[derive(Debug, Clone, PartialEq)]
pub struct Throttle {
    /// PUT-class requests (PUT, COPY, POST, DELETE) a second; `None`: no limit.
    pub puts_per_s: Option<f64>,
    /// GET-class requests (GET, HEAD, LIST) a second; `None` (the default): no limit.
    pub gets_per_s: Option<f64>,
    /// How many requests a full bucket holds (a burst after a quiet spell); `None` (the
    /// default): one second of the rate, at least one.
    pub burst: Option<f64>,
    /// What a refused request answers ([`ThrottleReply::s3`] by default).
    pub reply: ThrottleReply,
    /// The client's own retries of a refused request; `None` (the default): the error
    /// comes back at once.
    pub client_retries: Option<ClientRetries>,
    /// The seed of the client's backoff jitter.
    pub seed: u64,
}

impl Throttle {
    /// At most `n` PUT-class requests a second, GETs unlimited, S3's 503 at once.
    pub fn puts_per_s(n: f64) -> Self {
        Throttle {
            puts_per_s: Some(n),
            ..Throttle::unlimited()
        }
    }

    /// No limit yet (set one at run time with [`ThrottleStore::set_puts_per_s`]).
    pub fn unlimited() -> Self {
        Throttle {
            puts_per_s: None,
            gets_per_s: None,
            burst: None,
            reply: ThrottleReply::s3(),
            client_retries: None,
            seed: 0,
        }
    }

    /// At most `n` GET-class requests a second (`None`: no limit).
    pub fn gets_per_s(mut self, n: Option<f64>) -> Self {
        self.gets_per_s = n;
        self
    }

    /// A full bucket holds `n` requests (at least one, unless the rate is zero).
    pub fn burst(mut self, n: f64) -> Self {
        self.burst = Some(n);
        self
    }

    /// Refused requests answer `reply`.
    pub fn reply(mut self, reply: ThrottleReply) -> Self {
        self.reply = reply;
        self
    }

    /// The client retries a refused request as `retries` says before answering.
    pub fn client_retries(mut self, retries: ClientRetries) -> Self {
        self.client_retries = Some(retries);
        self
    }

    /// The seed of the backoff jitter.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// The retry loop of `object_store`'s HTTP client (`RetryConfig` and `BackoffConfig`),
/// played by a [`ThrottleStore`] for the requests it refuses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClientRetries {
    /// Retries after the first attempt (`RetryConfig::max_retries`).
    pub max_retries: usize,
    /// No retry starts once this long has passed since the first attempt
    /// (`RetryConfig::retry_timeout`).
    pub retry_timeout: Duration,
    /// The first backoff (`BackoffConfig::init_backoff`).
    pub init_backoff: Duration,
    /// The longest backoff (`BackoffConfig::max_backoff`).
    pub max_backoff: Duration,
    /// Each backoff is drawn between `init_backoff` and `base` times the one before
    /// (`BackoffConfig::base`).
    pub base: f64,
}

impl ClientRetries {
    /// `object_store`'s defaults: 10 retries within 3 minutes, backoff from 100 ms,
    /// base 2, at most 15 s.
    pub fn object_store_default() -> Self {
        ClientRetries {
            max_retries: 10,
            retry_timeout: Duration::from_secs(180),
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(15),
            base: 2.0,
        }
    }

    /// The defaults with `max_retries` retries.
    pub fn with_max_retries(mut self, max_retries: usize) -> Self {
        self.max_retries = max_retries;
        self
    }
}

/// How a service answers a request past its rate: what a [`ThrottleStore`] puts in its
/// error. The bodies are the services' documented shapes, with made-up request ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleReply {
    /// The store's name in `object_store::Error::Generic` (`"S3"`, `"GCS"`,
    /// `"MicrosoftAzure"`).
    pub store: &'static str,
    /// The HTTP status (503, 429).
    pub status: u16,
    /// The service's error code in the body (`SlowDown`, `ServerBusy`).
    pub code: &'static str,
    /// The message in the body.
    pub message: &'static str,
    /// Where the keys live: a request's URI is this, `/`, and the key.
    pub endpoint: String,
}

impl ThrottleReply {
    /// S3: `503 Slow Down`, `<Code>SlowDown</Code>`, path-style URIs.
    pub fn s3() -> Self {
        ThrottleReply {
            store: "S3",
            status: 503,
            code: "SlowDown",
            message: "Please reduce your request rate.",
            endpoint: "https://s3.us-east-1.amazonaws.com/wal-bucket".into(),
        }
    }

    /// Google Cloud Storage (the XML API object_store uploads through): `429 Too Many
    /// Requests`.
    pub fn gcs() -> Self {
        ThrottleReply {
            store: "GCS",
            status: 429,
            code: "SlowDown",
            message: "Please reduce your request rate.",
            endpoint: "https://storage.googleapis.com/wal-bucket".into(),
        }
    }

    /// Azure Blob Storage: `503 Server Busy`, `<Code>ServerBusy</Code>`.
    pub fn azure() -> Self {
        ThrottleReply {
            store: "MicrosoftAzure",
            status: 503,
            code: "ServerBusy",
            message: "Operations per second is over the account limit.",
            endpoint: "https://walaccount.blob.core.windows.net/wal-container".into(),
        }
    }

    /// The same reply with `endpoint` before the keys.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = endpoint.into();
        self
    }

    /// The status line's reason, as the `http` crate's `StatusCode` prints it.
    fn reason(&self) -> &'static str {
        match self.status {
            429 => "Too Many Requests",
            500 => "Internal Server Error",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            504 => "Gateway Timeout",
            _ => "",
        }
    }

    /// The response body of the `n`-th refusal (empty for a HEAD, which has none).
    fn body(&self, method: &str, n: u64) -> String {
        if method == "HEAD" {
            return String::new();
        }
        let id = format!("{:016X}", n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        match self.store {
            "MicrosoftAzure" => format!(
                "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{}</Code>\
                 <Message>{}\nRequestId:{id}\nTime:2026-01-01T00:00:00.0000000Z</Message></Error>",
                self.code, self.message
            ),
            _ => format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code>\
                 <Message>{}</Message><RequestId>{id}</RequestId><HostId>{id}</HostId></Error>",
                self.code, self.message
            ),
        }
    }
}

/// The error a [`ThrottleStore`] refuses a request with, the source of the
/// `object_store::Error::Generic` it returns: a stand-in for `object_store`'s
/// `RetryError`, with its `Display` word for word (see the module docs).
#[derive(Debug)]
pub struct Throttled {
    method: &'static str,
    uri: String,
    elapsed: Duration,
    retries: usize,
    max_retries: usize,
    retry_timeout: Duration,
    response: ThrottledResponse,
}

/// The response a refused request got: the source of a [`Throttled`], as the client's
/// `RequestError::Status`.
#[derive(Debug)]
struct ThrottledResponse {
    status: u16,
    reason: &'static str,
    body: String,
}

impl Throttled {
    /// The HTTP status (503, 429).
    pub fn status(&self) -> u16 {
        self.response.status
    }

    /// The response body.
    pub fn body(&self) -> &str {
        &self.response.body
    }

    /// Retries the client made before giving up.
    pub fn retries(&self) -> usize {
        self.retries
    }
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // object_store's `RetryError`, spaces included.
        write!(f, "Error performing {} {} ", self.method, self.uri)?;
        write!(f, "in {:?}", self.elapsed)?;
        if self.retries != 0 {
            write!(
                f,
                ", after {} retries, max_retries: {}, retry_timeout: {:?} ",
                self.retries, self.max_retries, self.retry_timeout
            )?;
        }
        write!(f, " - {}", self.response)
    }
}

impl StdError for Throttled {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.response)
    }
}

impl fmt::Display for ThrottledResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Server returned non-2xx status code: {} {}: {}",
            self.status, self.reason, self.body
        )
    }
}

impl StdError for ThrottledResponse {}

/// A LIST's error as the stores wrap it (`Error::ListRequest`).
#[derive(Debug)]
struct ListRequest(Throttled);

impl fmt::Display for ListRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error performing list request: {}", self.0)
    }
}

impl StdError for ListRequest {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.0)
    }
}

/// How many requests of each class a [`ThrottleStore`] let through and refused.
/// A client retry that was refused again counts as another refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThrottleCounts {
    /// PUT-class requests let through (PUT, COPY, POST, DELETE).
    pub puts_admitted: u64,
    /// PUT-class requests refused with the throttle's error (client retries included).
    pub puts_throttled: u64,
    /// GET-class requests let through (GET, HEAD, LIST).
    pub gets_admitted: u64,
    /// GET-class requests refused (client retries included).
    pub gets_throttled: u64,
    /// Client retries played ([`Throttle::client_retries`]).
    pub client_retries: u64,
    /// Requests answered with the throttle's error once the client's retries were
    /// spent (without client retries: every refusal).
    pub errors: u64,
}

impl ThrottleCounts {
    /// What happened after `earlier`, a snapshot of the same store.
    pub fn since(&self, earlier: &ThrottleCounts) -> ThrottleCounts {
        ThrottleCounts {
            puts_admitted: self.puts_admitted.saturating_sub(earlier.puts_admitted),
            puts_throttled: self.puts_throttled.saturating_sub(earlier.puts_throttled),
            gets_admitted: self.gets_admitted.saturating_sub(earlier.gets_admitted),
            gets_throttled: self.gets_throttled.saturating_sub(earlier.gets_throttled),
            client_retries: self.client_retries.saturating_sub(earlier.client_retries),
            errors: self.errors.saturating_sub(earlier.errors),
        }
    }
}

impl ThrottleStore {
    /// Sets the PUT-class limit from now on (`None`: lifts it). The requests already
    /// refused stay refused; a client retry asks the new limit.
    pub fn set_puts_per_s(&self, n: Option<f64>) {
        self.hooks.shared.puts.set_rate(n);
    }

    /// Sets the GET-class limit from now on (`None`: lifts it).
    pub fn set_gets_per_s(&self, n: Option<f64>) {
        self.hooks.shared.gets.set_rate(n);
    }

    /// The PUT-class limit now.
    pub fn puts_per_s(&self) -> Option<f64> {
        self.hooks.shared.puts.rate()
    }

    /// The GET-class limit now.
    pub fn gets_per_s(&self) -> Option<f64> {
        self.hooks.shared.gets.rate()
    }

    /// The requests let through and refused so far.
    pub fn counts(&self) -> ThrottleCounts {
        let s = &self.hooks.shared;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ThrottleCounts {
            puts_admitted: get(&s.puts.admitted),
            puts_throttled: get(&s.puts.throttled),
            gets_admitted: get(&s.gets.admitted),
            gets_throttled: get(&s.gets.throttled),
            client_retries: get(&s.client_retries),
            errors: get(&s.errors),
        }
    }
}

/// The behaviour of a [`ThrottleStore`]: a bucket per class and the reply past it.
#[derive(Debug)]
pub struct ThrottleHooks {
    /// Shared with the streams it makes (deletes, LISTs), which outlive a call.
    shared: Arc<Shared>,
}

impl ThrottleHooks {
    /// The hooks that follow `throttle`.
    pub fn new(throttle: Throttle) -> Self {
        let now = Instant::now();
        ThrottleHooks {
            shared: Arc::new(Shared {
                puts: Bucket::new(throttle.puts_per_s, throttle.burst, now),
                gets: Bucket::new(throttle.gets_per_s, throttle.burst, now),
                reply: throttle.reply,
                client: throttle.client_retries,
                rng: Mutex::new(SplitMix64::new(throttle.seed)),
                client_retries: AtomicU64::new(0),
                errors: AtomicU64::new(0),
            }),
        }
    }
}

#[derive(Debug)]
struct Shared {
    puts: Bucket,
    gets: Bucket,
    reply: ThrottleReply,
    client: Option<ClientRetries>,
    rng: Mutex<SplitMix64>,
    client_retries: AtomicU64,
    errors: AtomicU64,
}

/// A token bucket, and what it let through and refused.
#[derive(Debug)]
struct Bucket {
    state: Mutex<Tokens>,
    admitted: AtomicU64,
    throttled: AtomicU64,
}

#[derive(Debug)]
struct Tokens {
    /// Tokens a second; `None`: no limit.
    rate: Option<f64>,
    /// The bucket's size as configured; `None`: one second of the rate.
    burst: Option<f64>,
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

impl Tokens {
    /// The rate as given: NaN and negative rates refuse everything, infinite ones
    /// nothing.
    fn sane(rate: Option<f64>) -> Option<f64> {
        match rate {
            Some(r) if r.is_nan() || r <= 0.0 => Some(0.0),
            Some(r) if r.is_infinite() => None,
            other => other,
        }
    }

    fn capacity(&self) -> f64 {
        match self.rate {
            None => f64::INFINITY,
            Some(r) if r <= 0.0 => 0.0,
            Some(r) => self.burst.unwrap_or(r).max(1.0),
        }
    }

    /// Brings the tokens up to `now`.
    fn refill(&mut self, now: Instant) {
        if let Some(rate) = self.rate {
            let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
            self.tokens = (self.tokens + elapsed * rate).min(self.capacity());
        }
        self.at = now;
    }
}

impl Bucket {
    fn new(rate: Option<f64>, burst: Option<f64>, now: Instant) -> Self {
        let mut tokens = Tokens {
            rate: Tokens::sane(rate),
            burst,
            tokens: 0.0,
            at: now,
        };
        tokens.tokens = tokens.capacity();
        Bucket {
            state: Mutex::new(tokens),
            admitted: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
        }
    }

    fn rate(&self) -> Option<f64> {
        lock(&self.state).rate
    }

    /// A new rate from now on: the tokens earned at the old rate are kept, up to the new
    /// bucket's size; a limit set on an unlimited bucket starts full.
    fn set_rate(&self, rate: Option<f64>) {
        let mut state = lock(&self.state);
        state.refill(Instant::now());
        let was_unlimited = state.rate.is_none();
        state.rate = Tokens::sane(rate);
        let capacity = state.capacity();
        state.tokens = if was_unlimited {
            capacity
        } else {
            state.tokens.min(capacity)
        };
    }

    /// Takes a token if there is one; counts the request either way.
    fn admit(&self) -> bool {
        let admitted = {
            let mut state = lock(&self.state);
            state.refill(Instant::now());
            match state.rate {
                None => true,
                Some(_) if state.tokens >= 1.0 => {
                    state.tokens -= 1.0;
                    true
                }
                Some(_) => false,
            }
        };
        let counter = if admitted {
            &self.admitted
        } else {
            &self.throttled
        };
        counter.fetch_add(1, Ordering::Relaxed);
        admitted
    }
}

/// The two classes of request.
#[derive(Debug, Clone, Copy)]
enum Class {
    Put,
    Get,
}

impl Shared {
    fn bucket(&self, class: Class) -> &Bucket {
        match class {
            Class::Put => &self.puts,
            Class::Get => &self.gets,
        }
    }

    /// Whether a request of `class` goes through, after the client's retries if it
    /// plays them; `Err` is the error it answers (the number of retries made, and how
    /// long since the first attempt).
    async fn pass(
        &self,
        class: Class,
        method: &'static str,
        location: &str,
    ) -> Result<(), Throttled> {
        let bucket = self.bucket(class);
        let started = Instant::now();
        let mut retries = 0usize;
        // The client's next backoff, in seconds (`Backoff::next_backoff_secs`).
        let mut next_backoff = self.client.map(|c| c.init_backoff.as_secs_f64());
        loop {
            if bucket.admit() {
                return Ok(());
            }
            let elapsed = started.elapsed();
            match (self.client, next_backoff) {
                (Some(c), Some(backoff))
                    if retries < c.max_retries && elapsed <= c.retry_timeout =>
                {
                    next_backoff = Some(self.draw_backoff(&c, backoff));
                    retries += 1;
                    self.client_retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_secs_f64(backoff)).await;
                }
                _ => {
                    let n = self.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(self.refusal(method, location, elapsed, retries, n));
                }
            }
        }
    }

    /// The backoff after `current`: between the first backoff and `base` times
    /// `current`, at most the longest (`object_store`'s decorrelated jitter).
    fn draw_backoff(&self, c: &ClientRetries, current: f64) -> f64 {
        let lo = c.init_backoff.as_secs_f64();
        let hi = current * c.base;
        let drawn = if hi > lo {
            lo + lock(&self.rng).unit() * (hi - lo)
        } else {
            lo
        };
        drawn.min(c.max_backoff.as_secs_f64())
    }

    /// The error of the `n`-th refusal: `location` is a key, or a query (a LIST's).
    fn refusal(
        &self,
        method: &'static str,
        location: &str,
        elapsed: Duration,
        retries: usize,
        n: u64,
    ) -> Throttled {
        let (max_retries, retry_timeout) = self
            .client
            .map_or((0, Duration::ZERO), |c| (c.max_retries, c.retry_timeout));
        let slash = if location.starts_with('?') { "" } else { "/" };
        Throttled {
            method,
            uri: format!("{}{slash}{location}", self.reply.endpoint),
            elapsed,
            retries,
            max_retries,
            retry_timeout,
            response: ThrottledResponse {
                status: self.reply.status,
                reason: self.reply.reason(),
                body: self.reply.body(method, n),
            },
        }
    }

    /// The store's error for a refused request.
    fn error(&self, refused: Throttled) -> object_store::Error {
        object_store::Error::Generic {
            store: self.reply.store,
            source: Box::new(refused),
        }
    }

    /// The store's error for a refused LIST.
    fn list_error(&self, refused: Throttled) -> object_store::Error {
        object_store::Error::Generic {
            store: self.reply.store,
            source: Box::new(ListRequest(refused)),
        }
    }

    /// `listing`, once a LIST of `prefix` is let through: the bucket is asked when the
    /// listing is first polled, as the request is sent then.
    fn list(
        self: &Arc<Self>,
        prefix: Option<&Path>,
        listing: BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let shared = self.clone();
        let query = format!(
            "?list-type=2&prefix={}",
            prefix.map_or(String::new(), |p| format!("{p}/"))
        );
        stream::once(async move {
            match shared.pass(Class::Get, "GET", &query).await {
                Ok(()) => listing,
                Err(refused) => {
                    let e = shared.list_error(refused);
                    stream::once(async move { Err(e) }).boxed()
                }
            }
        })
        .flatten()
        .boxed()
    }
}

#[async_trait]
impl Hooks for ThrottleHooks {
    const NAME: &'static str = "ThrottleStore";

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let s = &self.shared;
        s.pass(Class::Put, "PUT", location.as_ref())
            .await
            .map_err(|refused| s.error(refused))?;
        inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let s = &self.shared;
        s.pass(Class::Put, "POST", &format!("{location}?uploads"))
            .await
            .map_err(|refused| s.error(refused))?;
        inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let s = &self.shared;
        let method = if options.head { "HEAD" } else { "GET" };
        s.pass(Class::Get, method, location.as_ref())
            .await
            .map_err(|refused| s.error(refused))?;
        inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        inner: &Arc<dyn ObjectStore>,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let (shared, inner) = (self.shared.clone(), inner.clone());
        locations
            .then(move |location| {
                let (shared, inner) = (shared.clone(), inner.clone());
                async move {
                    let location = location?;
                    shared
                        .pass(Class::Put, "DELETE", location.as_ref())
                        .await
                        .map_err(|refused| shared.error(refused))?;
                    let one = stream::once(async move { Ok(location.clone()) }).boxed();
                    match inner.delete_stream(one).next().await {
                        Some(answer) => answer,
                        None => Err(object_store::Error::Generic {
                            store: "ThrottleStore",
                            source: "the wrapped store answered no delete".into(),
                        }),
                    }
                }
            })
            .boxed()
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.shared.list(prefix, inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.shared
            .list(prefix, inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
    ) -> object_store::Result<ListResult> {
        let s = &self.shared;
        let query = format!(
            "?list-type=2&delimiter=%2F&prefix={}",
            prefix.map_or(String::new(), |p| format!("{p}/"))
        );
        s.pass(Class::Get, "GET", &query)
            .await
            .map_err(|refused| s.list_error(refused))?;
        inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let s = &self.shared;
        s.pass(Class::Put, "PUT", to.as_ref())
            .await
            .map_err(|refused| s.error(refused))?;
        inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};

    fn key(i: u32) -> Path {
        Path::from(format!("wal/{i:020}"))
    }

    fn create() -> PutOptions {
        PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        }
    }

    async fn put(store: &Arc<ThrottleStore>, i: u32) -> object_store::Result<PutResult> {
        store
            .put_opts(&key(i), PutPayload::from_static(b"object"), create())
            .await
    }

    /// The `Throttled` inside a store error, if it is one.
    fn throttled(e: &object_store::Error) -> Option<&Throttled> {
        let mut source = StdError::source(e);
        while let Some(s) = source {
            if let Some(t) = s.downcast_ref::<Throttled>() {
                return Some(t);
            }
            source = s.source();
        }
        None
    }

    /// Past N PUTs in a second every PUT is refused with S3's 503, and not applied; a
    /// second later N more go through.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn admits_n_puts_a_second_and_refuses_the_rest_unapplied() {
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let store = with_throttle(memory.clone(), Throttle::puts_per_s(5.0));
        for i in 0..5 {
            put(&store, i).await.expect("within the limit");
        }
        let e = put(&store, 5).await.expect_err("past the limit");
        assert!(
            matches!(e, object_store::Error::Generic { store: "S3", .. }),
            "{e:?}"
        );
        assert_eq!(throttled(&e).map(Throttled::status), Some(503));
        assert!(matches!(
            memory.head(&key(5)).await,
            Err(object_store::Error::NotFound { .. })
        ));
        let c = store.counts();
        assert_eq!((c.puts_admitted, c.puts_throttled, c.errors), (5, 1, 1));

        // Tokens come back with time, one fifth of a second each, up to five.
        tokio::time::advance(Duration::from_millis(200)).await;
        put(&store, 5).await.expect("one token back");
        put(&store, 6).await.expect_err("only one");
        tokio::time::advance(Duration::from_secs(10)).await;
        for i in 6..11 {
            put(&store, i).await.expect("a full bucket again");
        }
        put(&store, 11)
            .await
            .expect_err("a full bucket is one second");
    }

    /// The error reads as `object_store`'s client prints a 503 after no retry, and the
    /// WAL files it with the store errors a create retries (an unknown outcome), not
    /// with the refusals.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_error_reads_as_object_stores_own_503() {
        let store = with_throttle(Arc::new(InMemory::new()), Throttle::puts_per_s(0.0));
        let e = put(&store, 1).await.expect_err("refused");
        assert_eq!(
            e.to_string(),
            "Generic S3 error: Error performing PUT \
             https://s3.us-east-1.amazonaws.com/wal-bucket/wal/00000000000000000001 in 0ns \
             - Server returned non-2xx status code: 503 Service Unavailable: \
             <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
             <Message>Please reduce your request rate.</Message>\
             <RequestId>0000000000000000</RequestId><HostId>0000000000000000</HostId></Error>"
        );
        let t = throttled(&e).expect("a Throttled inside");
        assert!(t.body().contains("<Code>SlowDown</Code>"));
        assert_eq!(
            t.source().map(ToString::to_string).as_deref(),
            t.to_string().split_once(" - ").map(|(_, rest)| rest)
        );
        let wal = crate::error::Error::store("create", key(1), e);
        assert!(matches!(wal, crate::error::Error::Store { .. }), "{wal:?}");
        assert_eq!(wal.kind(), crate::error::ErrorKind::Retry);

        let gcs = with_throttle(
            Arc::new(InMemory::new()),
            Throttle::puts_per_s(0.0).reply(ThrottleReply::gcs()),
        );
        let e = put(&gcs, 1).await.expect_err("refused");
        assert!(
            e.to_string().starts_with(
                "Generic GCS error: Error performing PUT https://storage.googleapis.com/"
            ),
            "{e}"
        );
        assert!(e.to_string().contains(": 429 Too Many Requests: "), "{e}");
        let azure = with_throttle(
            Arc::new(InMemory::new()),
            Throttle::puts_per_s(0.0).reply(ThrottleReply::azure()),
        );
        let e = put(&azure, 1).await.expect_err("refused");
        assert!(e.to_string().contains("<Code>ServerBusy</Code>"), "{e}");
    }

    /// The wrapper's error against the real one: `object_store`'s S3 client, pointed at
    /// a local server that answers every request with S3's 503 and the wrapper's body,
    /// prints the same text (but for the time taken), after no retry and after two.
    #[cfg(feature = "aws")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_text_is_the_real_s3_clients() {
        use object_store::aws::AmazonS3Builder;
        use object_store::{BackoffConfig, RetryConfig};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let endpoint = format!("http://{}", listener.local_addr().expect("address"));
        let reply = ThrottleReply::s3().with_endpoint(format!("{endpoint}/wal-bucket"));
        let body = reply.body("PUT", 0);
        let server = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let body = body.clone();
                tokio::spawn(async move {
                    // The request's head, then as many bytes as it says it has.
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    let head_end = loop {
                        let Ok(n) = conn.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        got.extend_from_slice(&buf[..n]);
                        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&got[..head_end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while got.len() < head_end + length {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let response = format!(
                        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        // The text with the time taken left out.
        let timeless = |text: String| {
            let start = text.find(" in ").expect("a time");
            let end = start + text[start..].find([',', ' ']).expect("after ' in '");
            let end = end + 4 + text[end + 4..].find([',', ' ']).expect("the time's end");
            format!("{}{}", &text[..start], &text[end..])
        };
        for max_retries in [0, 2] {
            let retry = RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(1),
                    max_backoff: Duration::from_millis(2),
                    base: 2.0,
                },
                max_retries,
                retry_timeout: Duration::from_secs(180),
            };
            let s3 = AmazonS3Builder::new()
                .with_endpoint(&endpoint)
                .with_allow_http(true)
                .with_bucket_name("wal-bucket")
                .with_region("us-east-1")
                .with_access_key_id("key")
                .with_secret_access_key("secret")
                .with_retry(retry)
                .build()
                .expect("an S3 client");
            let real = s3
                .put_opts(&key(1), PutPayload::from_static(b"object"), create())
                .await
                .expect_err("the server refuses");
            let mut throttle = Throttle::puts_per_s(0.0).reply(reply.clone());
            if max_retries > 0 {
                throttle = throttle.client_retries(ClientRetries {
                    init_backoff: Duration::from_millis(1),
                    max_backoff: Duration::from_millis(2),
                    ..ClientRetries::object_store_default().with_max_retries(max_retries)
                });
            }
            let ours = put(&with_throttle(Arc::new(InMemory::new()), throttle), 1)
                .await
                .expect_err("refused");
            assert!(
                matches!(real, object_store::Error::Generic { store: "S3", .. }),
                "{real:?}"
            );
            assert_eq!(timeless(ours.to_string()), timeless(real.to_string()));
        }
        server.abort();
    }

    /// The limit can be lifted and set again while the store runs.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_limit_is_changed_and_lifted_at_run_time() {
        let store = with_throttle(Arc::new(InMemory::new()), Throttle::puts_per_s(1.0));
        put(&store, 0).await.expect("one");
        put(&store, 1).await.expect_err("one a second");
        store.set_puts_per_s(None);
        assert_eq!(store.puts_per_s(), None);
        for i in 1..100 {
            put(&store, i).await.expect("no limit");
        }
        store.set_puts_per_s(Some(2.0));
        put(&store, 100).await.expect("a new limit starts full");
        put(&store, 101).await.expect("two");
        put(&store, 102).await.expect_err("three");
        // Lowered: the tokens earned at the old rate are kept up to the new size.
        tokio::time::advance(Duration::from_secs(1)).await;
        store.set_puts_per_s(Some(1.0));
        put(&store, 102).await.expect("one");
        put(&store, 103).await.expect_err("not two");
        let c = store.counts();
        assert_eq!((c.puts_admitted, c.puts_throttled), (103, 3));
    }

    /// GETs are unlimited by default; limited, GETs, HEADs and LISTs are refused past
    /// the limit, and PUTs are not charged for them. Deletes are charged as PUTs.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn gets_and_lists_have_a_limit_of_their_own() {
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        memory
            .put(&key(1), PutPayload::from_static(b"x"))
            .await
            .expect("put");
        let store = with_throttle(memory.clone(), Throttle::puts_per_s(1.0));
        for _ in 0..10 {
            store.get(&key(1)).await.expect("GETs unlimited");
        }
        store.set_gets_per_s(Some(2.0));
        store.get(&key(1)).await.expect("one");
        store.head(&key(1)).await.expect("two");
        let e = store.get(&key(1)).await.expect_err("three");
        assert!(e.to_string().contains("Error performing GET "), "{e}");
        let listed: Vec<_> = store.list(Some(&Path::from("wal"))).collect().await;
        let e = match listed.as_slice() {
            [Err(e)] => e,
            other => panic!("a refused listing: {other:?}"),
        };
        assert!(
            e.to_string().starts_with(
                "Generic S3 error: Error performing list request: Error performing GET "
            ),
            "{e}"
        );
        store
            .list_with_delimiter(None)
            .await
            .expect_err("refused too");
        tokio::time::advance(Duration::from_secs(1)).await;
        let listed: Vec<_> = store.list(Some(&Path::from("wal"))).collect().await;
        assert_eq!(listed.len(), 1);
        assert!(listed.iter().all(Result::is_ok));

        // The PUT class: one delete takes the one token, the next delete is refused.
        store.delete(&key(1)).await.expect("deleted");
        store.delete(&key(1)).await.expect_err("refused");
        put(&store, 2).await.expect_err("no token left for the PUT");
        let c = store.counts();
        assert_eq!(
            (
                c.gets_admitted,
                c.gets_throttled,
                c.puts_admitted,
                c.puts_throttled
            ),
            (13, 3, 1, 2)
        );
    }

    /// With the client's retries played, a refused PUT waits its backoff and goes
    /// through once a token is back; past the retries, the error says how many.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn client_retries_wait_for_a_token_then_give_up() {
        let retries = ClientRetries::object_store_default();
        let store = with_throttle(
            Arc::new(InMemory::new()),
            Throttle::puts_per_s(1.0).client_retries(retries),
        );
        put(&store, 0).await.expect("the token");
        let started = Instant::now();
        put(&store, 1).await.expect("a retry meets the next token");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        assert!(waited <= Duration::from_secs(3), "{waited:?}");
        let c = store.counts();
        assert!(c.client_retries >= 1, "{c:?}");
        assert_eq!(c.puts_throttled, c.client_retries);
        assert_eq!((c.puts_admitted, c.errors), (2, 0));

        let store = with_throttle(
            Arc::new(InMemory::new()),
            Throttle::puts_per_s(0.0).client_retries(retries.with_max_retries(2)),
        );
        let e = put(&store, 1).await.expect_err("never a token");
        let text = e.to_string();
        assert!(
            text.contains(", after 2 retries, max_retries: 2, retry_timeout: 180s  - Server returned non-2xx status code: 503 Service Unavailable: "),
            "{text}"
        );
        assert_eq!(throttled(&e).map(Throttled::retries), Some(2));
        let c = store.counts();
        assert_eq!((c.puts_throttled, c.client_retries, c.errors), (3, 2, 1));
    }
}
