//! A TCP proxy between a client and a server on loopback, to cut them apart on demand.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use crate::sync::lock_ignoring_poison;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    /// Bytes are held back in both directions (connections stay open).
    frozen: bool,
    /// How long each chunk of bytes waits before it is passed on, in each direction.
    latency: Duration,
    /// Bumped by `sever`: connections of an older generation are closed.
    generation: u64,
}

/// Which way bytes travel through the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the client to the server: requests.
    ToServer = 0,
    /// From the server to the client: replies.
    ToClient = 1,
}

/// What happened on the connection of a held chunk once it was delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The server sent bytes after it: it ran a held request.
    Answered,
    /// The connection had ended, or ended before any answer: nothing ran.
    Closed,
    /// Neither within 5 s (also what a delivered reply gives: a client sends nothing back).
    Silent,
}

/// How long [`TcpProxy::deliver_held`] waits for the server's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// Forwards TCP connections from a free loopback port to `upstream`, on a thread and
/// runtime of its own. [`TcpProxy::freeze`] holds all bytes back (a partition that keeps
/// sockets open, as a dead network does); [`TcpProxy::set_latency`] slows every exchange;
/// [`TcpProxy::sever`] closes every open connection; [`TcpProxy::hold_next`] keeps one chunk
/// (a request, or a reply) back until [`TcpProxy::deliver_held`], to deliver it after the
/// client gave up on it. Stops when dropped.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    state: watch::Sender<State>,
    holding: Arc<Holding>,
    /// Connections closed by `sever`.
    severed: Arc<AtomicU64>,
    /// Chunks of bytes forwarded to the server, and to the client.
    forwarded: Arc<[AtomicU64; 2]>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The one chunk the proxy may hold back.
#[derive(Debug, Default)]
struct Holding {
    /// Set by `hold_next`: the next chunk going this way is held.
    armed: Mutex<Option<Direction>>,
    /// Set by `hold_next_connection`: the first request of the next connection is held.
    armed_for_connection: AtomicBool,
    /// The connection of the chunk held now, if any.
    held: watch::Sender<Option<Arc<Link>>>,
    /// Lets the held chunk go.
    deliver: Notify,
}

impl Holding {
    /// Whether a chunk going `direction` is to be held (disarms).
    fn take(&self, direction: Direction) -> bool {
        let mut armed = lock_ignoring_poison(&self.armed);
        if *armed == Some(direction) {
            *armed = None;
            true
        } else {
            false
        }
    }
}

/// What a connection's server side has done: chunks sent, and whether it ended.
#[derive(Debug, Default)]
struct Link {
    from_server: watch::Sender<(u64, bool)>,
}

