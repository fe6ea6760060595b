use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tar::{EntryType, Header};

use super::*;

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn names(packed: &Packed) -> Vec<String> {
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(packed.bytes.as_slice()));
    a.entries().unwrap().map(|e| e.unwrap().path().unwrap().display().to_string()).collect()
}

/// A gzip'd tar whose entries are written as given, names and all (`tar::Header::set_path`
/// would refuse the hostile ones).
fn raw_tar(entries: &[(&str, EntryType, &str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (name, kind, data, link) in entries {
        let mut h = Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(*kind);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data.as_bytes()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn the_same_content_packs_to_the_same_bytes_and_unpacks_read_only() {
    let a = tree(&[("main.py", "print(1)\n"), ("pkg/lib.py", "X = 2\n"), ("run.sh", "#!/bin/sh\n")]);
    std::fs::set_permissions(a.path().join("run.sh"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let b = tree(&[("pkg/lib.py", "X = 2\n"), ("main.py", "print(1)\n"), ("run.sh", "#!/bin/sh\n")]);
    std::fs::set_permissions(b.path().join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (pa, pb) = (pack(a.path(), &[], &Limits::DEFAULT).unwrap(), pack(b.path(), &[], &Limits::DEFAULT).unwrap());
    assert_eq!(pa.bytes, pb.bytes, "same content, same archive");
    assert_eq!(pa.digest_hex(), digest_hex(&pa.bytes));
    assert_eq!(names(&pa), ["main.py", "pkg", "pkg/lib.py", "run.sh"]);
    assert_eq!(check(&pa.bytes, &Limits::DEFAULT).unwrap(), Summary { entries: 4, unpacked: pa.unpacked });

    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("code");
    unpack(&pa.bytes, &dest, &Limits::DEFAULT).unwrap();
    assert_eq!(std::fs::read_to_string(dest.join("pkg/lib.py")).unwrap(), "X = 2\n");
    let mode = |p: &str| std::fs::metadata(dest.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode("main.py"), mode("run.sh"), mode("pkg"), mode("")), (0o444, 0o555, 0o555, 0o555));
    std::fs::write(b.path().join("main.py"), "print(2)\n").unwrap();
    assert_ne!(pack(b.path(), &[], &Limits::DEFAULT).unwrap().digest, pa.digest, "a changed file, a new digest");
}

#[test]
fn gitignore_excludes_and_dot_git_are_left_out() {
    let d = tree(&[
        (".gitignore", "*.log\nbuild/\n"),
        ("a.py", ""),
        ("debug.log", "x"),
        ("build/out.o", "x"),
        ("data/big.bin", "x"),
        (".git/config", "x"),
        ("sub/.gitignore", "secret.txt\n"),
        ("sub/secret.txt", "x"),
        ("sub/keep.txt", "x"),
    ]);
    let p = pack(d.path(), &["data/".to_string()], &Limits::DEFAULT).unwrap();
    assert_eq!(names(&p), [".gitignore", "a.py", "sub", "sub/.gitignore", "sub/keep.txt"]);
    let err = pack(d.path(), &["a[".to_string()], &Limits::DEFAULT).unwrap_err().to_string();
    assert!(err.contains("excludes") && err.contains("a["), "{err}");
}

#[test]
fn a_bad_directory_is_refused_naming_it() {
    let d = tree(&[("f", "x")]);
    let err = pack(&d.path().join("f"), &[], &Limits::DEFAULT).unwrap_err().to_string();
    assert!(err.starts_with("working_dir:") && err.contains("is not a directory"), "{err}");
    let err = pack(&d.path().join("missing"), &[], &Limits::DEFAULT).unwrap_err().to_string();
    assert!(err.contains("is not a directory"), "{err}");
    std::os::unix::fs::symlink("/etc/passwd", d.path().join("out")).unwrap();
    let err = pack(d.path(), &[], &Limits::DEFAULT).unwrap_err().to_string();
    assert!(err.contains("symlink to /etc/passwd") && err.contains("outside"), "{err}");
    std::fs::remove_file(d.path().join("out")).unwrap();
    std::os::unix::fs::symlink("../../x", d.path().join("up")).unwrap();
    assert!(matches!(pack(d.path(), &[], &Limits::DEFAULT), Err(Error::SymlinkEscapes { .. })));
    std::fs::remove_file(d.path().join("up")).unwrap();
    std::fs::create_dir(d.path().join("s")).unwrap();
    std::os::unix::fs::symlink("../f", d.path().join("s/in")).unwrap();
    let p = pack(d.path(), &[], &Limits::DEFAULT).unwrap();
    let out = tempfile::tempdir().unwrap();
    unpack(&p.bytes, &out.path().join("c"), &Limits::DEFAULT).unwrap();
    assert_eq!(std::fs::read_to_string(out.path().join("c/s/in")).unwrap(), "x", "a link inside is kept");
}

#[test]
fn limits_are_enforced_when_packing_and_unpacking() {
    let d = tree(&[("a", &"x".repeat(5000)), ("b", "y")]);
    let small = Limits { archive_bytes: 1 << 20, unpacked_bytes: 4000, entries: 10 };
    let err = pack(d.path(), &[], &small).unwrap_err().to_string();
    assert!(err.contains("over the limit of 4000 bytes"), "{err}");
    let few = Limits { entries: 1, ..Limits::DEFAULT };
    assert!(matches!(pack(d.path(), &[], &few), Err(Error::TooManyEntries { limit: 1 })));
    let tiny = Limits { archive_bytes: 10, ..Limits::DEFAULT };
    assert!(pack(d.path(), &[], &tiny).unwrap_err().to_string().contains("packed directory"));

    let p = pack(d.path(), &[], &Limits::DEFAULT).unwrap();
    assert!(matches!(check(&p.bytes, &small), Err(Error::TooLarge { .. })));
    assert!(matches!(check(&p.bytes, &few), Err(Error::TooManyEntries { .. })));
    // A gzip bomb: one file of zeros far larger than its archive.
    let zeros = "\0".repeat(1 << 20);
    let bomb = raw_tar(&[("zeros", EntryType::Regular, &zeros, "")]);
    assert!(bomb.len() < 10_000);
    let err = check(&bomb, &small).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
}

#[test]
fn corrupt_and_truncated_archives_are_refused() {
    let d = tree(&[("a", &"some text ".repeat(1000))]);
    let p = pack(d.path(), &[], &Limits::DEFAULT).unwrap();
    for cut in [1, 10, p.bytes.len() / 2, p.bytes.len() - 4] {
        let err = check(&p.bytes[..cut], &Limits::DEFAULT).unwrap_err();
        assert!(matches!(err, Error::Corrupt(_) | Error::BadEntry { .. }), "cut at {cut}: {err}");
    }
    let mut flipped = p.bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0xff;
    assert!(check(&flipped, &Limits::DEFAULT).is_err());
    assert!(matches!(check(b"not an archive at all", &Limits::DEFAULT), Err(Error::Corrupt(_))));
}

#[test]
fn hostile_entries_are_refused_naming_them() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (raw_tar(&[("/etc/x", EntryType::Regular, "x", "")]), "absolute"),
        (raw_tar(&[("a/../../x", EntryType::Regular, "x", "")]), "`..`"),
        (raw_tar(&[("l", EntryType::Symlink, "", "/etc")]), "outside"),
        (raw_tar(&[("d/l", EntryType::Symlink, "", "../..")]), "outside"),
        (raw_tar(&[("h", EntryType::Link, "", "/etc/passwd")]), "only files"),
        (raw_tar(&[("dev", EntryType::Char, "", "")]), "only files"),
        (raw_tar(&[("fifo", EntryType::Fifo, "", "")]), "only files"),
        (raw_tar(&[("l", EntryType::Symlink, "", "d"), ("l/f", EntryType::Regular, "x", "")]), "not a directory"),
        (raw_tar(&[("f", EntryType::Regular, "x", ""), ("f", EntryType::Regular, "y", "")]), "twice"),
    ];
    for (bytes, want) in cases {
        let err = check(&bytes, &Limits::DEFAULT).unwrap_err().to_string();
        assert!(err.contains(want) && err.contains("entry"), "want {want:?}: {err}");
        let out = tempfile::tempdir().unwrap();
        assert!(unpack(&bytes, &out.path().join("c"), &Limits::DEFAULT).is_err());
        assert!(!Path::new("/etc/x").exists());
    }
}
