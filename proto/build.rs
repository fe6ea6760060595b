//! Compiles `proto/plexus.proto` with the vendored protoc, so no protoc is needed on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Only the `grpc` feature compiles the generated code; the pure part needs no protoc run.
    if std::env::var_os("CARGO_FEATURE_GRPC").is_none() {
        return Ok(());
    }
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: a build script is single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/plexus.proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&["proto/plexus.proto"], &["proto"])?;
    Ok(())
}
