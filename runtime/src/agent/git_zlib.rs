//! The zlib level of the objects libgit2 writes into the agent's mirror. libgit2 compresses
//! every object it puts into a pack with `deflateInit(.., Z_DEFAULT_COMPRESSION)` (level 6,
//! `util/zstream.c`) and has no option or config key for it (`pack.compression` and
//! `core.compression` are not read; only loose objects have a level, already 1). The fetch of
//! a commit that changes a million-line set file deflates the whole new file (a `file://`
//! remote: libgit2's local transport builds a pack of the new objects; over ssh or https, the
//! old file a thin pack is completed with, `indexer.c` `inject_object`), and every later read
//! of it inflates it again: 2.1 s of CPU for 14 MB at level 6, 0.23 s at level 1, a few
//! milliseconds stored (docs/performance.md, "Sets").
//!
//! fwc's executable defines zlib's `deflateInit_` (what the `deflateInit` macro calls).
//! libgit2 is linked statically into it, so its calls bind to this definition at link time;
//! the default level becomes [`LEVEL`] and an explicit level is kept. The definition is also
//! exported, so a shared library that asks for zlib's default level through `deflateInit_`
//! gets [`LEVEL`] too: the only ones in fwc are libssh2 (its transport compression, which
//! libgit2 leaves off) and zlib's own `compress()`; either way the stream is a valid zlib
//! stream, only bigger. Rust code in fwc does not use the system zlib. The tests below check
//! that libgit2's packs really come out at [`LEVEL`], that explicit levels are kept, and that
//! zlib's version check still refuses a mismatched caller; `agent::git`'s tests check a
//! fetched mirror with `git fsck` and `git verify-pack`.
//!
//! [`LEVEL`] is 0 (stored): the mirror is read by fwc alone, which inflates each object it
//! reads, so a stored object costs a copy where a compressed one costs a deflate on the fetch
//! and an inflate per read. The price is disk: a fetched object takes its raw size in the
//! mirror (a 14 MB list: 14 MB per fetched version, against 6.4 MB at level 1). libgit2 never
//! repacks the mirror; `git gc` in it (where git is installed) packs it with deltas again.

use std::os::raw::{c_char, c_int, c_void};

/// The level a default-level stream gets: stored (no compression).
pub const LEVEL: c_int = 0;
const Z_DEFAULT_COMPRESSION: c_int = -1;
const Z_DEFLATED: c_int = 8;
/// zlib's `MAX_WBITS` and `DEF_MEM_LEVEL`: what its own `deflateInit_` passes.
const MAX_WBITS: c_int = 15;
const DEF_MEM_LEVEL: c_int = 8;
const Z_DEFAULT_STRATEGY: c_int = 0;

extern "C" {
    fn deflateInit2_(
        strm: *mut c_void,
        level: c_int,
        method: c_int,
        window_bits: c_int,
        mem_level: c_int,
        strategy: c_int,
        version: *const c_char,
        stream_size: c_int,
    ) -> c_int;
}

/// zlib's `deflateInit_` (`deflateInit2_` with zlib's own defaults), the default level made
/// [`LEVEL`]. zlib's checks of the caller's version and stream size are `deflateInit2_`'s.
///
/// # Safety
/// zlib's contract for `deflateInit_`: `strm` points to a `z_stream` prepared for it.
#[no_mangle]
pub unsafe extern "C" fn deflateInit_(strm: *mut c_void, level: c_int, version: *const c_char, stream_size: c_int) -> c_int {
    let level = if level == Z_DEFAULT_COMPRESSION { LEVEL } else { level };
    // SAFETY: the caller's arguments, passed on as zlib's own `deflateInit_` does.
    unsafe { deflateInit2_(strm, level, Z_DEFLATED, MAX_WBITS, DEF_MEM_LEVEL, Z_DEFAULT_STRATEGY, version, stream_size) }
}

