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

/// The cluster id of a scheduler run (see "Cluster ids" in `agent.proto`): 128 random bits,
/// 32 lowercase hex digits on the wire, or the legacy cluster (the empty string), which is what a
/// peer older than cluster ids sends. A container is named by (cluster id, container id), so ids
/// repeated by a scheduler on fresh state never name an agent's older containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ClusterId(u128);

/// Why a cluster id from the wire, a file or a directory name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdError(String);

impl std::fmt::Display for ClusterIdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cluster id {:?} is not 32 lowercase hex digits (nor empty, the legacy cluster)", self.0)
    }
}

impl std::error::Error for ClusterIdError {}

impl ClusterId {
    /// The legacy cluster: containers launched by, or for, a peer older than cluster ids.
    pub const LEGACY: ClusterId = ClusterId(0);

    /// A cluster id from 128 bits (0 is the legacy cluster).
    pub const fn from_bits(bits: u128) -> ClusterId {
        ClusterId(bits)
    }

    /// Whether this is the legacy cluster.
    pub const fn is_legacy(self) -> bool {
        self.0 == 0
    }

    /// Reads the wire form: 32 lowercase hex digits, or the empty string (legacy). Exactly one
    /// spelling per id, so it is also a safe part of a file or cgroup name; all zeros would
    /// read as legacy and is refused.
    pub fn parse(text: &str) -> Result<ClusterId, ClusterIdError> {
        if text.is_empty() {
            return Ok(ClusterId::LEGACY);
        }
        let refused = || ClusterIdError(text.chars().take(64).collect());
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(refused());
        }
        match u128::from_str_radix(text, 16) {
            Ok(0) | Err(_) => Err(refused()),
            Ok(bits) => Ok(ClusterId(bits)),
        }
    }

    /// The wire form: 32 lowercase hex digits, empty for the legacy cluster.
    pub fn to_wire(self) -> String {
        self.to_string()
    }
}

/// The wire form (see [`ClusterId::to_wire`]).
impl std::fmt::Display for ClusterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_legacy() { Ok(()) } else { write!(f, "{:032x}", self.0) }
    }
}

/// Whether `text` can be an agent's `Register.instance_id`: 32 lowercase hex digits (128 random
/// bits, one spelling, not all zeros), or empty (an agent older than instance ids). The agent
/// makes one and keeps it in its work root; the scheduler refuses anything else.
pub fn is_instance_id(text: &str) -> bool {
    text.is_empty()
        || (text.len() == 32
            && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && text.bytes().any(|b| b != b'0'))
}

/// Package `gantry.agent.v1`: messages and, with the `grpc` feature, `v1::agent_service_client`
/// (the agent's side) and `v1::agent_service_server` (the scheduler's side).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    // What `tonic::include_proto!` expands to, spelled out so the messages build without tonic.
    include!(concat!(env!("OUT_DIR"), "/gantry.agent.v1.rs"));

    /// The encoded `FileDescriptorSet` of the protocol, for gRPC reflection or tooling.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/gantry_agent_v1_descriptor.bin"));
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
            let kill = v1::Kill { container_id: 1, grace_ms, ..Default::default() };
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
            let read =
                v1::ReadLog { request_id: 1, container_id: 2, stream: 1, tail_bytes, ..Default::default() };
            assert_eq!(
                v1::ReadLog::decode(read.encode_to_vec().as_slice()).expect("decodes").tail_bytes,
                tail_bytes
            );
        }
    }

    #[test]
    fn cluster_ids_have_one_spelling_and_the_empty_one_is_legacy() {
        use super::ClusterId;
        assert_eq!(ClusterId::parse(""), Ok(ClusterId::LEGACY));
        assert_eq!(ClusterId::LEGACY.to_wire(), "");
        let id = ClusterId::from_bits(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(id.to_wire(), "0123456789abcdef0011223344556677");
        assert_eq!(ClusterId::parse(&id.to_wire()), Ok(id));
        for bad in [
            "0123456789ABCDEF0011223344556677", // upper case: a second spelling
            "0123456789abcdef001122334455667",  // 31 digits
            "+123456789abcdef0011223344556677", // a sign u128 parsing would take
            "00000000000000000000000000000000", // would read as legacy
            "../../etc/passwd",
            "0123456789abcdef001122334455667g",
        ] {
            assert!(ClusterId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn instance_ids_are_32_lowercase_hex_digits_or_empty() {
        assert!(super::is_instance_id(""));
        assert!(super::is_instance_id("0123456789abcdef0011223344556677"));
        for bad in [
            "0123456789ABCDEF0011223344556677",
            "0123456789abcdef001122334455667",
            "00000000000000000000000000000000",
            " 0123456789abcdef001122334455667",
            "node-a",
        ] {
            assert!(!super::is_instance_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_descriptor_set_describes_the_service() {
        let fds = super::v1::FILE_DESCRIPTOR_SET;
        let has = |needle: &[u8]| fds.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"gantry.agent.v1") && has(b"AgentService") && has(b"Connect"));
    }
}
