//! The etcd store against a real etcd (issue 19): rounds in parts, snapshots, a half-written
//! round dropped, fenced writes of a deposed leader refused, large values in parts, and the copy
//! of a sled store. Skipped, saying so on stderr, only where etcd is not installed (`make deps`);
//! any other start error fails the test.

use etcd_client::TxnOp;
use plexus_coordinator::Error;
use plexus_coordinator::etcd::{Etcd, EtcdStore, EtcdUrl, LeaseId, prefix_end};
use plexus_coordinator::store::{Batch, SledStore, Store};
use plexus_e2e::etcd::EtcdCluster;
use plexus_proto::JobId;
use plexus_scheduler::core::{Core, CoreConfig};
use plexus_scheduler::placer::heuristic;
use plexus_scheduler::spec::{Format, parse};

// The e2e tests' gate, shared by path: this crate dev-depends on plexus-e2e, whose tests are
// not a library.
#[path = "../../e2e/tests/support/require.rs"]
mod require;

/// One etcd member and a connection under `prefix`, or `None` (the test is skipped, and says so)
/// where etcd is not installed; any other start error fails the test.
fn etcd(prefix: &str) -> Option<(EtcdCluster, Etcd)> {
    if !require::require(&[require::ETCD]) {
        return None;
    }
    let cluster = EtcdCluster::start(1).unwrap_or_else(|e| panic!("starting one etcd member: {e}"));
    let url: EtcdUrl = format!("{}/{prefix}", cluster.url()).parse().unwrap();
    let e = Etcd::connect(&url).expect("connecting to the test etcd");
    Some((cluster, e))
}

/// Wins `election` on a lease of its own and fences `e`'s writes on it: `e` writes as the leader.
fn lead(e: &Etcd, election: &str) -> LeaseId {
    let (etcd, election) = (e.clone(), election.as_bytes().to_vec());
    let (lease, fence) = e
        .block(async move {
            let lease = etcd.grant_lease(5).await?;
            let fence = etcd.campaign(election, "me".into(), lease).await?;
            Ok((lease, fence))
        })
        .unwrap();
    e.set_fence(Some(fence));
    lease
}

/// Gives `lease` back: the leader key goes, and `e`, still fenced on it, is a deposed leader.
fn depose(e: &Etcd, lease: LeaseId) {
    let etcd = e.clone();
    e.block(async move { etcd.revoke_lease(lease).await }).unwrap();
}

/// A core holding one job of `n` subtasks, and the batch that stores it.
fn job_batch(n: u32) -> (Core, JobId, Batch) {
    let mut core = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
    let job = JobId::random();
    let spec = parse(
        &format!("name = \"j\"\n[[task]]\nname = \"a\"\nkind = \"noop\"\nreplicas = {n}\n"),
        Format::Toml,
        "j.toml",
    )
    .unwrap();
    core.submit(job, spec, 5).unwrap();
    let mut b = Batch::default();
    let j = core.job(job).unwrap();
    b.job(j.record());
    for (i, s) in j.subtasks().iter().enumerate() {
        b.subtask(job, i as u32, s);
    }
    (core, job, b)
}

fn log_entries(e: &Etcd) -> usize {
    let from = e.key("/state/log/");
    e.range(from.clone(), prefix_end(&from)).unwrap().len()
}

#[test]
fn rounds_come_back_whole_across_stores_even_cut_into_many_parts() {
    let Some((_cluster, e)) = etcd("rounds") else { return };
    let (_, job, batch) = job_batch(2_000);
    let store = EtcdStore::new(e.clone()).with_part(4096);
    assert!(store.load().unwrap().jobs.is_empty());
    store.commit(batch).unwrap();
    let parts = log_entries(&e);
    assert!(parts > 3, "a 2,000-subtask round in 4 KiB parts is several entries, got {parts}");
    let (_, other, b2) = job_batch(3);
    store.commit(b2).unwrap();
    let back = EtcdStore::new(e.clone()).load().unwrap();
    assert_eq!(back.jobs.len(), 2);
    assert_eq!(back.subtasks.iter().filter(|(j, _, _)| *j == job).count(), 2_000);
    assert_eq!(back.subtasks.iter().filter(|(j, _, _)| *j == other).count(), 3);
    let mut core = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
    core.restore(back, 10).unwrap();
    assert_eq!(core.job(job).unwrap().total(), 2_000);
}

