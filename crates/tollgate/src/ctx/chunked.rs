//! Containers that grow in fixed chunks that never move: [`Chunked`], a vector, and
//! [`ChunkedHeap`], a min-heap over one.
//!
//! Why not `Vec` and `BinaryHeap`: a doubling vector copies itself into a new allocation
//! and frees the old one at every power of two, and what holds the park's entries (one per
//! idle connection) grows that way exactly while connections go idle. Measured with 2,000
//! parked HTTP/1.1 connections (docs/benchmarks.md, 2026-12-04 later): the park's deadline
//! heap as a `BinaryHeap` left the worker at 735 B of RSS per connection, the same heap with
//! its capacity reserved up front at 491; the allocator kept the pages of the abandoned
//! copies resident. A chunk here is allocated once, at its capacity (256 KiB), and filled
//! in place, so a page is touched only when an element is written to it, and nothing is
//! ever copied to grow. A stall goes too: at a million entries a doubling moves tens of MB in one push.
//!
//! Invariants: every chunk but the last is full; chunks are dropped only with the whole
//! container (`clear`), so a container that shrinks keeps its chunks for the next growth, as
//! a `Vec` keeps its capacity.

/// Bytes per chunk: large enough that the allocator gives each chunk pages of its own
/// (no short-lived object of the same size class shares them and keeps them resident once
/// it is gone), and a chunk's tail is only address space until elements are written there.
const CHUNK_BYTES: usize = 256 << 10;

/// Elements of `T` per chunk.
const fn per_chunk<T>() -> usize {
    let size = size_of::<T>();
    if size == 0 || size >= CHUNK_BYTES {
        1
    } else {
        CHUNK_BYTES / size
    }
}

/// A vector in chunks of [`CHUNK_BYTES`] that never move.
pub(crate) struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    const PER_CHUNK: usize = per_chunk::<T>();

    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / Self::PER_CHUNK)?.get(i % Self::PER_CHUNK)
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.chunks.get_mut(i / Self::PER_CHUNK)?.get_mut(i % Self::PER_CHUNK)
    }

    /// Appends `value`; its index.
    pub(crate) fn push(&mut self, value: T) -> usize {
        let i = self.len;
        let c = i / Self::PER_CHUNK;
        if c == self.chunks.len() {
            self.chunks.push(Vec::with_capacity(Self::PER_CHUNK));
        }
        if let Some(chunk) = self.chunks.get_mut(c) {
            chunk.push(value);
            self.len += 1;
        }
        i
    }

    /// Removes the last element (its chunk stays for the next push).
    pub(crate) fn pop(&mut self) -> Option<T> {
        let i = self.len.checked_sub(1)?;
        let value = self.chunks.get_mut(i / Self::PER_CHUNK)?.pop()?;
        self.len = i;
        Some(value)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// Keeps the first `len` elements, and of the chunks past them one spare: a container
    /// that was compacted gives back what it no longer needs.
    fn truncate(&mut self, len: usize) {
        while self.len > len {
            self.pop();
        }
        self.chunks.truncate(len.div_ceil(Self::PER_CHUNK) + 1);
    }

    /// Drops every element and every chunk.
    pub(crate) fn clear(&mut self) {
        *self = Chunked::default();
    }
}

impl<T: Copy> Chunked<T> {
    fn swap(&mut self, a: usize, b: usize) {
        if let (Some(&x), Some(&y)) = (self.get(a), self.get(b)) {
            if let Some(s) = self.get_mut(a) {
                *s = y;
            }
            if let Some(s) = self.get_mut(b) {
                *s = x;
            }
        }
    }
}

/// A min-heap (the least element on top) over a [`Chunked`].
pub(crate) struct ChunkedHeap<T> {
    items: Chunked<T>,
}

impl<T> Default for ChunkedHeap<T> {
    fn default() -> Self {
        ChunkedHeap {
            items: Chunked::default(),
        }
    }
}

impl<T: Copy + Ord> ChunkedHeap<T> {
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The least element.
    pub(crate) fn peek(&self) -> Option<T> {
        self.items.get(0).copied()
    }

    pub(crate) fn push(&mut self, value: T) {
        let i = self.items.push(value);
        self.sift_up(i);
    }

