// Package pidprobe answers one question for the heartbeat and the watchdog:
// is the worker process behind a claim still the process that took it?
//
// A pid alone proves nothing: the kernel recycles pids, and a marker's pid
// can name an unrelated process minutes later. A process is therefore named
// by its pid AND its start time (milliseconds since the epoch, as gopsutil's
// CreateTime reports it), and the answer is one of three:
//
//   - Alive: a process with that pid exists and its start time matches (or
//     the caller does not know the start time, so reuse cannot be proved);
//   - Dead: provably gone — no process has the pid, the pid now belongs to a
//     process that started at a different time (a reused pid owns nothing),
//     or the process has exited and only its zombie entry remains;
//   - Unknown: anything the prober cannot prove either way (permission
//     errors, a /proc that hides the pid but the kernel still knows it, a
//     wall-clock step that makes start times incomparable).
//
// Callers conserve on Unknown (ADR-096 §3: the oracle only promotes when it
// can prove no live owner): the heartbeat keeps renewing, the watchdog keeps
// the card.
package pidprobe
