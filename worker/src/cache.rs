//! The bounded, LRU-evicted object cache under `DIR/cache/<job>/<task>/<rank>/<name>`.
//!
//! Objects are immutable files, named by their [`ObjectId`]. The cache keeps an index of them in
//! memory (size, last access, pin count) and enforces its byte bound as follows:
//!
//! - "Last access" is the insert of an object, or its use as an input ([`Cache::pin`]). Serving an
//!   object to a peer does not count: the peer now holds a copy, so ours became less precious.
//! - Objects an attempt in progress uses (its inputs, and its outputs until its final report is
//!   built) are pinned via a [`Pin`] guard and are never evicted.
//! - The bound is enforced when an object is inserted: least-recently-used unpinned objects are
//!   evicted until the new object fits, and the bytes evicted are returned to the caller so that
//!   they count against the attempt that caused the insert.
//! - When the object cannot fit even after evicting everything unpinned (it is larger than the
//!   whole cache, or the rest is pinned), the insert is refused ([`Error::CacheFull`], naming
//!   the sizes) before anything is evicted or moved: the attempt that made the output, or
//!   fetched the input, fails with that error rather than the disk growing past the bound.
//!   Unpinning never evicts by itself, so an output stays available to consumers until
//!   something needs the room.
//! - At start, the index is rebuilt by scanning the directory, in mtime order (the cache sets an
//!   object's mtime on every access so this order survives restarts). Files whose path is not a
//!   valid object id are ignored, never served.
//!
//! Cached files are the worker's and read-only, in a directory only the worker can enter: inputs
//! are hard-linked into work directories only for tasks under a uid of their own (which can
//! neither write nor chmod them), and copied (or reflinked) otherwise (`runner::fetch`).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use plexus_proto::{ObjectId, pb};
use tracing::{debug, info, warn};

use crate::error::{Error, Result};

/// The object cache. Cheap to clone; all clones share one index.
#[derive(Clone, Debug)]
pub struct Cache {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    root: PathBuf,
    capacity: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<ObjectId, Entry>,
    /// Last-access tick → object, oldest first.
    order: BTreeMap<u64, ObjectId>,
    next_tick: u64,
    used: u64,
}

#[derive(Debug)]
struct Entry {
    size: u64,
    tick: u64,
    pins: u32,
}

/// Keeps an object from being evicted while it lives.
#[derive(Debug)]
pub struct Pin {
    cache: Cache,
    id: ObjectId,
}

impl Pin {
    pub fn id(&self) -> &ObjectId {
        &self.id
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut st = self.cache.lock();
        if let Some(e) = st.entries.get_mut(&self.id) {
            e.pins = e.pins.saturating_sub(1);
        }
    }
}

/// The result of [`Cache::insert`].
#[derive(Debug)]
pub struct Inserted {
    /// The new object, pinned.
    pub pin: Pin,
    pub size: u64,
    /// Bytes evicted to make room for it.
    pub evicted_bytes: u64,
}

impl State {
    fn tick(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }

    fn touch(&mut self, id: &ObjectId) {
        let tick = self.tick();
        if let Some(e) = self.entries.get_mut(id) {
            self.order.remove(&e.tick);
            e.tick = tick;
            self.order.insert(tick, id.clone());
        }
    }
}

