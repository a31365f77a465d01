//! # gantry-proto
//!
//! The agent ↔ scheduler wire protocol: protobuf messages and the `AgentService` gRPC service
//! (one bidirectional stream per agent), generated at build time from
//! `proto/gantry/agent/v1/agent.proto` with protox and tonic-prost-build. It is a crate of its
//! own so that the agent and the scheduler share one definition without depending on each other.
//! The `.proto` file is the reference: every field, unit and evolution rule is documented there.

/// Package `gantry.agent.v1`: messages, [`v1::agent_service_client`] (the agent's side) and
/// [`v1::agent_service_server`] (the scheduler's side).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    tonic::include_proto!("gantry.agent.v1");

    /// The encoded `FileDescriptorSet` of the protocol, for gRPC reflection or tooling.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("gantry_agent_v1_descriptor");
}

#[cfg(test)]
mod tests {
    use super::v1;
    use prost::Message;

    #[test]
    fn negative_limits_and_explicit_zero_grace_survive_the_wire() {
        let launch = v1::Launch { container_id: 1, memory_bytes: -1, cpu_millis: -2, ..Default::default() };
        let back = v1::Launch::decode(launch.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!((back.memory_bytes, back.cpu_millis), (-1, -2));
        for grace_ms in [None, Some(0), Some(2500)] {
            let kill = v1::Kill { container_id: 1, grace_ms, reason: String::new() };
            assert_eq!(
                v1::Kill::decode(kill.encode_to_vec().as_slice()).expect("decodes").grace_ms,
                grace_ms
            );
        }
    }

    #[test]
    fn a_newer_peers_unknown_message_decodes_as_no_message() {
        // Field 15, length-delimited, empty: a oneof case this version does not know.
        let unknown = [15 << 3 | 2, 0];
        assert_eq!(v1::SchedulerMessage::decode(unknown.as_slice()).expect("decodes").msg, None);
        assert_eq!(v1::AgentMessage::decode(unknown.as_slice()).expect("decodes").msg, None);
    }

    #[test]
    fn the_descriptor_set_describes_the_service() {
        let fds = super::v1::FILE_DESCRIPTOR_SET;
        let has = |needle: &[u8]| fds.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"gantry.agent.v1") && has(b"AgentService") && has(b"Connect"));
    }
}
