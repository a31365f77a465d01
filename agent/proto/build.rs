//! Compiles the wire protocol with `protox` (pure Rust: no `protoc` on build machines) and
//! generates prost messages plus tonic client and server with `tonic-prost-build`.

use std::path::PathBuf;

const PROTO_ROOT: &str = "proto";
const PROTO: &str = "proto/gantry/agent/v1/agent.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut compiler = protox::Compiler::new([PROTO_ROOT])?;
    // Source info carries the .proto comments into the generated docs.
    compiler.include_source_info(true).include_imports(true).open_files([PROTO])?;
    // Kept for gRPC reflection or tooling that needs the schema at run time.
    std::fs::write(out_dir.join("gantry_agent_v1_descriptor.bin"), compiler.encode_file_descriptor_set())?;
    // The service code only with the `grpc` feature; the messages are always built.
    let grpc = std::env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        // No generated `AgentServiceClient::connect(endpoint)` constructor: it would clash with
        // the `Connect` rpc's method. Callers build a `Channel` and use `AgentServiceClient::new`.
        .build_transport(false)
        // Deterministic map order (labels, env) on both sides.
        .btree_map(".")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
