package socketapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/heartbeat"
	"github.com/leasekeeper/leasekeeper/lease"
	"github.com/leasekeeper/leasekeeper/pidprobe"
)

// peer is the caller as the kernel saw it when it connected (SO_PEERCRED),
// captured once per connection. Identity is never taken from a request body.
type peer struct {
	uid uint32
	pid int // 0: the peer lives in a pid namespace the agent cannot see
	// ident is the exact identity of the process that connected (see
	// identify), read as soon as the connection was accepted.
	ident    pidprobe.Identity
	identErr error
	credErr  error
}

type peerKey struct{}

// connContext captures the peer credentials of a new connection and attaches
// them to the context every request on that connection inherits.
func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	p := &peer{}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		p.credErr = fmt.Errorf("connection is %T, not a Unix socket", c)
		return context.WithValue(ctx, peerKey{}, p)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		p.credErr = err
		return context.WithValue(ctx, peerKey{}, p)
	}
	var cred *unix.Ucred
	var gerr, pidfdErr error
	pidfd := -1
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if gerr == nil && cred.Pid > 0 {
			// Linux 6.5 and later: a pidfd on the very process that
			// connected. Older kernels answer ENOPROTOOPT; then the pid is
			// all there is. Any other refusal (some kernels answer EINVAL
			// once the peer has exited and been reaped) means the process
			// that connected is gone: its pid may already name another
			// process, so it has no identity.
			pfd, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
			switch {
			case err == nil:
				pidfd = pfd
			case !errors.Is(err, unix.ENOPROTOOPT):
				pidfdErr = fmt.Errorf("pid %d: no pidfd for the process that connected (%v): it has exited", cred.Pid, err)
			}
		}
	}); err != nil {
		gerr = err
	}
	if gerr != nil {
		p.credErr = gerr
		return context.WithValue(ctx, peerKey{}, p)
	}
	p.uid, p.pid = cred.Uid, int(cred.Pid)
	switch {
	case pidfdErr != nil:
		p.identErr = pidfdErr
	case p.pid > 0:
		p.ident, p.identErr = s.identify(ctx, p.pid, pidfd)
	}
	if pidfd >= 0 {
		_ = unix.Close(pidfd)
	}
	return context.WithValue(ctx, peerKey{}, p)
}

// identify reads the identity of the process that connected. Credentials
// are captured at connect(), so by the time the agent reads /proc the
// peer may have exited and its pid gone to another process, whose
// identity that read would return. With the peer's pidfd the agent checks,
// after the read, that the peer is still there: while it is, its pid is
// its own, so what was read is the peer's. Without one (before Linux 6.5)
// the read is taken as the peer's: a peer that connects, exits and has its
// pid handed out again within that read is the gap left.
func (s *Server) identify(ctx context.Context, pid, pidfd int) (pidprobe.Identity, error) {
	id, err := s.cfg.Prober.Identify(ctx, pid)
	if err != nil || pidfd < 0 {
		return id, err
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); errors.Is(err, unix.ESRCH) {
		return pidprobe.Identity{}, fmt.Errorf("pid %d exited before its identity could be read", pid)
	}
	return id, nil
}

func peerOf(r *http.Request) (*peer, error) {
	p, _ := r.Context().Value(peerKey{}).(*peer)
	if p == nil {
		return nil, fmt.Errorf("%w: no peer credentials on this connection", apitype.ErrUnauthorized)
	}
	if p.credErr != nil {
		return nil, fmt.Errorf("%w: reading peer credentials: %v", apitype.ErrUnauthorized, p.credErr)
	}
	return p, nil
}

// worker is a caller resolved to a worker identity.
type worker = lease.Worker

// errForeignPID names the fix, because the operator reading it is the one
// who has to change a pod spec or a compose file.
var errForeignPID = errors.New("the agent cannot see this process's pid (it lives in another pid namespace): " +
	"share the pid namespace with the agent (shareProcessNamespace: true / pid: service:...) " +
	"or run the agent with liveness: keepalive")

// workerOf resolves the caller to a worker. The marker is
// board.WorkerMarker(host, kernel pid). Only when the kernel reports pid 0
// (a foreign pid namespace) and the agent runs in keepalive mode does it
// accept the marker the worker declares in the Leasekeeper-Worker header.
// That identity is self-declared: any process that can open the socket may
// claim any marker, so keepalive mode across namespaces trusts the socket's
// file permissions (0660) and nothing else. Its claims carry no identity.
func (s *Server) workerOf(r *http.Request) (worker, error) {
	p, err := peerOf(r)
	if err != nil {
		return worker{}, err
	}
	if p.pid > 0 {
		if p.identErr != nil {
			return worker{}, fmt.Errorf("%w: cannot read the identity (start time) of pid %d: %v", apitype.ErrUnauthorized, p.pid, p.identErr)
		}
		m := board.WorkerMarker(s.cfg.Host, p.pid)
		if err := board.ValidateMarker(m); err != nil {
			return worker{}, fmt.Errorf("%w: pid %d cannot hold claims: %v", apitype.ErrForbidden, p.pid, err)
		}
		return worker{Marker: m, Owner: heartbeat.Owner{PID: p.pid, Start: p.ident, KeepaliveID: m}}, nil
	}
	if s.cfg.Liveness() != apitype.LivenessKeepalive {
		return worker{}, fmt.Errorf("%w: %v", apitype.ErrForbidden, errForeignPID)
	}
	declared := strings.TrimSpace(r.Header.Get(apitype.WorkerHeader))
	if declared == "" {
		return worker{}, fmt.Errorf("%w: the agent cannot see this process's pid; in keepalive mode send the %s header (<host>-<pid>)",
			apitype.ErrUnauthorized, apitype.WorkerHeader)
	}
	m, err := board.ParseMarker(declared)
	if err != nil {
		return worker{}, fmt.Errorf("%w: %s header: %v", apitype.ErrBadRequest, apitype.WorkerHeader, err)
	}
	if m.Recovery {
		return worker{}, fmt.Errorf("%w: a worker cannot declare a recovery marker", apitype.ErrForbidden)
	}
	// The recorded marker qualifies the declared host. Containers of one pod
	// share a host name, so "<host>-<pid>" from the worker's namespace would
	// look like a same-host marker to the agent's pid sweeps, which would
	// then probe an unrelated pid in the agent's own namespace and could
	// declare a live worker dead. The suffix keeps those sweeps off it.
	marker := board.WorkerMarker(m.Host+ForeignHostSuffix, m.PID)
	return worker{Marker: marker, Owner: heartbeat.Owner{KeepaliveID: marker}}, nil
}

// ForeignHostSuffix is appended to the host of a self-declared worker
// marker: "<host>-<pid>" declared in the Leasekeeper-Worker header is
// recorded as "<host>~pidns-<pid>".
const ForeignHostSuffix = "~pidns"

// operatorOf admits an operator uid and returns the actor string events
// record for it.
func (s *Server) operatorOf(r *http.Request) (string, error) {
	p, err := peerOf(r)
	if err != nil {
		return "", err
	}
	for _, uid := range s.cfg.Operators() {
		if uid == p.uid {
			return fmt.Sprintf("uid:%d", p.uid), nil
		}
	}
	return "", fmt.Errorf("%w: uid %d is not an operator (allowed: %v)", apitype.ErrForbidden, p.uid, s.cfg.Operators())
}
