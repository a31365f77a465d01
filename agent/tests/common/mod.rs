//! A fake scheduler for the agent's tests: a real tonic server on 127.0.0.1 that hands every
//! agent stream to the test.
#![allow(dead_code)] // each test binary uses a different part

use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;
use gantry_proto::v1::agent_service_server::{AgentService, AgentServiceServer};
use gantry_proto::v1::scheduler_message::Msg as Down;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status, Streaming};

/// Failure guard for every wait (never an assertion about speed).
pub const GUARD: Duration = Duration::from_secs(30);

pub type Reply = Result<v1::SchedulerMessage, Status>;

/// One agent stream as the fake scheduler sees it; dropping it ends the stream.
pub struct Session {
    pub inbound: Streaming<v1::AgentMessage>,
    pub tx: mpsc::Sender<Reply>,
}

impl Session {
    pub async fn recv(&mut self) -> Up {
        timeout(GUARD, self.inbound.message())
            .await
            .expect("guard: no agent message")
            .expect("agent stream failed")
            .expect("agent stream ended")
            .msg
            .expect("agent message without a body")
    }

    pub async fn register(&mut self) -> v1::Register {
        match self.recv().await {
            Up::Register(r) => r,
            other => panic!("first message is not Register: {other:?}"),
        }
    }

    pub async fn send(&self, msg: Down) {
        self.tx.send(Ok(v1::SchedulerMessage { msg: Some(msg) })).await.expect("agent stream gone");
    }
}

/// A scheduler that hands every stream to the test, or refuses them all.
pub struct FakeScheduler {
    sessions: mpsc::UnboundedSender<Session>,
    refuse: Option<mpsc::UnboundedSender<()>>,
}

#[tonic::async_trait]
impl AgentService for FakeScheduler {
    type ConnectStream = ReceiverStream<Reply>;

    async fn connect(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        if let Some(refused) = &self.refuse {
            let _ = refused.send(());
            return Err(Status::unavailable("scheduler down for the test"));
        }
        let (tx, rx) = mpsc::channel(64);
        self.sessions
            .send(Session { inbound: request.into_inner(), tx })
            .map_err(|_| Status::unavailable("test over"))?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub sessions: mpsc::UnboundedReceiver<Session>,
    pub refused: mpsc::UnboundedReceiver<()>,
    _stop: oneshot::Sender<()>,
}

impl Server {
    pub async fn start(refusing: bool) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Self::serve(listener, refusing)
    }

    pub fn serve(listener: TcpListener, refusing: bool) -> Server {
        let addr = listener.local_addr().expect("local addr");
        let (sessions_tx, sessions) = mpsc::unbounded_channel();
        let (refused_tx, refused) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let service = FakeScheduler { sessions: sessions_tx, refuse: refusing.then_some(refused_tx) };
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                // As the real scheduler: a full 4 MiB log chunk is larger than tonic's default.
                .add_service(
                    AgentServiceServer::new(service)
                        .max_decoding_message_size(gantry_proto::MAX_MESSAGE_BYTES),
                )
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await
                .expect("test server");
        });
        Server { addr, sessions, refused, _stop: stop }
    }

    pub async fn accept(&mut self) -> Session {
        timeout(GUARD, self.sessions.recv())
            .await
            .expect("guard: agent did not connect")
            .expect("server gone")
    }

    /// Accepts a stream, reads its Register and answers Registered.
    pub async fn handshake(&mut self) -> (Session, v1::Register) {
        let mut s = self.accept().await;
        let r = s.register().await;
        s.send(Down::Registered(v1::Registered::default())).await;
        (s, r)
    }
}

/// The agent binary under test.
pub const AGENT: &str = env!("CARGO_BIN_EXE_gantry-agent");

/// A real `gantry-agent run` process, SIGKILLed when dropped.
pub struct AgentProcess(pub std::process::Child);

impl AgentProcess {
    /// Starts the agent with `config`, talking to the fake scheduler at `scheduler`.
    pub fn start(config: &std::path::Path, scheduler: SocketAddr) -> AgentProcess {
        AgentProcess(
            std::process::Command::new(AGENT)
                .args(["run", "--config"])
                .arg(config)
                .args(["--scheduler", &format!("http://{scheduler}")])
                .env("RUST_LOG", "info")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .expect("start agent"),
        )
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGTERM, and wait for the agent to stop (within [`GUARD`]).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("wait") {
                return status;
            }
            assert!(start.elapsed() < GUARD, "guard: the agent did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// What an executor test leaves: every container of `settings` killed, its exit collected, its
/// directories forgotten and the parent cgroup removed (a test's guard calls it when dropped,
/// also after a failure).
pub fn clean_up_executor(settings: &gantry_agent::executor::ExecutorSettings) {
    let Ok(exec) = gantry_agent::executor::Executor::new(settings.clone()) else { return };
    let _ = exec.adopt();
    for id in exec.running() {
        let _ = exec.force_kill(id);
    }
    let start = std::time::Instant::now();
    while exec.running().iter().any(|&id| !exec.has_ended(id)) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = exec.collect_exits();
    for c in exec.list() {
        let _ = exec.forget(c.key);
    }
    let _ = exec.remove_parent_cgroup();
}
