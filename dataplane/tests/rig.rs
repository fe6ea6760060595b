//! The transport across the namespace rig (`scripts/rails-rig.sh`): a rail cut while a message
//! is in flight. Needs root and iproute2; without them the test writes `SKIPPED <test>: <why>` to
//! stderr (shown even for a passing test) and returns without running, or, with
//! `PLEXUS_REQUIRE_ALL=1`, fails.

use std::time::Duration;

use plexus_dataplane::rig::{PeerProcess, Rig, pattern};
use plexus_dataplane::{Endpoint, EndpointConfig, SchedulerKind};

// The e2e tests' gate, shared by path (no dependency between the two crates).
#[path = "../../e2e/tests/support/require.rs"]
mod require;

#[test]
fn a_rail_cut_mid_transfer_still_delivers_the_message_intact() {
    if !require::require(&[require::ROOT, require::IP, require::TC]) {
        return;
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let rig = Rig::up(2, "1gbit,500mbit").expect("rig up");
    let mut args = vec!["--verify".to_string()];
    for a in rig.addrs(1) {
        args.extend(["--rail".to_string(), a.to_string()]);
    }
    let mut peer = PeerProcess::new(rig.spawn(1, env!("CARGO_BIN_EXE_plexus-rail-peer"), &args).expect("spawn peer"))
        .expect("peer ready");
    let data = pattern(96 << 20, 0x2545_f491_4f6c_dd1d);
    let want_crc = plexus_dataplane::wire::checksum(&data);
    let rt = tokio::runtime::Runtime::new().unwrap();
    for kind in SchedulerKind::ALL {
        for cut_rail in [0, 1] {
            let ep = rt
                .block_on(Endpoint::bind(EndpointConfig {
                    rails: rig.addrs(0),
                    scheduler: kind,
                    bandwidth: 125e6,
                    rail_timeout: Duration::from_millis(800),
                    ..Default::default()
                }))
                .unwrap();
            // 96 MiB over 1.5 Gbit/s takes about 0.55 s: cut the receiver's rail once a quarter
            // is sent (by the endpoint's own counters, not a timer: on a busy machine a sleeping
            // thread can wake after the transfer has ended).
            let cutter = {
                let (rig, ep) = (&rig, &ep);
                let quarter = data.len() as u64 / 4;
                move || {
                    let start = std::time::Instant::now();
                    while ep.stats().rails.iter().map(|r| r.bytes_sent).sum::<u64>() < quarter
                        && start.elapsed() < Duration::from_secs(30)
                    {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    rig.cut(1, cut_rail).expect("cut");
                }
            };
            std::thread::scope(|s| {
                s.spawn(cutter);
                rt.block_on(ep.send(&peer.addrs, 0, data.clone()))
                    .unwrap_or_else(|e| panic!("{kind}, rail {cut_rail} cut: {e}"));
            });
            let (_, tag, len, crc) = peer.next_message().unwrap();
            assert_eq!((tag, len, crc), (0, data.len() as u64, want_crc), "{kind}, rail {cut_rail} cut");
            let st = ep.stats();
            eprintln!(
                "{kind:>17}, rail {cut_rail} cut: per-rail bytes {:?}, failures {:?}, resent {}",
                st.rails.iter().map(|r| r.bytes_sent >> 20).collect::<Vec<_>>(),
                st.rails.iter().map(|r| r.failures).collect::<Vec<_>>(),
                st.resent
            );
            assert!(st.rails[cut_rail].failures >= 1, "{kind}: {st:?}");
            assert_eq!(st.bytes_acked, data.len() as u64);
            rt.block_on(ep.shutdown());
            rig.restore(1, cut_rail).unwrap();
        }
    }
}