impl Cache {
    /// Opens the cache at `root` (creating it), rebuilding the index from the files found there.
    pub fn open(root: impl Into<PathBuf>, capacity: u64) -> Result<Cache> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(Error::io("create cache dir", &root))?;
        let mut found = scan(&root)?;
        // Oldest first; ties broken by id so the order is deterministic.
        found.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
        let mut state = State::default();
        for (id, size, _) in found {
            let tick = state.tick();
            state.used += size;
            state.order.insert(tick, id.clone());
            state.entries.insert(id, Entry { size, tick, pins: 0 });
        }
        let cache = Cache { shared: Arc::new(Shared { root, capacity, state: Mutex::new(state) }) };
        let (count, used, evicted) = {
            let mut st = cache.lock();
            let evicted = cache.evict_until_fits(&mut st, 0);
            (st.entries.len(), st.used, evicted)
        };
        info!(objects = count, used, capacity, evicted, root = %cache.shared.root.display(), "object cache opened");
        Ok(cache)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The index stays consistent even if a holder panicked mid-way: every mutation is a few
        // field updates that cannot panic in between.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    pub fn capacity(&self) -> u64 {
        self.shared.capacity
    }

    /// Where the object lives (or would live) in the cache.
    pub fn path(&self, id: &ObjectId) -> PathBuf {
        self.shared.root.join(id.job.to_string()).join(&id.task).join(id.rank.to_string()).join(&id.name)
    }

    /// Bytes used by resident objects.
    pub fn used(&self) -> u64 {
        self.lock().used
    }

    pub fn contains(&self, id: &ObjectId) -> bool {
        self.lock().entries.contains_key(id)
    }

    /// The size of a resident object, without counting as an access.
    pub fn size(&self, id: &ObjectId) -> Option<u64> {
        self.lock().entries.get(id).map(|e| e.size)
    }

    /// Drops `id` from the index, for an object whose file is gone (removed behind the worker's
    /// back): the worker's reports stop listing it, so the coordinator stops sending fetchers
    /// here and makes it again if no one else holds it. True when it was listed.
    pub fn forget(&self, id: &ObjectId) -> bool {
        let mut st = self.lock();
        // Checked under the lock (inserts move their file in under it): an entry whose file is
        // back, put there by a fetch or a re-run since the caller saw it missing, stays.
        if fs::symlink_metadata(self.path(id)).is_ok() {
            return false;
        }
        let Some(e) = st.entries.remove(id) else { return false };
        st.order.remove(&e.tick);
        st.used -= e.size;
        warn!(object = %id, "cached object's file is gone; forgotten");
        true
    }

    /// The resident objects, least recently used first.
    pub fn objects(&self) -> Vec<pb::ObjectInfo> {
        let st = self.lock();
        st.order
            .values()
            .filter_map(|id| {
                st.entries.get(id).map(|e| pb::ObjectInfo {
                    object_id: id.to_string(),
                    size: e.size,
                    digest: Vec::new(),
                })
            })
            .collect()
    }

    /// Marks a resident object as used now and pins it; `None` when it is not resident.
    pub fn pin(&self, id: &ObjectId) -> Option<Pin> {
        {
            let mut st = self.lock();
            st.touch(id);
            st.entries.get_mut(id)?.pins += 1;
        }
        set_mtime_now(&self.path(id));
        Some(Pin { cache: self.clone(), id: id.clone() })
    }

    /// Moves the regular file `src` into the cache as `id` (replacing an older copy), evicting
    /// least-recently-used unpinned objects until it fits. The new object comes back pinned.
    ///
    /// `src` should be on the same file system as the cache (it is then renamed); otherwise it is
    /// copied and removed.
    pub fn insert(&self, id: &ObjectId, src: &Path) -> Result<Inserted> {
        let meta = fs::symlink_metadata(src).map_err(Error::io("inspect", src))?;
        if !meta.is_file() {
            return Err(Error::BadObject {
                object: id.to_string(),
                reason: format!("{} is not a regular file", src.display()),
            });
        }
        let size = meta.len();
        let dest = self.path(id);
        let mut st = self.lock();
        // What no eviction can free: objects running attempts use (an older copy of `id` is
        // replaced, so it does not count).
        let pinned: u64 = st.entries.iter().filter(|(k, e)| e.pins > 0 && *k != id).map(|(_, e)| e.size).sum();
        if pinned.saturating_add(size) > self.shared.capacity {
            return Err(Error::CacheFull { object: id.to_string(), size, capacity: self.shared.capacity, pinned });
        }
        // The file moves first, so that a failure leaves the index exactly as it was.
        move_into_place(src, &dest)?;
        set_mtime_now(&dest);
        let pins = match st.entries.remove(id) {
            Some(old) => {
                st.order.remove(&old.tick);
                st.used -= old.size;
                old.pins
            }
            None => 0,
        };
        let evicted_bytes = self.evict_until_fits(&mut st, size);
        let tick = st.tick();
        st.order.insert(tick, id.clone());
        st.entries.insert(id.clone(), Entry { size, tick, pins: pins + 1 });
        st.used += size;
        debug!(object = %id, size, evicted_bytes, "object cached");
        Ok(Inserted { pin: Pin { cache: self.clone(), id: id.clone() }, size, evicted_bytes })
    }

    /// Evicts least-recently-used unpinned objects until `incoming` more bytes fit (or nothing
    /// unpinned is left). Returns the bytes evicted.
    fn evict_until_fits(&self, st: &mut State, incoming: u64) -> u64 {
        let capacity = self.shared.capacity;
        let mut evicted = 0;
        let mut victims = Vec::new();
        for (tick, id) in &st.order {
            if st.used - evicted + incoming <= capacity {
                break;
            }
            if let Some(e) = st.entries.get(id).filter(|e| e.pins == 0) {
                evicted += e.size;
                victims.push((*tick, id.clone()));
            }
        }
        for (tick, id) in victims {
            st.order.remove(&tick);
            if let Some(e) = st.entries.remove(&id) {
                st.used -= e.size;
            }
            let path = self.path(&id);
            if let Err(e) = fs::remove_file(&path) {
                warn!(object = %id, error = %e, "could not delete an evicted object");
            }
            remove_empty_parents(&path, &self.shared.root);
            debug!(object = %id, "object evicted");
        }
        evicted
    }
}

