//! A bounded, evenly thinned subset of a stream: every value until `capacity`, then every other
//! one is dropped and only every other new one kept, and so on. Memory is fixed whatever the
//! stream's length, and what is kept stays spread evenly over all of it. Windows use it for
//! robust statistics, reports for the windows of a phase or a calibration's plots.

/// At most `capacity` values of a stream, spread evenly over all of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Thinned<T> {
    values: Vec<T>,
    capacity: usize,
    /// Keep one value in `stride`…
    stride: usize,
    /// …counting from the last one kept.
    since_kept: usize,
}

impl<T> Thinned<T> {
    /// Keeps every value until `capacity` (at least 2), then thins.
    pub fn new(capacity: usize) -> Self {
        Thinned {
            values: Vec::new(),
            capacity: capacity.max(2),
            stride: 1,
            since_kept: 0,
        }
    }

    /// Offers the stream's next value; it is kept if it falls on the current stride.
    pub fn push(&mut self, value: T) {
        self.since_kept += 1;
        if self.since_kept < self.stride {
            return;
        }
        self.since_kept = 0;
        if self.values.len() == self.capacity {
            let mut i = 0;
            self.values.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.stride *= 2;
        }
        self.values.push(value);
    }

    /// [`Thinned::new`] with room for `capacity` values from the start: a window's four
    /// robust metrics would otherwise grow their vectors 4 → 8 → 16 → 32 → 64 in every window,
    /// a tenth of the offline pipeline's time.
    pub fn preallocated(capacity: usize) -> Self {
        let mut thinned = Thinned::new(capacity);
        thinned.values.reserve_exact(thinned.capacity);
        thinned
    }

    /// What is kept, in stream order.
    pub fn values(&self) -> &[T] {
        &self.values
    }

    /// What is kept, in stream order, owned.
    pub fn into_values(self) -> Vec<T> {
        self.values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_stream_keeps_an_even_bounded_subset() {
        let mut thinned = Thinned::new(64);
        for i in 0..10_000 {
            thinned.push(i);
        }
        let kept = thinned.values();
        assert!(kept.len() <= 64 && kept.len() >= 32, "{}", kept.len());
        assert_eq!(kept[0], 0);
        let gaps: Vec<i32> = kept.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.iter().all(|g| *g == gaps[0]),
            "evenly spread: {gaps:?}"
        );
        assert!(*kept.last().expect("kept") > 9_000, "reaches the end");
    }

    #[test]
    fn a_short_stream_is_kept_whole() {
        let mut thinned = Thinned::new(16);
        (0..10).for_each(|i| thinned.push(i));
        assert_eq!(thinned.into_values(), (0..10).collect::<Vec<_>>());
    }
}
