package apitype

import (
	"os"
	"path/filepath"
)

// SocketEnv names the environment variable that overrides the socket path
// for every client command and the worker client.
const SocketEnv = "LEASEKEEPER_SOCKET"

// WorkerHeader carries a worker's self-declared marker ("<host>-<pid>" in the
// worker's own pid namespace). The agent reads it only when the kernel cannot
// name the peer's pid (a foreign pid namespace reports pid 0) and the agent
// runs in keepalive liveness mode. It is a claim, not a proof: see the
// socketapi package documentation.
const WorkerHeader = "Leasekeeper-Worker"

// DefaultSocketPath is where the agent listens and the client dials when
// neither a flag nor LEASEKEEPER_SOCKET says otherwise:
// $XDG_RUNTIME_DIR/leasekeeper/leasekeeper.sock when XDG_RUNTIME_DIR is set,
// else ./leasekeeper.sock. The agent and the client both call this one
// function so they cannot disagree.
func DefaultSocketPath() string {
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "leasekeeper", "leasekeeper.sock")
	}
	return "leasekeeper.sock"
}

// SocketPath resolves the socket a client should dial: explicit when set,
// else LEASEKEEPER_SOCKET, else DefaultSocketPath.
func SocketPath(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if env := os.Getenv(SocketEnv); env != "" {
		return env
	}
	return DefaultSocketPath()
}
