//! # gantry-proto
//!
//! The agent ↔ scheduler wire protocol: protobuf messages and the `AgentService` gRPC service
//! (one bidirectional stream per agent), generated at build time from
//! `proto/gantry/agent/v1/agent.proto` with protox and tonic-prost-build. It is a crate of its
//! own so that the agent and the scheduler share one definition without depending on each other.
//! The `.proto` file is the reference: every field, unit and evolution rule is documented there.

/// Largest `LogChunk.data` an agent sends, bytes (4 MiB): a longer read is answered with the
/// file's last this many bytes. The cap keeps one stream message, and the agent's memory for
/// one read, bounded.
pub const MAX_LOG_CHUNK_BYTES: u64 = 4 << 20;

/// Largest message either side must accept on the stream, bytes: a full [`MAX_LOG_CHUNK_BYTES`]
/// chunk plus its envelope and the error text, with room to spare. tonic's default limit for a
/// received message is exactly 4 MiB, which a full chunk would exceed, so a scheduler must raise
/// its limit to this (`AgentServiceServer::max_decoding_message_size`).
pub const MAX_MESSAGE_BYTES: usize = (MAX_LOG_CHUNK_BYTES as usize) + (64 << 10);

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
    fn a_full_log_chunk_fits_the_message_limit_and_an_absent_tail_differs_from_zero() {
        let chunk = v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::LogChunk(v1::LogChunk {
                request_id: u64::MAX,
                data: vec![0xff; super::MAX_LOG_CHUNK_BYTES as usize],
                file_size_bytes: u64::MAX,
                error: "e".repeat(4096),
            })),
        };
        assert!(chunk.encoded_len() <= super::MAX_MESSAGE_BYTES);
        assert!(chunk.encoded_len() > 4 << 20, "the default 4 MiB limit would refuse it");
        for tail_bytes in [None, Some(0), Some(10)] {
            let read = v1::ReadLog { request_id: 1, container_id: 2, stream: 1, tail_bytes };
            assert_eq!(
                v1::ReadLog::decode(read.encode_to_vec().as_slice()).expect("decodes").tail_bytes,
                tail_bytes
            );
        }
    }

    #[test]
    fn the_descriptor_set_describes_the_service() {
        let fds = super::v1::FILE_DESCRIPTOR_SET;
        let has = |needle: &[u8]| fds.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"gantry.agent.v1") && has(b"AgentService") && has(b"Connect"));
    }
}
