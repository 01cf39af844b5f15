//! Compile progress: the compiler says which stage it is in ("passes",
//! "planning", "lowering", "allocation") and how far along; whoever started
//! the compile on this thread may listen (the Python binding drives a
//! progress bar with it). Without a listener, reporting costs a thread-local
//! lookup.

use std::cell::RefCell;

/// Receives (stage, done, total) as the compile advances.
pub type Listener = Box<dyn FnMut(&str, u64, u64)>;

thread_local! {
    static LISTENER: RefCell<Option<Listener>> = const { RefCell::new(None) };
}

/// Runs `f` with `listener` receiving this thread's progress reports.
pub fn with_listener<T>(listener: Listener, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Listener>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            LISTENER.with(|l| *l.borrow_mut() = previous);
        }
    }
    let previous = LISTENER.with(|l| l.borrow_mut().replace(listener));
    let _restore = Restore(previous);
    f()
}

/// Reports that `stage` has done `done` of `total` units of work.
pub fn report(stage: &str, done: u64, total: u64) {
    LISTENER.with(|l| {
        // A listener that reports progress itself is not called again.
        if let Ok(mut l) = l.try_borrow_mut() {
            if let Some(f) = l.as_mut() {
                f(stage, done, total);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn reports_reach_the_listener_only_inside_with_listener() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        report("before", 0, 1);
        with_listener(
            Box::new(move |stage, done, total| {
                s.lock().unwrap().push((stage.to_string(), done, total))
            }),
            || {
                report("lowering", 1, 3);
                report("allocation", 1, 1);
            },
        );
        report("after", 1, 1);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                ("lowering".to_string(), 1, 3),
                ("allocation".to_string(), 1, 1)
            ]
        );
    }
}
