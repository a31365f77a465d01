//! Container logs stay on the node that ran the container, as YARN's NodeManager keeps them: a
//! read goes down that node's stream as `ReadLog` with a fresh request id, and the agent's
//! `LogChunk` answers it. A node serves [`LOG_READS_PER_NODE`] reads at once; more wait their
//! turn. A read fails as soon as its stream ends, is replaced or its node is lost; one whose
//! caller gave up ([`crate::Input::ReplyAbandoned`]) is dropped, and its answer ignored.

use crate::messages::{LogChunk, LogError, Reply, ReplyTo, StreamId};
use crate::{Controller, LOG_READS_PER_NODE};
use gantry_proto::v1;
use gantry_proto::v1::scheduler_message::Msg as ToAgent;
use std::collections::{BTreeMap, VecDeque};

/// Log reads in flight and waiting.
#[derive(Debug)]
pub(crate) struct LogReads {
    /// The last request id used.
    last_request: u64,
    /// Sent and not answered, by request id.
    in_flight: BTreeMap<u64, InFlight>,
    /// Waiting for one of their node's turns, by node.
    waiting: BTreeMap<String, VecDeque<Wanted>>,
}

#[derive(Debug)]
struct InFlight {
    node: String,
    container: u64,
    stream: StreamId,
    reply: ReplyTo,
}

#[derive(Debug)]
struct Wanted {
    reply: ReplyTo,
    container: u64,
    file: v1::LogStream,
    tail: Option<u64>,
}

impl LogReads {
    pub(crate) fn new(last_request: u64) -> Self {
        LogReads { last_request, in_flight: BTreeMap::new(), waiting: BTreeMap::new() }
    }
}

impl Controller {
    /// Log reads waiting for their agent's answer.
    pub fn log_reads_in_flight(&self) -> usize {
        self.logs.in_flight.len()
    }

    /// A read of a container's log: sent to its node now, or queued behind that node's reads.
    /// An unknown container or a node without a stream is answered at once.
    pub(crate) fn read_log(
        &mut self,
        reply: ReplyTo,
        container: u64,
        file: v1::LogStream,
        tail: Option<u64>,
    ) {
        let Some(node) = self.container_node(container).map(str::to_owned) else {
            self.reply(reply, Reply::Log(Err(LogError::UnknownContainer(container))));
            return;
        };
        if self.agents.get(&node).is_none_or(|l| l.stream == 0) {
            self.reply(reply, Reply::Log(Err(LogError::NodeNotConnected { node, container })));
            return;
        }
        self.logs.waiting.entry(node.clone()).or_default().push_back(Wanted { reply, container, file, tail });
        self.pump_log_reads(&node);
    }

    /// Sends `node`'s waiting reads while it has turns free.
    fn pump_log_reads(&mut self, node: &str) {
        loop {
            let busy = self.logs.in_flight.values().filter(|p| p.node == node).count();
            if busy >= LOG_READS_PER_NODE {
                return;
            }
            let Some(wanted) = self.logs.waiting.get_mut(node).and_then(VecDeque::pop_front) else {
                self.logs.waiting.remove(node);
                return;
            };
            self.send_log_read(node, wanted);
        }
    }

    fn send_log_read(&mut self, node: &str, w: Wanted) {
        let not_connected = || LogError::NodeNotConnected { node: node.to_owned(), container: w.container };
        let stream = self.agents.get(node).map_or(0, |l| l.stream);
        if stream == 0 {
            self.reply(w.reply, Reply::Log(Err(not_connected())));
            return;
        }
        self.logs.last_request += 1;
        let request_id = self.logs.last_request;
        let read = v1::ReadLog {
            request_id,
            container_id: w.container,
            stream: w.file as i32,
            tail_bytes: w.tail,
            cluster_id: self.cluster_of(w.container).to_wire(),
        };
        if !self.send_to(node, ToAgent::ReadLog(read)) {
            self.reply(w.reply, Reply::Log(Err(not_connected())));
            return;
        }
        let pending = InFlight { node: node.to_owned(), container: w.container, stream, reply: w.reply };
        self.logs.in_flight.insert(request_id, pending);
    }

    /// Hands an agent's `LogChunk` to the read waiting for it. An answer to a read this
    /// controller did not send to this very stream is ignored.
    pub(crate) fn log_chunk(&mut self, node: &str, stream: StreamId, chunk: v1::LogChunk) {
        let ours =
            self.logs.in_flight.get(&chunk.request_id).is_some_and(|p| p.node == node && p.stream == stream);
        let Some(pending) = ours.then(|| self.logs.in_flight.remove(&chunk.request_id)).flatten() else {
            tracing::debug!(%node, request = chunk.request_id, "log answer for no read in flight");
            return;
        };
        let outcome = if chunk.error.is_empty() {
            Ok(LogChunk { data: chunk.data, file_size_bytes: chunk.file_size_bytes })
        } else {
            Err(LogError::Agent(chunk.error))
        };
        self.reply(pending.reply, Reply::Log(outcome));
        self.pump_log_reads(node);
    }

    /// Fails the log reads sent to `node` on the streams `gone` picks: those streams have ended
    /// (or been replaced), and their answers will never come. Reads still waiting for a turn
    /// then go on the node's current stream, or fail if it has none.
    pub(crate) fn fail_log_reads(&mut self, node: &str, gone: impl Fn(StreamId) -> bool) {
        let failed: Vec<u64> = self
            .logs
            .in_flight
            .iter()
            .filter(|(_, p)| p.node == node && gone(p.stream))
            .map(|(id, _)| *id)
            .collect();
        for id in failed {
            if let Some(p) = self.logs.in_flight.remove(&id) {
                let e = LogError::Disconnected { node: node.to_owned(), container: p.container };
                self.reply(p.reply, Reply::Log(Err(e)));
            }
        }
        self.pump_log_reads(node);
    }

    /// A `ReadLog` never reached its agent.
    pub(crate) fn log_read_undelivered(&mut self, request_id: u64) {
        if let Some(p) = self.logs.in_flight.remove(&request_id) {
            let e = LogError::NodeNotConnected { node: p.node.clone(), container: p.container };
            self.reply(p.reply, Reply::Log(Err(e)));
            self.pump_log_reads(&p.node);
        }
    }

    /// The caller of a read stopped waiting: it leaves its node's queue or frees its turn.
    pub(crate) fn abandon_log_read(&mut self, reply: ReplyTo) {
        if let Some((&id, _)) = self.logs.in_flight.iter().find(|(_, p)| p.reply == reply) {
            if let Some(p) = self.logs.in_flight.remove(&id) {
                self.pump_log_reads(&p.node);
            }
            return;
        }
        for queue in self.logs.waiting.values_mut() {
            queue.retain(|w| w.reply != reply);
        }
        self.logs.waiting.retain(|_, q| !q.is_empty());
    }
}
