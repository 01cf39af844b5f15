//! Element-wise host work on constants spread over the host's threads: a
//! ResNet-50's weights are 25 million values, decoded, scaled and encoded on
//! the host while a model compiles. The C++ compiler spreads its passes the
//! same way (`on_host_threads`, on up to 8 threads).

use std::mem::MaybeUninit;

/// Fewer items than this are mapped on the calling thread: starting a thread
/// costs tens of microseconds.
const PARALLEL_MIN: usize = 1 << 16;

/// Threads for host work: the host's hardware threads, at most 8.
/// (Asked once: the question reads the process's CPU limits from files.)
fn host_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8)
    })
}

/// `f(b)(x)` for every item `x` of `src` (each `IN` consecutive values), in
/// order, where `b` is the index of `x`'s block of `block` items (a weight's
/// output channel, say): `OUT` values per item, collected into one vector on
/// the host's threads, whole blocks on each. The vector is not filled first:
/// a fill would be the first touch of its fresh pages, made on one thread
/// before the threads write them.
///
/// `src.len()` must be a multiple of `IN`.
pub fn map_blocks<S, D, const IN: usize, const OUT: usize, F>(
    src: &[S],
    block: usize,
    f: impl Fn(usize) -> F + Sync,
) -> Vec<D>
where
    S: Sync,
    D: Copy + Send,
    F: Fn(&[S; IN]) -> [D; OUT],
{
    assert!(IN > 0 && src.len() % IN == 0, "map_blocks: a partial item");
    let block = block.max(1);
    let items = src.len() / IN;
    let n = items * OUT;
    let mut out: Vec<D> = Vec::with_capacity(n);
    // Part `first..first + len` of the items: every value of its output.
    let run = |first: usize, src: &[S], out: &mut [MaybeUninit<D>]| {
        for (b, (sb, ob)) in src
            .chunks(block * IN)
            .zip(out.chunks_mut(block * OUT))
            .enumerate()
        {
            let g = f(first / block + b);
            for (x, o) in sb.chunks_exact(IN).zip(ob.chunks_exact_mut(OUT)) {
                let x: &[S; IN] = x.try_into().expect("chunks of IN values");
                for (o, y) in o.iter_mut().zip(g(x)) {
                    o.write(y);
                }
            }
        }
    };
    let threads = host_threads();
    let spare = &mut out.spare_capacity_mut()[..n];
    if items < PARALLEL_MIN || threads == 1 {
        run(0, src, spare);
    } else {
        // Parts of about equal size, rounded up to whole blocks; the last
        // runs on this thread.
        let part = items.div_ceil(threads).div_ceil(block) * block;
        std::thread::scope(|s| {
            let run = &run;
            let mut rest = spare;
            let mut first = 0;
            while first < items {
                let len = part.min(items - first);
                let (here, later) = std::mem::take(&mut rest).split_at_mut(len * OUT);
                rest = later;
                let src_part = &src[first * IN..(first + len) * IN];
                if first + len == items {
                    run(first, src_part, here);
                } else {
                    s.spawn(move || run(first, src_part, here));
                }
                first += len;
            }
        });
    }
    // SAFETY: the parts cover `out[..n]` (`items` items of `OUT` values),
    // and `run` writes every value of its part; `D: Copy` has no drop to
    // skip or to run twice.
    unsafe { out.set_len(n) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every value written once, from its own item, with its own block, for
    // small jobs (one part) and large ones (parts on threads, a partial
    // last block), widening and narrowing.
    #[test]
    fn map_blocks_maps_every_item_with_its_block() {
        for &n in &[0usize, 5, PARALLEL_MIN * 2 + 3, PARALLEL_MIN * 3 + 1] {
            let src: Vec<u32> = (0..n as u32).collect();
            let wide: Vec<u32> = map_blocks(&src, 7, |b| move |&[x]: &[u32; 1]| [x, b as u32]);
            assert_eq!(wide.len(), 2 * n);
            for i in 0..n {
                assert_eq!(wide[2 * i], i as u32);
                assert_eq!(wide[2 * i + 1], (i / 7) as u32, "block of item {i}");
            }
            let pairs = &src[..n - n % 2];
            let sums: Vec<u32> = map_blocks(pairs, 1000, |b| {
                move |&[x, y]: &[u32; 2]| [x + y + b as u32]
            });
            assert_eq!(sums.len(), pairs.len() / 2);
            for (i, &s) in sums.iter().enumerate() {
                assert_eq!(s, (4 * i + 1) as u32 + (i / 1000) as u32, "item {i}");
            }
        }
    }
}
