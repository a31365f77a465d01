//! The client's translation between the agent's types and the protocol's messages: the
//! `Register`, statuses, exits, log chunks, and the container keys and log reads that come
//! down. A `Launch` is translated and checked in [`crate::launch_spec`].

use std::collections::BTreeMap;

use gantry_proto::v1;
use gantry_proto::v1::agent_message::Msg as Up;

use super::{ClientOptions, LiveState, RegistrationReport, SchedulerCommand, StatusReport};
use crate::executor::{LogRead, LogStream};
use crate::model::{ClusterId, ContainerExit, ContainerKey, ExitReason};

pub(super) fn up(msg: Up) -> v1::AgentMessage {
    v1::AgentMessage { msg: Some(msg) }
}

/// A container named on the wire: an id that is not 0 and a valid cluster id.
pub(super) fn key_from_wire(container_id: u64, cluster_id: &str) -> Option<ContainerKey> {
    let cluster = ClusterId::parse(cluster_id).ok()?;
    (container_id != 0).then_some(ContainerKey::new(cluster, container_id))
}

/// Checks a `ReadLog` from the wire: a container id, a cluster id and a stream this agent knows.
pub(super) fn read_log_from_wire(read: &v1::ReadLog) -> Result<SchedulerCommand, String> {
    if read.container_id == 0 {
        return Err("container id 0 is not a valid id".into());
    }
    let cluster = ClusterId::parse(&read.cluster_id).map_err(|e| e.to_string())?;
    let stream = match v1::LogStream::try_from(read.stream) {
        Ok(v1::LogStream::Stdout) => LogStream::Stdout,
        Ok(v1::LogStream::Stderr) => LogStream::Stderr,
        Ok(v1::LogStream::Unspecified) | Err(_) => {
            return Err(format!("unknown log stream {}: this agent serves stdout and stderr", read.stream));
        }
    };
    Ok(SchedulerCommand::ReadLog {
        request_id: read.request_id,
        key: ContainerKey::new(cluster, read.container_id),
        stream,
        tail: read.tail_bytes,
    })
}

/// A log read's answer in wire form. An error that is empty would read as success, so it is
/// given a text.
pub(super) fn log_chunk(request_id: u64, outcome: Result<LogRead, String>) -> v1::LogChunk {
    match outcome {
        Ok(LogRead { data, file_size_bytes }) => {
            v1::LogChunk { request_id, data, file_size_bytes, error: String::new() }
        }
        Err(error) => v1::LogChunk {
            request_id,
            error: if error.is_empty() { "the log could not be read".into() } else { error },
            ..Default::default()
        },
    }
}

/// A container exit in wire form.
pub fn exit_to_wire(exit: &ContainerExit) -> v1::ContainerExited {
    let (reason, signal) = match exit.reason {
        ExitReason::Exited { .. } => (v1::ExitReason::Exited, 0),
        ExitReason::Signaled { signal } => (v1::ExitReason::Signaled, signal),
        ExitReason::KilledByRequest => (v1::ExitReason::KilledByRequest, 0),
        ExitReason::MemoryLimit => (v1::ExitReason::MemoryLimit, 0),
        ExitReason::DiskLimit => (v1::ExitReason::DiskLimit, 0),
        // The wire has no fenced reason: LOST is the scheduler's word for a container that
        // ended through no fault of its own and is rerun without counting a failure, which is
        // what a fenced one is (and the scheduler has usually declared it lost already).
        ExitReason::Lost | ExitReason::Fenced => (v1::ExitReason::Lost, 0),
    };
    let memory = exit.memory.unwrap_or_default();
    v1::ContainerExited {
        container_id: exit.container_id,
        reason: reason as i32,
        exit_code: exit.reason.exit_code(),
        signal,
        finished_at_ms: exit.finished_at_ms,
        cluster_id: exit.cluster.to_wire(),
        memory_used_bytes: memory.used_bytes,
        memory_limit_bytes: memory.limit_bytes,
        disk_used_bytes: exit.disk.map_or(0, |d| d.used_bytes),
        disk_limit_bytes: exit.disk.map_or(0, |d| d.limit_bytes),
    }
}