/// Renames `src` to `dest` (creating parents), falling back to copy-and-delete across file
/// systems, and makes the result read-only.
fn move_into_place(src: &Path, dest: &Path) -> Result<()> {
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(Error::io("create cache dir", parent))?;
    }
    fs::set_permissions(src, fs::Permissions::from_mode(0o444)).map_err(Error::io("make read-only", src))?;
    match fs::rename(src, dest) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            fs::copy(src, dest).map_err(Error::io("copy into cache", dest))?;
            fs::remove_file(src).map_err(Error::io("remove", src))?;
            Ok(())
        }
        Err(e) => Err(Error::Io { action: "move into cache", path: dest.to_path_buf(), source: e }),
    }
}

/// Best effort: records the access time in the file, so a restart rebuilds the same LRU order.
fn set_mtime_now(path: &Path) {
    let r = fs::File::open(path).and_then(|f| f.set_modified(SystemTime::now()));
    if let Err(e) = r {
        debug!(path = %path.display(), error = %e, "could not update an object's mtime");
    }
}

/// Removes the now-empty `<rank>`, `<task>` and `<job>` directories above an evicted object.
fn remove_empty_parents(path: &Path, root: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// Finds every `<job>/<task>/<rank>/<name>` regular file under `root` whose path is a valid object
/// id: (id, size, mtime).
fn scan(root: &Path) -> Result<Vec<(ObjectId, u64, SystemTime)>> {
    let mut found = Vec::new();
    for job in read_dir(root)? {
        for task in read_dir(&job)? {
            for rank in read_dir(&task)? {
                for file in read_dir(&rank)? {
                    let Ok(rel) = file.strip_prefix(root) else { continue };
                    let Some(text) = rel.to_str() else {
                        warn!(path = %file.display(), "ignoring a cache file whose name is not UTF-8");
                        continue;
                    };
                    let id: ObjectId = match text.parse() {
                        Ok(id) => id,
                        Err(e) => {
                            warn!(path = %file.display(), error = %e, "ignoring a cache file that is not an object");
                            continue;
                        }
                    };
                    match fs::symlink_metadata(&file) {
                        Ok(m) if m.is_file() => {
                            found.push((id, m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
                        }
                        Ok(_) => warn!(path = %file.display(), "ignoring a cache entry that is not a regular file"),
                        Err(e) => warn!(path = %file.display(), error = %e, "ignoring an unreadable cache entry"),
                    }
                }
            }
        }
    }
    Ok(found)
}

/// The directories (or, at the leaves, all entries) inside `dir`; a plain file where a directory
/// is expected yields nothing.
fn read_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    if !fs::symlink_metadata(dir).map(|m| m.is_dir()).unwrap_or(false) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(Error::io("scan", dir))? {
        out.push(entry.map_err(Error::io("scan", dir))?.path());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_proto::JobId;

    fn oid(job: JobId, name: &str) -> ObjectId {
        ObjectId { job, task: "gen".into(), rank: 0, name: name.into() }
    }

    /// Writes `size` bytes into a scratch file and inserts it.
    fn put(cache: &Cache, scratch: &Path, id: &ObjectId, size: usize) -> Inserted {
        let src = scratch.join(format!("src-{}", id.name));
        fs::write(&src, vec![b'x'; size]).unwrap();
        cache.insert(id, &src).unwrap()
    }

    fn names(cache: &Cache) -> Vec<String> {
        cache.objects().into_iter().map(|o| o.object_id.rsplit('/').next().unwrap().to_string()).collect()
    }

    /// `forget` drops an entry only while its file is gone: one made again in between (by a
    /// fetch or a re-run) stays, with its bytes counted.
    #[test]
    fn forget_drops_only_an_entry_whose_file_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache"), 100).unwrap();
        let a = oid(JobId::random(), "a");
        drop(put(&cache, dir.path(), &a, 40));
        assert!(!cache.forget(&a), "its file is there");
        assert_eq!((cache.contains(&a), cache.used()), (true, 40));
        fs::remove_file(cache.path(&a)).unwrap();
        assert!(cache.forget(&a));
        assert_eq!((cache.contains(&a), cache.used()), (false, 0));
        assert!(!cache.forget(&a), "already forgotten");
        drop(put(&cache, dir.path(), &a, 30));
        assert_eq!(cache.used(), 30);
    }

    #[test]
    fn evicts_least_recently_used_first_and_counts_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache"), 100).unwrap();
        let job = JobId::random();
        let (a, b, c, d) = (oid(job, "a"), oid(job, "b"), oid(job, "c"), oid(job, "d"));
        drop(put(&cache, dir.path(), &a, 40));
        drop(put(&cache, dir.path(), &b, 40));
        // Using `a` as an input makes `b` the least recently used.
        drop(cache.pin(&a).unwrap());
        assert_eq!(names(&cache), ["b", "a"]);
        let ins = put(&cache, dir.path(), &c, 30);
        assert_eq!(ins.evicted_bytes, 40);
        assert_eq!(ins.size, 30);
        drop(ins);
        assert!(!cache.contains(&b));
        assert!(!cache.path(&b).exists());
        assert!(cache.contains(&a) && cache.contains(&c));
        assert_eq!(cache.used(), 70);
        // Needs 60 bytes of room: both `a` (40) and `c` (30) go, oldest first.
        let ins = put(&cache, dir.path(), &d, 90);
        assert_eq!(ins.evicted_bytes, 70);
        assert_eq!(names(&cache), ["d"]);
        assert_eq!(cache.used(), 90);
        assert_eq!(fs::read(cache.path(&d)).unwrap().len(), 90);
    }

    #[test]
    fn pinned_objects_are_not_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache"), 100).unwrap();
        let job = JobId::random();
        let (a, b, c) = (oid(job, "a"), oid(job, "b"), oid(job, "c"));
        let pin_a = put(&cache, dir.path(), &a, 50).pin;
        drop(put(&cache, dir.path(), &b, 50));
        // `a` is older but pinned, so `b` goes.
        let ins = put(&cache, dir.path(), &c, 50);
        assert_eq!(ins.evicted_bytes, 50);
        assert!(cache.contains(&a) && !cache.contains(&b) && cache.contains(&c));
        drop(ins);
        // Evicting `c`, all that is unpinned, would still leave no room for 80 more bytes next
        // to the pinned `a`: refused, and nothing is evicted or moved for it.
        let d = oid(job, "d");
        let src = dir.path().join("src-d");
        fs::write(&src, vec![b'x'; 80]).unwrap();
        let e = cache.insert(&d, &src).unwrap_err();
        assert!(matches!(e, Error::CacheFull { size: 80, capacity: 100, pinned: 50, .. }), "{e}");
        assert!(cache.contains(&a) && cache.contains(&c) && !cache.contains(&d));
        assert_eq!(cache.used(), 100);
        assert!(src.exists(), "left where it was");
        // Once `a` is no longer used, both go for it, oldest first, and the bound holds.
        drop(pin_a);
        let ins = cache.insert(&d, &src).unwrap();
        assert_eq!(ins.evicted_bytes, 100);
        assert_eq!(names(&cache), ["d"]);
        assert_eq!(cache.used(), 80);
    }

    /// The bound holds for an object larger than the whole cache: refused with an error naming
    /// the sizes, which fails the attempt that made (or fetched) it.
    #[test]
    fn an_object_larger_than_the_cache_is_refused_naming_the_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache"), 256 << 10).unwrap();
        let job = JobId::random();
        drop(put(&cache, dir.path(), &oid(job, "small"), 1000));
        let big = oid(job, "big");
        let src = dir.path().join("big");
        fs::write(&src, vec![0u8; 400 << 10]).unwrap();
        let e = cache.insert(&big, &src).unwrap_err().to_string();
        assert!(e.contains("is 400.0 KiB and this worker's object cache holds at most 256.0 KiB (--cache)"), "{e}");
        assert!(!cache.contains(&big) && cache.contains(&oid(job, "small")), "nothing evicted for it");
        assert_eq!(cache.used(), 1000);
    }

    #[test]
    fn replacing_an_object_keeps_its_pins_and_accounting() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache"), 100).unwrap();
        let a = oid(JobId::random(), "a");
        let first = put(&cache, dir.path(), &a, 30);
        let second = put(&cache, dir.path(), &a, 20);
        assert_eq!(cache.used(), 20);
        assert_eq!(cache.size(&a), Some(20));
        assert_eq!(second.evicted_bytes, 0);
        drop(first);
        drop(second);
        assert_eq!(cache.objects().len(), 1);
    }

    #[test]
    fn cached_files_are_read_only_and_inserting_a_non_file_fails() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path().join("cache"), 100).unwrap();
        let a = oid(JobId::random(), "a");
        drop(put(&cache, dir.path(), &a, 3));
        let mode = fs::metadata(cache.path(&a)).unwrap().permissions().mode();
        assert_eq!(mode & 0o222, 0, "mode {mode:o}");
        let b = oid(a.job, "b");
        assert!(cache.insert(&b, dir.path()).is_err());
        assert!(cache.insert(&b, &dir.path().join("missing")).is_err());
        assert!(!cache.contains(&b));
    }

    #[test]
    fn rebuilds_from_disk_in_mtime_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let job = JobId::random();
        let (a, b, c) = (oid(job, "a"), oid(job, "b"), oid(job, "c"));
        {
            let cache = Cache::open(&root, 1000).unwrap();
            for id in [&a, &b, &c] {
                drop(put(&cache, dir.path(), id, 10));
            }
        }
        // Make the on-disk order b, c, a regardless of how fast the inserts ran.
        let base = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        for (i, id) in [&b, &c, &a].into_iter().enumerate() {
            let f = fs::File::open(root.join(id.to_string())).unwrap();
            f.set_modified(base + std::time::Duration::from_secs(i as u64)).unwrap();
        }
        // Junk that is not an object must be ignored, not indexed.
        fs::create_dir_all(root.join("not-a-job/gen/0")).unwrap();
        fs::write(root.join("not-a-job/gen/0/x"), b"junk").unwrap();
        fs::write(root.join(job.to_string()).join("gen/0/.hidden"), b"junk").unwrap();
        fs::write(root.join("stray-file"), b"junk").unwrap();

        let cache = Cache::open(&root, 1000).unwrap();
        assert_eq!(names(&cache), ["b", "c", "a"]);
        assert_eq!(cache.used(), 30);

        // Reopening with a smaller bound evicts the oldest down to the bound.
        drop(cache);
        let cache = Cache::open(&root, 15).unwrap();
        assert_eq!(names(&cache), ["a"]);
        assert!(!root.join(b.to_string()).exists());
        assert!(root.join("not-a-job/gen/0/x").exists(), "foreign files are left alone");
    }
}
