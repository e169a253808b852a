package socketapi

import (
	"bufio"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/leasekeeper/leasekeeper/apitype"
)

// ring keeps the last frames pushed onto the watch stream, numbered, so a
// client that lost its connection resumes with ?after= and misses nothing
// the buffer still holds. It is in memory: an agent restart starts again at
// 1, which a resuming client sees as "missed" in the hello frame.
type ring struct {
	mu   sync.Mutex
	buf  []apitype.Frame
	next int64 // the Seq the next pushed frame gets; starts at 1
	sig  *signal
}

func newRing(n int) *ring {
	return &ring{buf: make([]apitype.Frame, n), next: 1, sig: newSignal()}
}

func (r *ring) push(f apitype.Frame) {
	r.mu.Lock()
	f.Seq = r.next
	r.buf[(r.next-1)%int64(len(r.buf))] = f
	r.next++
	r.mu.Unlock()
	r.sig.fire()
}

// since returns the frames with Seq > after that the buffer still holds, the
// head (the last Seq pushed), and whether frames after `after` are gone
// (fell out of the buffer, or `after` is ahead of this agent's numbering).
// When missed, the frames start from the oldest one kept.
func (r *ring) since(after int64) (frames []apitype.Frame, head int64, missed bool, oldest int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	head = r.next - 1
	oldest = max(1, r.next-int64(len(r.buf)))
	switch {
	case after > head:
		return nil, head, true, oldest
	case after < oldest-1:
		missed = true
		after = oldest - 1
	}
	for seq := after + 1; seq <= head; seq++ {
		frames = append(frames, r.buf[(seq-1)%int64(len(r.buf))])
	}
	return frames, head, missed, oldest
}

// handleWatch streams NDJSON frames to a worker: a hello, every claim_lost
// addressed to this worker's marker and every launch hint, and a ping every
// lease/3 listing the worker's claims with the time the agent still trusts
// each, and when it measured that. The ping is what lets the client cancel by itself when the agent
// goes silent (DESIGN.md#client-deadline and the orphan-grace proof of the watchdog).
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request, c caller) error {
	// The stream's age is counted from here, and every ping says how old
	// the stream was when its trusted times were measured. The worker sent
	// this request before this reading, so its send time plus that age is
	// an instant no later than the measurement, on the one monotonic clock
	// the host has: a ping it reads late cannot stretch its deadline past
	// this agent's (apitype.Frame.StreamMS).
	opened := s.cfg.Clock.Now()
	after, err := queryInt(r, "after", -1)
	if err != nil {
		return err
	}
	ctx, wk := r.Context(), c.worker
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	send := func(f apitype.Frame) bool { return enc.Encode(f) == nil }
	// A reader that stops reading blocks the flush once the socket buffer
	// fills; each flush gets a lease to land, then the stream is cut.
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(max(s.cfg.Lease(), time.Second)))
		return bw.Flush() == nil && rc.Flush() == nil
	}
	ping := func(cursor int64) bool {
		now := s.cfg.Clock.Now()
		age := max(now.Sub(opened), 0).Milliseconds()
		return send(apitype.Frame{Seq: cursor, Type: apitype.FramePing, StreamMS: &age, Claims: s.lease.TrustedFor(wk, now)})
	}

	woke := s.frames.sig.wait()
	frames, head, missed, oldest := s.frames.since(max(after, 0))
	cursor := after
	if after < 0 {
		// No position given: start from now.
		frames, missed, cursor = nil, false, head
	} else if missed {
		cursor = oldest - 1
		if after > head {
			cursor = head
		}
	}
	interval := s.pingInterval()
	if !send(apitype.Frame{
		Seq: cursor, Type: apitype.FrameHello, Missed: missed, Oldest: oldest,
		Liveness: s.cfg.Liveness(), LeaseMS: s.cfg.Lease().Milliseconds(), PingMS: interval.Milliseconds(),
	}) || !ping(cursor) || !flush() {
		return nil
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		for _, f := range frames {
			// A claim_lost frame is addressed to the holder's marker only.
			if f.Marker == "" || f.Marker == wk.Marker {
				if !send(f) {
					return nil
				}
			}
			cursor = f.Seq
		}
		if len(frames) > 0 && !flush() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case <-ticker.C:
			if !ping(cursor) || !flush() {
				return nil
			}
		case <-woke:
		}
		woke = s.frames.sig.wait()
		var lost bool
		frames, _, lost, oldest = s.frames.since(cursor)
		if lost {
			// This reader fell further behind than the buffer holds: it is
			// told what it missed and cut off, so a reader that cannot keep
			// up holds no stream (and no buffer) on this agent; it resumes
			// with ?after= the last seq it read and learns from the hello
			// where the buffer starts.
			_ = send(apitype.Frame{Seq: oldest - 1, Type: apitype.FrameHello, Missed: true, Oldest: oldest,
				Liveness: s.cfg.Liveness(), LeaseMS: s.cfg.Lease().Milliseconds(), PingMS: interval.Milliseconds()})
			_ = flush()
			return nil
		}
	}
}
