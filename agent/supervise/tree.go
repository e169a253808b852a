package supervise

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// becomeSubreaper makes this process the child subreaper of everything it
// starts (PR_SET_CHILD_SUBREAPER): a descendant whose parent exits is
// re-parented to the nearest living subreaper among its ancestors instead of
// to pid 1. A process that double-forks, or that moved to a process group
// or a session of its own, therefore stays under us, where a walk of /proc
// from our pid finds it.
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// descendants lists the live processes descended from root, parents
// before their children. Zombies are left out: they have exited and can do
// nothing more. skip prunes a child of root and its whole subtree from the
// walk.
//
// It follows the kernel's list of each process's children
// (/proc/PID/task/TID/children), a few reads per process of the tree,
// rather than reading every process of the host: against a tree that forks
// and exits in a loop, a walk as long as the host's process table lists
// only pids that have hopped on by the time it signals them, and the kill
// rounds chase the tree forever. Where the kernel keeps no such lists
// (built without CONFIG_PROC_CHILDREN) it scans /proc.
func descendants(root int, skip func(pid int) bool) ([]int, error) {
	if !childrenLists() {
		return scanDescendants(root, skip)
	}
	kids, err := childrenOf(root)
	if err != nil {
		return nil, err
	}
	var out []int
	for len(kids) > 0 {
		var next []child
		for _, c := range kids {
			if c.parent == root && skip != nil && skip(c.pid) {
				continue
			}
			st, err := pidprobe.ReadStat(c.pid)
			if err != nil || exited(c.pid, st) {
				continue // gone since its parent's list was read, or exited
			}
			out = append(out, c.pid)
			// A child that exits while we read its lists leaves them
			// unreadable; its children are re-parented to us and the
			// next walk finds them.
			grand, _ := childrenOf(c.pid)
			next = append(next, grand...)
		}
		kids = next
	}
	return out, nil
}

// child is a pid and the parent whose children list named it.
type child struct{ pid, parent int }

// childrenLists reports whether the kernel keeps children lists
// (CONFIG_PROC_CHILDREN), which every process's threads have or none do.
var childrenLists = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/thread-self/children")
	return err == nil
})

// childrenOf reads the children lists of every thread of pid: a child is
// listed under the thread that forked it (or, re-parented, under the
// thread the kernel chose), so a threaded process such as this one has
// several lists. The error wraps os.ErrNotExist when pid has exited.
func childrenOf(pid int) ([]child, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []child
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if errors.Is(err, os.ErrNotExist) {
			continue // this thread exited since the listing
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, child{pid: c, parent: pid})
			}
		}
	}
	return out, nil
}

