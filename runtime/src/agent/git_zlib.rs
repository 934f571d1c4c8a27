//! The zlib level of the objects libgit2 writes into the agent's mirror. libgit2 compresses
//! every object it stores with `deflateInit(.., Z_DEFAULT_COMPRESSION)` (level 6) and has no
//! option for it: the fetch of a commit that changes a million-line set file compresses the
//! whole new file (a local remote's pack of the new objects; over ssh or https, the old file a
//! thin pack is completed with), 2.1 s of CPU for 14 MB at level 6 against 0.23 s at level 1,
//! most of the agent's reconcile of a one-line change (docs/performance.md, "Sets"). fwc's
//! executable defines zlib's `deflateInit_` (what the `deflateInit` macro calls), so
//! libgit2's calls bind to this one: the default level becomes [`LEVEL`] (objects ~15 %
//! bigger), an explicit level is kept. Only libgit2 uses the system zlib in fwc.

use std::os::raw::{c_char, c_int, c_void};

/// The level a default-level stream gets: zlib's fastest.
pub const LEVEL: c_int = 1;
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
/// [`LEVEL`].
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