/// A succeeded subtask's output digests come back from etcd, and the restored core hands them
/// out.
#[test]
fn output_digests_come_back_from_etcd() {
    let Some((_cluster, e)) = etcd("digests") else { return };
    let (core, job, _) = job_batch(1);
    let digest = plexus_proto::Digest::of(b"the output");
    let mut done = core.job(job).unwrap().subtasks()[0].clone();
    done.state = plexus_proto::SubtaskState::Succeeded;
    done.outputs = vec![("o".into(), 10)];
    done.digests = [("o".to_string(), digest)].into();
    let mut batch = Batch::default();
    batch.job(core.job(job).unwrap().record());
    batch.subtask(job, 0, &done);
    let store = EtcdStore::new(e.clone());
    store.commit(batch).unwrap();
    let back = EtcdStore::new(e.clone()).load().unwrap();
    let (_, _, s) = back.subtasks.iter().find(|(j, i, _)| *j == job && *i == 0).unwrap();
    assert_eq!(s.digests, done.digests);
    let mut restored = Core::new(CoreConfig::default(), heuristic("least-loaded", 1).unwrap());
    restored.restore(back, 10).unwrap();
    let o = plexus_proto::ObjectId { job, task: "a".into(), rank: 0, name: "o".into() };
    assert_eq!(restored.digest_of(&o), Some(digest));
}

#[test]
fn a_round_whose_last_part_was_never_written_is_dropped() {
    let Some((_cluster, e)) = etcd("partial") else { return };
    let (_, kept, batch) = job_batch(5);
    let store = EtcdStore::new(e.clone());
    store.commit(batch).unwrap();
    // A leader that died between the parts of its next round: one part, not the last.
    let seq = 2u64;
    let mut entry = vec![1u8];
    entry.extend_from_slice(&seq.to_be_bytes());
    entry.push(0);
    entry.extend_from_slice(b"half of a round");
    e.write(vec![TxnOp::put(e.key(&format!("/state/log/{seq:016x}")), entry, None)]).unwrap();
    let next = EtcdStore::new(e.clone());
    let snap = next.load().unwrap();
    assert_eq!(snap.jobs.len(), 1);
    assert_eq!(snap.jobs[0].id, kept);
    // The next leader appends after it, and the half round stays dropped.
    let (_, later, b) = job_batch(2);
    next.commit(b).unwrap();
    let ids: Vec<JobId> = EtcdStore::new(e.clone()).load().unwrap().jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&kept) && ids.contains(&later), "{ids:?}");
}

#[test]
fn a_snapshot_replaces_the_log_it_covers() {
    let Some((_cluster, e)) = etcd("snap") else { return };
    let store = EtcdStore::new(e.clone()).with_part(8192);
    let mut jobs = Vec::new();
    for n in [10, 20, 30] {
        let (_, job, b) = job_batch(n);
        store.commit(b).unwrap();
        jobs.push(job);
    }
    assert_eq!(log_entries(&e), 3);
    store.snapshot_now().unwrap();
    assert_eq!(log_entries(&e), 0, "the snapshot's pointer deletes the log it covers");
    let (_, last, b) = job_batch(1);
    store.commit(b).unwrap();
    assert_eq!(log_entries(&e), 1);
    let snap = EtcdStore::new(e.clone()).load().unwrap();
    assert_eq!(snap.jobs.len(), 4);
    assert_eq!(snap.subtasks.len(), 61);
    assert!(snap.jobs.iter().any(|j| j.id == last));
    // A second snapshot replaces the first one's parts.
    store.snapshot_now().unwrap();
    let snaps = e.key("/state/snap/");
    let keys = e.range(snaps.clone(), prefix_end(&snaps)).unwrap();
    let seqs: std::collections::BTreeSet<String> =
        keys.iter().map(|(k, _)| String::from_utf8_lossy(&k[snaps.len()..snaps.len() + 16]).into_owned()).collect();
    assert_eq!(seqs.len(), 1, "{seqs:?}");
    assert_eq!(EtcdStore::new(e.clone()).load().unwrap().jobs.len(), 4);
}

#[test]
fn a_deposed_leaders_writes_are_refused() {
    let Some((_cluster, e)) = etcd("fence") else { return };
    let lease = lead(&e, "/fence/election");
    let store = EtcdStore::new(e.clone());
    let (_, first, b) = job_batch(2);
    store.commit(b).expect("the leader writes");
    depose(&e, lease);
    let (_, second, b) = job_batch(2);
    let refused = store.commit(b).expect_err("a write after the lease is gone is refused");
    assert!(matches!(refused, Error::Fenced), "{refused}");
    let kv = e.spaces().policy;
    assert!(matches!(kv.put(b"weights", b"w"), Err(Error::Fenced)), "namespaces are fenced too");
    e.set_fence(None);
    let ids: Vec<JobId> = EtcdStore::new(e.clone()).load().unwrap().jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, vec![first], "the refused round left nothing (second was {second})");
}