// allPIDs lists every pid in /proc, for a kernel without children lists.
func allPIDs() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, ent := range ents {
		if pid, err := strconv.Atoi(ent.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// exited reports whether the process pid, whose stat is st, has exited.
// The stat's state is the main thread's: a process whose main thread
// exited while its other threads run shows as a zombie, yet runs (and may
// fork), and only its threads' own stats tell.
func exited(pid int, st pidprobe.ProcStat) bool {
	if !st.Zombie() {
		return false
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/stat")
		if err != nil {
			continue // exited since the listing
		}
		if ts, err := pidprobe.ParseStat(b); err == nil && !ts.Zombie() {
			return false
		}
	}
	return true
}

// scanDescendants is descendants in one scan of /proc, for a kernel that
// keeps no children lists.
func scanDescendants(root int, skip func(pid int) bool) ([]int, error) {
	pids, err := allPIDs()
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, pid := range pids {
		st, err := pidprobe.ReadStat(pid)
		if err != nil || exited(pid, st) {
			continue // gone since the listing, or exited
		}
		children[st.PPID] = append(children[st.PPID], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if p == root && skip != nil && skip(c) {
				continue
			}
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out, nil
}

// rescanEvery bounds how long a kill round waits for the processes it
// signalled before it walks /proc again: a process forked after the walk
// sends us no notice, so only another walk finds it.
const rescanEvery = 100 * time.Millisecond

// Survivor is a process of the tree that could not be stopped.
type Survivor struct {
	PID int
	Err error
}

// killTree sends SIGKILL to every process descended from root and returns
// once none is left, or once every one that is left refused the signal
// (returned as survivors: a setuid program we may not signal, say).
//
// It walks /proc, kills what it found, waits for those to exit and walks
// again, until two walks in a row find nothing. Each kill goes through a
// pidfd opened before the signal and checked against the walk, so a pid
// that was freed and reused between the walk and the kill is never
// signalled. A killed process that is the parent of others has
// re-parented them to us before its pidfd reports it exited, so the next
// walk sees them; the second empty walk covers a process whose parent
// exited on its own while the previous walk was reading /proc, and a walk
// around which one of our children exited is not empty (see the loop). The
// loop ends because a process with SIGKILL pending never returns to user
// space to fork again. reap, when set, is called around every walk to
// collect the exit statuses of our own children, and reports how many it
// collected.
func killTree(root int, skip func(int) bool, reap func() int) ([]Survivor, error) {
	refused := map[int]error{}
	empty := 0
	for empty < 2 {
		reaped := 0
		if reap != nil {
			reaped = reap()
		}
		pids, err := descendants(root, skip)
		if err != nil {
			return nil, err
		}
		if reap != nil {
			reaped += reap()
		}
		pids = slices.DeleteFunc(pids, func(p int) bool { _, ok := refused[p]; return ok })
		// A walk that found nothing proves nothing if a child of ours
		// exited around it: a process that forks and exits at once
		// ("hops") leaves each parent a zombie re-parented to us and is
		// itself never where the walk looks. Only walks with nothing to
		// reap count as empty; each hop re-parents its child to us, so a
		// later walk finds a live one and kills it.
		if len(pids) == 0 && reaped == 0 {
			empty++
			if empty < 2 {
				time.Sleep(time.Millisecond) // lets a process forked during the walk show in /proc; not a synchronisation
			}
			continue
		}
		empty = 0
		if len(pids) == 0 {
			continue
		}
		empty = 0
		var fds []int
		for _, pid := range pids {
			fd, err := signalChecked(pid, root, unix.SIGKILL)
			switch {
			case errors.Is(err, unix.EPERM):
				refused[pid] = err
			case err != nil:
				// Gone already (ESRCH), or no longer ours.
			case fd >= 0:
				fds = append(fds, fd)
			}
		}
		waitExit(fds, rescanEvery)
	}
	var out []Survivor
	for pid, err := range refused {
		if st, serr := pidprobe.ReadStat(pid); serr == nil && !exited(pid, st) {
			out = append(out, Survivor{PID: pid, Err: err})
		}
	}
	slices.SortFunc(out, func(a, b Survivor) int { return a.PID - b.PID })
	return out, nil
}

// signalChecked sends sig to pid if it is still the process the walk found
// under root. It opens a pidfd first, which pins the process it names, then
// reads the process's parent: if the pidfd's process has exited by then the
// signal fails harmlessly (ESRCH); otherwise the stat it read is that
// process's, and its parent tells whether it is still in root's tree (its
// parent is root or one of root's descendants; a reused pid's new process
// would have to be forked by one of them to pass, and then it is ours to
// kill as well). It returns the pidfd for waitExit, or -1 where the kernel
// has no pidfds (before Linux 5.3) and a plain kill was sent.
func signalChecked(pid, root int, sig unix.Signal) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		return -1, unix.Kill(pid, sig)
	}
	if err != nil {
		return -1, err
	}
	st, err := pidprobe.ReadStat(pid)
	if err == nil && !inTree(st.PPID, root) {
		err = fmt.Errorf("pid %d left the tree: %w", pid, unix.ESRCH)
	}
	if err == nil {
		err = unix.PidfdSendSignal(fd, sig, nil, 0)
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// inTree reports whether pid is root or descends from it, walking parents.
func inTree(pid, root int) bool {
	for range 4096 { // a chain longer than this is not a real tree
		if pid == root {
			return true
		}
		if pid <= 1 {
			return false
		}
		st, err := pidprobe.ReadStat(pid)
		if err != nil {
			return false
		}
		pid = st.PPID
	}
	return false
}

// waitExit waits until every pidfd reports its process exited, or bound
// passes, then closes them. A pidfd polls readable once its process has
// exited (it may still be a zombie).
func waitExit(fds []int, bound time.Duration) {
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	if len(fds) == 0 {
		// No pidfds (an old kernel): give the kill a moment to land.
		time.Sleep(10 * time.Millisecond)
		return
	}
	deadline := time.Now().Add(bound)
	pending := slices.Clone(fds)
	for len(pending) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		pfds := make([]unix.PollFd, len(pending))
		for i, fd := range pending {
			pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		n, err := unix.Poll(pfds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		next := pending[:0]
		for i, p := range pfds {
			if p.Revents == 0 {
				next = append(next, pending[i])
			}
		}
		pending = next
	}
}

// monoNow reads CLOCK_MONOTONIC in nanoseconds: the clock Go's monotonic
// time readings come from on Linux, shared by every process of the host
// (of one time namespace).
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err)) // cannot fail on Linux
	}
	return ts.Nano()
}

// monoOf converts t to a CLOCK_MONOTONIC reading, never later than t: the
// clock is read before time.Now, so the time between the two reads is
// taken off, not added.
func monoOf(t time.Time) int64 {
	mono := monoNow()
	return mono + int64(time.Until(t))
}

// timeOfMono converts a CLOCK_MONOTONIC reading to a time.Time with a
// monotonic reading, never later than it: the clock is read after
// time.Now.
func timeOfMono(mono int64) time.Time {
	now := time.Now()
	return now.Add(time.Duration(mono - monoNow()))
}

// exitCode maps a wait status to a shell-style exit code: the status for a
// normal exit, 128+signal for a process killed by a signal.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