    /// Removes and returns the least element.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let last = self.items.len().checked_sub(1)?;
        self.items.swap(0, last);
        let top = self.items.pop();
        self.sift_down(0);
        top
    }

    /// Keeps the elements `keep` says, moved down in place (no new chunk), and rebuilds the
    /// heap over them (O(n)); the chunks no longer needed go.
    pub(crate) fn retain(&mut self, keep: impl Fn(&T) -> bool) {
        let mut kept = 0;
        for i in 0..self.items.len() {
            if let Some(&v) = self.items.get(i)
                && keep(&v)
            {
                if let Some(slot) = self.items.get_mut(kept) {
                    *slot = v;
                }
                kept += 1;
            }
        }
        self.items.truncate(kept);
        for i in (0..self.items.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.items.clear();
    }

    fn less(&self, a: usize, b: usize) -> bool {
        matches!((self.items.get(a), self.items.get(b)), (Some(x), Some(y)) if x < y)
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(i, parent) {
                return;
            }
            self.items.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (left, right) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if self.less(left, least) {
                least = left;
            }
            if self.less(right, least) {
                least = right;
            }
            if least == i {
                return;
            }
            self.items.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 KiB elements: 64 to a chunk, so that a few hundred cross chunks.
    type Big = [u64; 512];
    const PER: usize = per_chunk::<Big>();

    fn big(v: u64) -> Big {
        let mut b = [0; 512];
        b[0] = v;
        b
    }

    #[test]
    fn a_chunked_vector_keeps_its_elements_across_chunks() {
        assert_eq!(PER, 64);
        let mut v = Chunked::default();
        for i in 0..(3 * PER + 5) {
            assert_eq!(v.push(big(i as u64)), i);
        }
        assert_eq!(v.len(), 3 * PER + 5);
        assert_eq!(v.get(PER).map(|b| b[0]), Some(PER as u64));
        assert!(v.get(3 * PER + 5).is_none());
        v.get_mut(7).unwrap()[0] = 700;
        assert_eq!(v.iter().nth(7).map(|b| b[0]), Some(700));
        for i in (PER..3 * PER + 5).rev() {
            assert_eq!(v.pop().map(|b| b[0]), Some(i as u64));
        }
        assert_eq!(v.len(), PER);
        // Its chunks stay: growing again allocates none.
        let chunks = v.chunks.len();
        v.push(big(1));
        assert_eq!(v.chunks.len(), chunks);
        v.clear();
        assert!(v.len() == 0 && v.chunks.is_empty());
        assert!(v.pop().is_none());
    }

    #[test]
    fn the_heap_gives_its_elements_back_least_first() {
        // A fixed pseudo-random sequence with repeats, across several chunks.
        let mut h = ChunkedHeap::default();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut all = Vec::new();
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x % 300;
            h.push(big(v));
            all.push(v);
        }
        all.sort_unstable();
        assert_eq!(h.peek().map(|b| b[0]), all.first().copied());
        // Half out, half in again, then everything out in order.
        let mut out = Vec::new();
        for _ in 0..500 {
            out.push(h.pop().unwrap()[0]);
        }
        assert_eq!(out, all[..500]);
        for v in &out {
            h.push(big(*v));
        }
        let mut drained = Vec::new();
        while let Some(b) = h.pop() {
            drained.push(b[0]);
        }
        assert_eq!(drained, all);
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn retain_keeps_a_valid_heap_of_what_it_kept() {
        let mut h = ChunkedHeap::default();
        for v in (0..700u64).rev() {
            h.push(big(v));
        }
        let chunks = h.items.chunks.len();
        h.retain(|b| b[0] % 3 == 0);
        assert_eq!(h.len(), 234);
        // 700 elements took 11 chunks; 234 need 4, and one spare stays.
        assert_eq!((chunks, h.items.chunks.len()), (11, 5));
        let mut drained = Vec::new();
        while let Some(b) = h.pop() {
            drained.push(b[0]);
        }
        assert_eq!(drained, (0..700).filter(|v| v % 3 == 0).collect::<Vec<_>>());
        h.clear();
        assert!(h.peek().is_none());
    }
}