#[test]
fn large_values_are_stored_in_parts_and_replaced_whole() {
    let Some((_cluster, e)) = etcd("kv") else { return };
    let kv = e.spaces().policy;
    // 2.5 MiB that does not compress: over etcd's 1.5 MiB request limit.
    let mut big = vec![0u8; 5 << 19];
    let mut x = 0x9e3779b97f4a7c15u64;
    for b in big.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    kv.put(b"weights", &big).unwrap();
    assert_eq!(kv.get(b"weights").unwrap().as_deref(), Some(&big[..]));
    let chunks = e.key("/chunks/policy/");
    assert_eq!(e.range(chunks.clone(), prefix_end(&chunks)).unwrap().len(), 3);
    kv.put(b"weights", b"small").unwrap();
    assert_eq!(kv.get(b"weights").unwrap().as_deref(), Some(&b"small"[..]));
    assert!(
        e.range(chunks.clone(), prefix_end(&chunks)).unwrap().is_empty(),
        "the parts went with the value they held"
    );
    kv.put(b"e\x00\x01", b"x").unwrap();
    let scanned: Vec<Vec<u8>> = kv.scan(b"e").unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(scanned, vec![b"e\x00\x01".to_vec()]);
    kv.remove(&[b"e\x00\x01".to_vec(), b"absent".to_vec()]).unwrap();
    assert!(kv.scan(b"e").unwrap().is_empty());
}

/// Experiences arrive by the thousand: `put_many` writes them in few transactions (inside
/// etcd's 128 operations and 1.5 MiB each), replaces a large value's parts, and a deposed
/// leader's batch is refused whole.
#[test]
fn many_records_are_written_in_batched_transactions() {
    let Some((_cluster, e)) = etcd("many") else { return };
    let kv = e.spaces().policy;
    let big = vec![7u8; 3 << 19];
    kv.put(b"e-big", &big).unwrap();
    let chunks = e.key("/chunks/policy/");
    assert_eq!(e.range(chunks.clone(), prefix_end(&chunks)).unwrap().len(), 2);
    // 1,000 records of 3 KiB (3 MiB in all: more than one transaction by count and by size),
    // one of them replacing the large value, and one large value of their own.
    let mut items: Vec<(Vec<u8>, Vec<u8>)> =
        (0..1000u32).map(|i| (format!("e{i:05}").into_bytes(), vec![(i % 251) as u8; 3 << 10])).collect();
    items.push((b"e-big".to_vec(), b"small now".to_vec()));
    items.push((b"f-large".to_vec(), vec![9u8; 5 << 19]));
    let before = e.range(e.key("/"), prefix_end(&e.key("/"))).unwrap().len();
    kv.put_many(&items).unwrap();
    let stored = kv.scan(b"").unwrap();
    assert_eq!(stored.len(), 1002);
    for (k, v) in &items {
        assert_eq!(kv.get(k).unwrap().as_deref(), Some(&v[..]), "{}", String::from_utf8_lossy(k));
    }
    assert_eq!(e.range(chunks.clone(), prefix_end(&chunks)).unwrap().len(), 3, "only f-large's parts are left");
    assert!(e.range(e.key("/"), prefix_end(&e.key("/"))).unwrap().len() > before);

    // Fenced on a leader key that is gone: nothing of the batch is written.
    let lease = lead(&e, "/many/election");
    depose(&e, lease);
    let fresh: Vec<(Vec<u8>, Vec<u8>)> =
        (0..200u32).map(|i| (format!("g{i:05}").into_bytes(), b"x".to_vec())).collect();
    assert!(matches!(kv.put_many(&fresh), Err(Error::Fenced)), "a deposed leader's batch is refused");
    e.set_fence(None);
    assert!(kv.scan(b"g").unwrap().is_empty());
}

#[test]
fn a_sled_store_is_copied_into_an_empty_prefix_only() {
    let Some((cluster, _unused)) = etcd("unused") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (sled, _) = SledStore::open(&dir.path().join("state.sled")).unwrap();
    let (_, job, b) = job_batch(7);
    sled.commit(b).unwrap();
    let spaces = sled.spaces().unwrap();
    spaces.queues.put(b"batch", &0.5f64.to_le_bytes()).unwrap();
    spaces.security.put(b"meta/cluster", b"c1").unwrap();
    let to: EtcdUrl = format!("{}/copied", cluster.url()).parse().unwrap();
    let copied = plexus_coordinator::etcd::copy_sled(&sled, &to).unwrap();
    assert_eq!((copied.records, copied.queues, copied.security), (8, 1, 1), "{copied}");
    let target = Etcd::connect(&to).unwrap();
    let snap = EtcdStore::new(target.clone()).load().unwrap();
    assert_eq!(snap.jobs[0].id, job);
    assert_eq!(snap.subtasks.len(), 7);
    assert_eq!(
        plexus_coordinator::store::queue_shares(target.spaces().queues.as_ref()).unwrap(),
        vec![("batch".to_string(), 0.5)]
    );
    let again = plexus_coordinator::etcd::copy_sled(&sled, &to).unwrap_err();
    assert!(again.to_string().contains("already holds"), "{again}");
}

