//! A TCP proxy between a client and a server on loopback, to cut them apart on demand.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    /// Bytes are held back in both directions (connections stay open).
    frozen: bool,
    /// How long each chunk of bytes waits before it is passed on, in each direction.
    latency: std::time::Duration,
    /// Bumped by `sever`: connections of an older generation are closed.
    generation: u64,
}

/// Forwards TCP connections from a free loopback port to `upstream`, on a thread and
/// runtime of its own. [`TcpProxy::freeze`] holds all bytes back (a partition that keeps
/// sockets open, as a dead network does); [`TcpProxy::set_latency`] slows every exchange;
/// [`TcpProxy::sever`] closes every open connection. Stops when dropped.
#[derive(Debug)]
pub struct TcpProxy {
    addr: SocketAddr,
    state: watch::Sender<State>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
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
            latency: std::time::Duration::ZERO,
            generation: 0,
        });
        let (shutdown, stopped) = tokio::sync::oneshot::channel();
        let accepting = state.clone();
        std::thread::Builder::new()
            .name("fencelock-test-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        () = accept(listener, upstream, accepting) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(TcpProxy {
            addr,
            state,
            shutdown: Some(shutdown),
        })
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
    pub fn set_latency(&self, latency: std::time::Duration) {
        self.state.send_modify(|s| s.latency = latency);
    }

    /// Closes every open connection; new ones are accepted.
    pub fn sever(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, state: watch::Sender<State>) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(upstream).await else {
            continue;
        };
        let generation = state.borrow().generation;
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        tokio::spawn(pump(
            client_read,
            server_write,
            state.subscribe(),
            generation,
        ));
        tokio::spawn(pump(
            server_read,
            client_write,
            state.subscribe(),
            generation,
        ));
    }
}

/// Copies `from` to `to` while the proxy is not frozen; ends at EOF, on an error, or when
/// the connection's generation is severed.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    generation: u64,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let Ok(current) = state
            .wait_for(|s| !s.frozen || s.generation != generation)
            .await
            .map(|s| *s)
        else {
            return;
        };
        if current.generation != generation {
            return;
        }
        tokio::select! {
            read = from.read(&mut buffer) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let latency = state.borrow().latency;
                    if !latency.is_zero() {
                        tokio::time::sleep(latency).await;
                    }
                    if to.write_all(&buffer[..n]).await.is_err() {
                        return;
                    }
                }
            },
            changed = state.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}
