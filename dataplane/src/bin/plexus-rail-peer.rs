//! A receiving data-plane peer in its own process (see `plexus_dataplane::peer`).

fn main() {
    let opts = match plexus_dataplane::peer::PeerOpts::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("plexus-rail-peer: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    if let Err(e) = rt.block_on(plexus_dataplane::peer::serve(opts)) {
        eprintln!("plexus-rail-peer: {e}");
        std::process::exit(1);
    }
}