/// A placement record comes back one at a time from etcd (`plexus explain` after a takeover),
/// and the load a new leader restores from leaves it out.
#[test]
fn placement_records_come_back_one_at_a_time() {
    let Some((_cluster, e)) = etcd("placements") else { return };
    let (_, job, mut batch) = job_batch(1);
    let record = plexus_scheduler::core::PlacementRecord {
        decision: 5,
        placer: "fastest".into(),
        attempt: 1,
        chosen: plexus_proto::WorkerId::random(),
        exploratory: false,
        reason: "least estimated time".into(),
        decided_at: 9,
        candidates: vec![],
        omitted: 0,
    };
    batch.placement(job, 0, &record);
    EtcdStore::new(e.clone()).commit(batch).unwrap();
    let next = EtcdStore::new(e.clone());
    let snap = next.load().unwrap();
    assert_eq!(snap.subtasks.len(), 1);
    let back = next.placement(job, 0).unwrap().expect("stored");
    assert_eq!((back.decision, back.chosen, back.reason.as_str()), (5, record.chosen, "least estimated time"));
    assert!(next.placement(job, 1).unwrap().is_none());
    // A store that has not loaded yet reads the state first.
    assert_eq!(EtcdStore::new(e).placement(job, 0).unwrap().map(|p| p.decision), Some(5));
}

fn job_ids(snap: &plexus_scheduler::core::Snapshot) -> std::collections::BTreeSet<JobId> {
    snap.jobs.iter().map(|j| j.id).collect()
}

/// A standby follows the leader's log while it waits (issue 35's takeover): what it has read is
/// not read again when it takes over, and a round the leader is still writing is read whole on
/// a later pass, not dropped.
#[test]
fn a_standby_reads_on_from_what_it_followed() {
    let Some((_cluster, e)) = etcd("follow") else { return };
    let leader = EtcdStore::new(e.clone()).with_part(256);
    let standby = EtcdStore::new(e.clone());
    let (_, first, b) = job_batch(10);
    leader.commit(b).unwrap();
    let from = e.key("/state/log/");
    let first_round = e.range(from.clone(), prefix_end(&from)).unwrap();
    standby.follow().unwrap();
    // A round of many parts whose last part the leader has not written yet.
    let (_, second, b) = job_batch(40);
    leader.commit(b).unwrap();
    let entries = e.range(from.clone(), prefix_end(&from)).unwrap();
    assert!(entries.len() > first_round.len() + 2, "the round is in parts: {}", entries.len());
    let (last_key, last_part) = entries.last().cloned().unwrap();
    e.write(vec![TxnOp::delete(last_key.clone(), None)]).unwrap();
    standby.follow().unwrap();
    e.write(vec![TxnOp::put(last_key, last_part, None)]).unwrap();
    let (_, third, b) = job_batch(5);
    leader.commit(b).unwrap();
    standby.follow().unwrap();
    // What it followed is not read again: the first round's entries, gone from etcd, are still
    // there for the standby (a fresh load no longer sees it).
    e.write(first_round.iter().map(|(k, _)| TxnOp::delete(k.clone(), None)).collect()).unwrap();
    let fresh = EtcdStore::new(e.clone()).load().unwrap();
    assert_eq!(job_ids(&fresh), [second, third].into());
    let snap = standby.load().unwrap();
    assert_eq!(job_ids(&snap), [first, second, third].into());
    assert_eq!(snap.subtasks.len(), 55);
}

/// A snapshot written after the standby last read deletes log entries it had not applied: it
/// reads the snapshot again rather than the log after it.
#[test]
fn a_standby_overtaken_by_a_snapshot_reads_it_again() {
    let Some((_cluster, e)) = etcd("overtaken") else { return };
    let leader = EtcdStore::new(e.clone());
    let standby = EtcdStore::new(e.clone());
    let (_, first, b) = job_batch(3);
    leader.commit(b).unwrap();
    standby.follow().unwrap();
    let (_, second, b) = job_batch(4);
    leader.commit(b).unwrap();
    leader.snapshot_now().unwrap();
    assert_eq!(log_entries(&e), 0);
    let (_, third, b) = job_batch(5);
    leader.commit(b).unwrap();
    let snap = standby.load().unwrap();
    assert_eq!(job_ids(&snap), [first, second, third].into());
    assert_eq!(snap.subtasks.len(), 12);
    // And it leads on from there: its next round is read back after the others.
    let (_, fourth, b) = job_batch(1);
    standby.commit(b).unwrap();
    assert_eq!(job_ids(&EtcdStore::new(e.clone()).load().unwrap()), [first, second, third, fourth].into());
}