/// A node condition in wire form.
fn condition_to_wire(c: &crate::conditions::NodeCondition) -> v1::NodeCondition {
    v1::NodeCondition { r#type: c.kind.to_owned(), reason: c.reason.clone(), since_ms: c.since_ms }
}

fn resources_to_wire(r: crate::model::Resources) -> v1::Resources {
    v1::Resources { cpu_millis: r.cpu_millis, memory_bytes: r.memory_bytes, gpus: r.gpus }
}

/// A usage report in wire form.
pub(super) fn status_to_wire(seq: u64, sent_at_ms: u64, report: StatusReport) -> v1::Status {
    let h = report.host;
    v1::Status {
        seq,
        sent_at_ms,
        host: Some(v1::HostUsage {
            cpu_cores: h.cpu_cores,
            cpu_usage: h.cpu_usage,
            cpu_seconds_total: h.cpu_seconds_total,
            memory_total_bytes: h.memory_total_bytes,
            memory_available_bytes: h.memory_available_bytes,
            memory_used_bytes: h.memory_used_bytes,
        }),
        containers: report
            .containers
            .iter()
            .map(|c| v1::ContainerUsage {
                container_id: c.container_id,
                cpu_seconds: c.cpu_seconds,
                memory_working_set_bytes: c.memory_working_set_bytes,
                memory_limit_bytes: c.memory_limit_bytes,
                processes: c.processes,
            })
            .collect(),
        gpus: report
            .gpus
            .into_iter()
            .map(|g| v1::GpuUsage {
                index: g.index,
                memory_used_bytes: g.memory_used_bytes,
                utilization_percent: g.utilization_percent,
                container_ids: g.containers,
            })
            .collect(),
        conditions: report.conditions.iter().map(condition_to_wire).collect(),
    }
}

/// The `Register` that opens a stream: the core's report, and every exit the scheduler has not
/// acknowledged.
pub(super) fn register(
    report: RegistrationReport,
    unacked: &BTreeMap<ContainerKey, ContainerExit>,
    options: &ClientOptions,
) -> v1::AgentMessage {
    let RegistrationReport { node, containers, conditions } = report;
    let register = v1::Register {
        node_name: node.name,
        rack: node.rack,
        labels: node.labels.into_iter().collect(),
        capacity: Some(resources_to_wire(node.capacity)),
        allocatable: Some(resources_to_wire(node.allocatable)),
        gpus: node
            .gpus
            .iter()
            .map(|g| v1::Gpu {
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                memory_total_bytes: g.memory_total_bytes,
                mig: g.mig,
            })
            .collect(),
        gpu_note: node.gpu_note.unwrap_or_default(),
        // An exit the scheduler has not acknowledged wins over a stale "live" entry.
        containers: containers
            .iter()
            .filter(|c| !unacked.contains_key(&c.key))
            .map(|c| v1::LiveContainer {
                container_id: c.key.id,
                cluster_id: c.key.cluster.to_wire(),
                app_id: c.app_id,
                state: match c.state {
                    LiveState::Starting => v1::ContainerState::Starting,
                    LiveState::Running => v1::ContainerState::Running,
                    LiveState::Killing => v1::ContainerState::Killing,
                } as i32,
                started_at_ms: c.started_at_ms,
            })
            .collect(),
        unacked_exits: unacked.values().map(exit_to_wire).collect(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        agent_started_at_ms: options.agent_started_at_ms,
        reports_cluster_ids: true,
        instance_id: options.instance_id.clone(),
        conditions: conditions.iter().map(condition_to_wire).collect(),
    };
    up(Up::Register(register))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterId, ExitReason, MemorySeen};

    #[test]
    fn exits_map_to_wire_reasons_and_codes() {
        let w = exit_to_wire(&ContainerExit::new(
            ContainerKey::new(ClusterId::LEGACY, 3),
            ExitReason::Signaled { signal: 11 },
            5,
        ));
        assert_eq!((w.reason, w.exit_code, w.signal), (v1::ExitReason::Signaled as i32, 139, 11));
        assert_eq!((w.memory_used_bytes, w.memory_limit_bytes), (0, 0), "nothing known: zero");
        let w = exit_to_wire(&ContainerExit {
            memory: Some(MemorySeen { used_bytes: 1100 << 20, limit_bytes: 1 << 30 }),
            ..ContainerExit::new(ContainerKey::new(ClusterId::LEGACY, 3), ExitReason::MemoryLimit, 5)
        });
        assert_eq!((w.reason, w.exit_code, w.signal), (v1::ExitReason::MemoryLimit as i32, 137, 0));
        assert_eq!((w.memory_used_bytes, w.memory_limit_bytes), (1100 << 20, 1 << 30));
        let w = exit_to_wire(&ContainerExit::new(
            ContainerKey::new(ClusterId::from_bits(9), 3),
            ExitReason::Fenced,
            5,
        ));
        assert_eq!((w.reason, w.exit_code), (v1::ExitReason::Lost as i32, 137), "fenced reads as lost");
        assert_eq!(w.cluster_id, "00000000000000000000000000000009", "the exit names its cluster");
    }
}