/// Keeps [`deflateInit_`] linked into every executable that opens a mirror (the linker only
/// takes what something refers to).
pub fn linked() -> usize {
    std::hint::black_box(deflateInit_ as *const () as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::raw::c_ulong;

    extern "C" {
        fn compress(dest: *mut u8, dest_len: *mut c_ulong, source: *const u8, source_len: c_ulong) -> c_int;
        fn compress2(dest: *mut u8, dest_len: *mut c_ulong, source: *const u8, source_len: c_ulong, level: c_int) -> c_int;
        fn uncompress(dest: *mut u8, dest_len: *mut c_ulong, source: *const u8, source_len: c_ulong) -> c_int;
        fn zlibVersion() -> *const c_char;
    }

    /// A text that compresses well (a set file's lines).
    fn lines(n: usize) -> Vec<u8> {
        (0..n).map(|i| format!("10.{}.{}.{}\n", i >> 16 & 255, i >> 8 & 255, i & 255)).collect::<String>().into_bytes()
    }

    /// The zlib stream of the first object of a pack (after its type-and-size header).
    fn first_object_stream(pack: &[u8]) -> &[u8] {
        assert_eq!(&pack[..4], b"PACK");
        let mut i = 12;
        while pack[i] & 0x80 != 0 {
            i += 1;
        }
        &pack[i + 1..]
    }

    #[test]
    fn libgit2_packs_objects_at_the_level_fwc_sets_and_the_stream_reads_back() {
        linked();
        let d = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init_bare(d.path()).unwrap();
        let data = lines(20_000);
        let id = repo.blob(&data).unwrap();
        let mut pb = repo.packbuilder().unwrap();
        pb.insert_object(id, None).unwrap();
        let mut pack = git2::Buf::new();
        pb.write_buf(&mut pack).unwrap();
        let z = first_object_stream(&pack);
        // zlib's header: CMF 0x78, FLEVEL 0 (levels 0 and 1; level 6 writes 0x9c); then a
        // stored block (BTYPE 00), which no compressing level writes for this text.
        assert_eq!((z[0], z[1]), (0x78, 0x01), "libgit2's deflate did not go through fwc's deflateInit_");
        assert_eq!(z[2] & 0b110, 0, "not a stored block: the level is not {LEVEL}");
        assert!(pack.len() > data.len(), "a stored object is not smaller than its text");
        // The pack indexes and the object reads back byte for byte (libgit2's own checks).
        let d2 = tempfile::tempdir().unwrap();
        let other = git2::Repository::init_bare(d2.path()).unwrap();
        let odb = other.odb().unwrap();
        let mut w = odb.packwriter().unwrap();
        std::io::Write::write_all(&mut w, &pack).unwrap();
        w.commit().unwrap();
        assert_eq!(other.find_blob(id).unwrap().content(), &data[..]);
    }

    #[test]
    fn other_zlib_callers_keep_explicit_levels_and_zlibs_checks() {
        let data = lines(20_000);
        let deflate = |level: Option<c_int>| {
            let mut out = vec![0u8; data.len() + data.len() / 100 + 1024];
            let mut n = out.len() as c_ulong;
            // SAFETY: buffers and lengths as zlib's compress/compress2 require.
            let rc = unsafe {
                match level {
                    Some(l) => compress2(out.as_mut_ptr(), &mut n, data.as_ptr(), data.len() as c_ulong, l),
                    None => compress(out.as_mut_ptr(), &mut n, data.as_ptr(), data.len() as c_ulong),
                }
            };
            assert_eq!(rc, 0);
            out.truncate(n as usize);
            let mut back = vec![0u8; data.len()];
            let mut m = back.len() as c_ulong;
            // SAFETY: as above.
            assert_eq!(unsafe { uncompress(back.as_mut_ptr(), &mut m, out.as_ptr(), out.len() as c_ulong) }, 0);
            assert_eq!(&back[..m as usize], &data[..], "the stream reads back");
            out.len()
        };
        // An explicit level is kept: level 9 compresses this text to a fraction.
        assert!(deflate(Some(9)) * 3 < data.len());
        // The default level through zlib's own compress(): valid at whichever level it binds to.
        deflate(None);
        // zlib's version check still refuses a caller built for another zlib.
        let mut stream = [0u8; 512];
        // SAFETY: a zeroed buffer larger than a z_stream; zlib refuses before touching it.
        let rc = unsafe { deflateInit_(stream.as_mut_ptr().cast(), -1, c"0.9".as_ptr(), 112) };
        assert_eq!(rc, -6, "Z_VERSION_ERROR");
        // SAFETY: zlibVersion returns a static C string.
        assert!(!unsafe { std::ffi::CStr::from_ptr(zlibVersion()) }.to_bytes().is_empty());
    }
}
