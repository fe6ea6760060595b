//! Embeds the rpath to libtorch (see `plexus-build`).
fn main() {
    plexus_build::libtorch_rpath();
}
