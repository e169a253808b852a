// Package pidprobe answers one question for the heartbeat and the watchdog:
// is the worker process behind a claim still the process that took it?
//
// A pid alone proves nothing: the kernel recycles pids, and a marker's pid
// can name an unrelated process minutes — or, with a small pid space or a
// privileged process choosing pids, milliseconds — later. A process is
// therefore named by its pid AND its Identity: the kernel's start time in
// clock ticks after boot (/proc/PID/stat field 22, the same on every read,
// whatever the wall clock does) and the boot it counts from, plus, where
// the kernel has pidfs, the pidfs inode of the process. Identities are
// compared exactly (Compare); the one tolerance left is for legacy records
// that carry only a start in milliseconds. The answer is one of three:
//
//   - Alive: a process with that pid exists and its identity matches (or
//     the caller does not know the identity, so reuse cannot be proved);
//   - Dead: provably gone — no process has the pid, the pid now belongs to
//     another process (a reused pid owns nothing), or the process has
//     exited and only its zombie entry remains;
//   - Unknown: anything the prober cannot prove either way (permission
//     errors, a /proc that hides the pid but the kernel still knows it, a
//     wall-clock step that makes legacy start times incomparable).
//
// Callers conserve on Unknown (DESIGN.md#oracle: the oracle only promotes when it
// can prove no live owner): the heartbeat keeps renewing, the watchdog keeps
// the card.
package pidprobe