impl TcpProxy {
    /// Starts forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<TcpProxy> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (state, _) = watch::channel(State {
            frozen: false,
            latency: Duration::ZERO,
            generation: 0,
        });
        let holding = Arc::new(Holding::default());
        let severed = Arc::new(AtomicU64::new(0));
        let forwarded: Arc<[AtomicU64; 2]> = Arc::default();
        let (shutdown, stopped) = tokio::sync::oneshot::channel();
        let accepting = state.clone();
        let proxy_holding = holding.clone();
        let counting = (severed.clone(), forwarded.clone());
        std::thread::Builder::new()
            .name("fencelock-test-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        () = accept(listener, upstream, accepting, proxy_holding, counting) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(TcpProxy {
            addr,
            state,
            holding,
            severed,
            forwarded,
            shutdown: Some(shutdown),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://<proxy address>/`.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Holds back every byte in both directions until [`TcpProxy::thaw`].
    pub fn freeze(&self) {
        self.state.send_modify(|s| s.frozen = true);
    }

    /// Forwards again, including what was held back.
    pub fn thaw(&self) {
        self.state.send_modify(|s| s.frozen = false);
    }

    /// Delays every chunk of bytes by `latency` in each direction (zero: none).
    pub fn set_latency(&self, latency: Duration) {
        self.state.send_modify(|s| s.latency = latency);
    }

    /// Closes every open connection; new ones are accepted.
    pub fn sever(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }

    /// How many connections [`sever`](Self::sever) has closed so far (counted as each one
    /// closes): what shows that a cut hit something.
    pub fn severed(&self) -> u64 {
        self.severed.load(Ordering::SeqCst)
    }

    /// How many chunks of bytes went `direction` so far. A client writes a request, or a
    /// pipeline, at once and then waits for the reply: the chunks sent to the server are
    /// its round trips, as far as one read takes a whole request (16 KiB at most).
    pub fn forwarded(&self, direction: Direction) -> u64 {
        self.forwarded[direction as usize].load(Ordering::SeqCst)
    }

    /// Holds back the next chunk of bytes going `direction`, on whichever connection, while
    /// its connection stays open; the bytes after it on that connection wait behind it.
    pub fn hold_next(&self, direction: Direction) {
        *lock_ignoring_poison(&self.holding.armed) = Some(direction);
    }

    /// Holds back the first request of the next connection opened through the proxy (its
    /// handshake, for a Redis client), so that whoever opens it waits in the middle of
    /// connecting.
    pub fn hold_next_connection(&self) {
        self.holding
            .armed_for_connection
            .store(true, Ordering::SeqCst);
    }

    /// Completes once a chunk is held.
    pub async fn held(&self) {
        let mut held = self.holding.held.subscribe();
        // The sender lives in `self`: the wait ends only when something is held.
        let _ = held.wait_for(Option::is_some).await;
    }

    /// Lets the held chunk go on, and reports what its connection's server side did next:
    /// for a held request, whether the server ran it (answered) or had closed the
    /// connection. Waits at most 5 s; [`Delivery::Closed`] at once if nothing is held.
    pub async fn deliver_held(&self) -> Delivery {
        let Some(link) = self.holding.held.send_replace(None) else {
            return Delivery::Closed;
        };
        let mut server = link.from_server.subscribe();
        let (chunks_before, closed) = *server.borrow_and_update();
        if closed {
            self.holding.deliver.notify_one();
            return Delivery::Closed;
        }
        self.holding.deliver.notify_one();
        let next = tokio::time::timeout(
            ANSWER_WAIT,
            server.wait_for(|(chunks, closed)| *closed || *chunks > chunks_before),
        )
        .await;
        match next {
            Ok(Ok(state)) if state.1 && state.0 == chunks_before => Delivery::Closed,
            Ok(Ok(_)) => Delivery::Answered,
            Ok(Err(_)) => Delivery::Closed,
            Err(_) => Delivery::Silent,
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    state: watch::Sender<State>,
    holding: Arc<Holding>,
    (severed, forwarded): (Arc<AtomicU64>, Arc<[AtomicU64; 2]>),
) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(upstream).await else {
            continue;
        };
        let generation = state.borrow().generation;
        let link = Arc::new(Link::default());
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let hold_first = holding.armed_for_connection.swap(false, Ordering::SeqCst);
        let pump = |from, to, direction| Pump {
            from,
            to,
            direction,
            hold_first: hold_first && direction == Direction::ToServer,
            state: state.subscribe(),
            generation,
            holding: holding.clone(),
            link: link.clone(),
            severed: severed.clone(),
            forwarded: forwarded.clone(),
        };
        tokio::spawn(pump(client_read, server_write, Direction::ToServer).run());
        tokio::spawn(pump(server_read, client_write, Direction::ToClient).run());
    }
}

/// Copies one direction of one connection.
struct Pump {
    from: OwnedReadHalf,
    to: OwnedWriteHalf,
    direction: Direction,
    /// Hold the first chunk (`hold_next_connection`).
    hold_first: bool,
    state: watch::Receiver<State>,
    generation: u64,
    holding: Arc<Holding>,
    link: Arc<Link>,
    severed: Arc<AtomicU64>,
    forwarded: Arc<[AtomicU64; 2]>,
}

impl Pump {
    /// Copies while the proxy is not frozen; ends at EOF, on an error, or when the
    /// connection's generation is severed. A server side that ends marks its link closed.
    async fn run(mut self) {
        self.copy().await;
        if self.direction == Direction::ToClient {
            self.link
                .from_server
                .send_modify(|(_, closed)| *closed = true);
        }
    }

    async fn copy(&mut self) {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let generation = self.generation;
            let Ok(current) = self
                .state
                .wait_for(|s| !s.frozen || s.generation != generation)
                .await
                .map(|s| *s)
            else {
                return;
            };
            if current.generation != generation {
                // One count per connection: its requests' side.
                if self.direction == Direction::ToServer {
                    self.severed.fetch_add(1, Ordering::SeqCst);
                }
                return;
            }
            tokio::select! {
                read = self.from.read(&mut buffer) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if self.direction == Direction::ToClient {
                            self.link.from_server.send_modify(|(chunks, _)| *chunks += 1);
                        }
                        let hold = std::mem::take(&mut self.hold_first)
                            || self.holding.take(self.direction);
                        if hold && !self.hold().await {
                            return;
                        }
                        let latency = self.state.borrow().latency;
                        if !latency.is_zero() {
                            tokio::time::sleep(latency).await;
                        }
                        if self.to.write_all(&buffer[..n]).await.is_err() {
                            return;
                        }
                        self.forwarded[self.direction as usize].fetch_add(1, Ordering::SeqCst);
                    }
                },
                changed = self.state.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Holds the chunk just read until it is delivered; `false` if the connection is
    /// severed meanwhile.
    async fn hold(&mut self) -> bool {
        self.holding.held.send_replace(Some(self.link.clone()));
        let generation = self.generation;
        tokio::select! {
            () = self.holding.deliver.notified() => true,
            _ = self.state.wait_for(|s| s.generation != generation) => false,
        }
    }
}
