//! When the pgid backend's poller looks at the process table.

use std::time::Duration;

/// How often to look: `fast` right after the start and after any look that found a new
/// process, doubling each quiet look up to `slow` (the `--poll` interval). A tree that is
/// forking is watched closely; a quiet one costs little.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    fast: Duration,
    slow: Duration,
    current: Duration,
}

/// How often the process table is read right after the spawn and while the tree is changing,
/// and the fastest interval a caller may ask for.
const FAST: Duration = Duration::from_millis(5);
const FASTEST: Duration = Duration::from_millis(1);

impl Schedule {
    /// [`FAST`] while the tree changes, backing off to `poll` (at least [`FASTEST`]) when it is
    /// quiet.
    pub fn backing_off_to(poll: Duration) -> Self {
        Self::new(FAST, poll.max(FASTEST))
    }

    pub fn new(fast: Duration, slow: Duration) -> Self {
        let fast = fast.min(slow);
        Self {
            fast,
            slow,
            current: fast,
        }
    }

    /// The wait before the first look.
    pub fn first(&self) -> Duration {
        self.fast
    }

    /// The wait before the next look, given whether the last one found something new.
    pub fn next(&mut self, found_new: bool) -> Duration {
        self.current = if found_new {
            self.fast
        } else {
            (self.current * 2).min(self.slow)
        };
        self.current
    }

    pub fn slow(&self) -> Duration {
        self.slow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_fast_after_news_and_backs_off_to_the_poll_interval() {
        let ms = Duration::from_millis;
        let mut s = Schedule::new(ms(5), ms(50));
        assert_eq!(s.first(), ms(5));
        let quiet: Vec<Duration> = (0..6).map(|_| s.next(false)).collect();
        assert_eq!(quiet, vec![ms(10), ms(20), ms(40), ms(50), ms(50), ms(50)]);
        assert_eq!(s.next(true), ms(5));
        // A poll interval below the fast one wins.
        let mut s = Schedule::new(ms(5), ms(2));
        assert_eq!(
            (s.first(), s.next(false), s.next(true)),
            (ms(2), ms(2), ms(2))
        );
    }
}
